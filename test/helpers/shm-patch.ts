// Where a ring's slots and frames lie in /dev/shm, and how a test overwrites
// bytes there: damage as another process (or a bug) would leave it.
import { closeSync, openSync, readSync, writeSync } from 'node:fs';

const SLOT_BYTES = 128;

/** Writes `bytes` at `offset` of the file at `path`. */
export function patch(path: string, offset: number, bytes: Uint8Array): void {
  const fd = openSync(path, 'r+');
  writeSync(fd, bytes, 0, bytes.length, offset);
  closeSync(fd);
}

/** `length` bytes at `offset` of the file at `path`. */
export function read(path: string, offset: number, length: number): DataView {
  const out = new Uint8Array(length);
  const fd = openSync(path, 'r');
  readSync(fd, out, 0, length, offset);
  closeSync(fd);
  return new DataView(out.buffer);
}

export const u32 = (v: number) => new Uint8Array(new Uint32Array([v]).buffer);
export const u64 = (v: bigint) => new Uint8Array(new BigUint64Array([v]).buffer);

/** Where slot `pos`'s frame reference and that frame's body lie. */
export function locate(name: string, pos: number) {
  const seg = `/dev/shm/gpuring.${name}`;
  const h = read(seg, 0, 256);
  const slot = Number(h.getBigUint64(64, true)) + (pos % h.getUint32(32, true)) * SLOT_BYTES;
  const ref = read(seg, slot + 16, 48);
  const arena = `/dev/shm/gpuring.${name}.p${ref.getUint32(8, true)}g${ref.getUint32(12, true)}.a${ref.getUint32(16, true)}`;
  return { seg, slot, arena, body: Number(ref.getBigUint64(24, true)) };
}
