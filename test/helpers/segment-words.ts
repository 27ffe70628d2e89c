/**
 * Raw u64 words of a ring's segment file, read and written as another process
 * could (through the file, not the mapping): for tests that damage the shared
 * words or look at them without the library.
 */
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { ENTRY, HEADER, SLOT, segmentGeometry } from './segment-layout.js';

/** Reads and writes u64 words of ring `name`'s segment file, as another process could. */
export function segmentWords(name: string) {
  const path = `/dev/shm/gpuring.${name}`;
  const header = Buffer.alloc(HEADER.size);
  const fd = openSync(path, 'r');
  readSync(fd, header, 0, HEADER.size, 0);
  closeSync(fd);
  const read = (at: number): bigint => {
    const b = Buffer.alloc(8);
    const f = openSync(path, 'r');
    readSync(f, b, 0, 8, at);
    closeSync(f);
    return b.readBigUInt64LE();
  };
  const write = (at: number, value: bigint): void => {
    const b = Buffer.alloc(8);
    b.writeBigUInt64LE(value);
    const f = openSync(path, 'r+');
    writeSync(f, b, 0, 8, at);
    closeSync(f);
  };
  const g = segmentGeometry(header);
  return { read, write, control: g.control, entry: (i: number) => g.participants + ENTRY.size * i, slot: (i: number) => g.slots + SLOT.size * i };
}
