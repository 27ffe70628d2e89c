/**
 * Rebuilds fixtures/: golden frame bodies and corrupted variants that the
 * TypeScript, C and Python suites all check (fixtures/README.md says how).
 *
 *   node --import tsx scripts/fixtures.ts            # writes new fixtures, refuses to change existing bytes
 *   node --import tsx scripts/fixtures.ts --force    # also rewrites fixtures whose bytes changed
 *   node --import tsx scripts/fixtures.ts --out DIR  # somewhere else (the tests use this)
 *
 * Refusing is the point: a changed golden byte means the wire format changed,
 * which every implementation must follow, not just the one that moved.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { allTypesTable, wideTable } from '../test/helpers/all-types.js';
import { describeBatch } from '../lib/arrow/table-writer.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { decodeFrame } from '../lib/codec/decode.js';
import { absentBuffer, hostBuffer, type BufferDescriptor, type ColumnDescriptor, type FrameDescription } from '../lib/codec/description.js';
import { GpuringError } from '../lib/errors.js';
import { descriptionToJson, descriptionToFlat } from '../test/helpers/fixture-forms.js';
import { corruptions } from './fixture-corruptions.js';
import { cProgram } from '../test/helpers/ring.js';

const outAt = process.argv.indexOf('--out');
const root = outAt > 0 ? process.argv[outAt + 1]! : join(import.meta.dirname, '..', 'fixtures');
const force = process.argv.includes('--force');
const ARENA = '/gpuring.fixture.p0g1.a0';

/** Places buffers at deterministic offsets of one imaginary arena. */
function placer() {
  let at = 64;
  return {
    place(bytes: Uint8Array): BufferDescriptor {
      const b = hostBuffer(ARENA, at, bytes.length);
      at += Math.ceil(bytes.length / 64) * 64 + 64;
      return b;
    },
  };
}

const host = (offset: number, length: number) => hostBuffer(ARENA, offset, length);
const column = (c: Partial<ColumnDescriptor> & Pick<ColumnDescriptor, 'name' | 'format' | 'length' | 'buffers'>): ColumnDescriptor => ({
  nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, nullCount: -1, offset: 0, children: [], ...c,
});
const frame = (rowCount: number, columns: ColumnDescriptor[], extra: Partial<FrameDescription> = {}): FrameDescription => ({
  rowCount, metadata: null, columns, dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(64), ...extra,
});

function cudaBuffer(offset: number, length: number, seed: number): BufferDescriptor {
  const handle = Uint8Array.from({ length: 64 }, (_, i) => (i * 7 + seed) & 0xff);
  const deviceUuid = Uint8Array.from({ length: 16 }, (_, i) => (i * 13 + 1) & 0xff);
  return { kind: 'cuda-ipc', deviceOrdinal: 1, deviceUuid, offset, length, allocationId: 0x8000000000000000n + BigInt(seed), handle };
}

function poolBuffer(offset: number, length: number, seed: number): BufferDescriptor {
  return { ...cudaBuffer(offset, length, seed), kind: 'cuda-pool', poolId: 0x4000000000000000n + BigInt(seed) };
}

function vmmBuffer(offset: number, length: number, chunks: number): BufferDescriptor {
  const handle = new Uint8Array(64);
  const v = new DataView(handle.buffer);
  v.setBigUint64(0, BigInt(chunks * (20 << 20)), true);
  v.setUint32(8, chunks, true);
  return { ...cudaBuffer(offset, length, 5), kind: 'cuda-vmm', allocationId: 17n, handle };
}

/** Every golden frame, by name. */
export function goldenFrames(): Record<string, FrameDescription> {
  const frames: Record<string, FrameDescription> = {
    'all-types': describeBatch(allTypesTable(7), placer()),
    'zero-rows': describeBatch(allTypesTable(7).slice(0, 0), placer()),
    'wide-1000-columns': describeBatch(wideTable(1000, 2), placer()),
    // int32 slice at element offset 3 with a validity bitmap read from bit 3
    'slice-odd-bit-offset': frame(5, [column({ name: 'x', format: 'i', length: 5, nullCount: 2, offset: 3, buffers: [host(64, 1), host(128, 32)] })]),
    'utf8-slice': frame(2, [column({ name: 's', format: 'u', length: 2, nullCount: 0, offset: 5, buffers: [absentBuffer(), host(64, 32), host(128, 40)] })]),
    'empty-column-absent-buffers': frame(0, [column({ name: 'e', format: 'l', length: 0, nullCount: 0, buffers: [absentBuffer(), absentBuffer()] })]),
    'nested-list-of-struct': frame(3, [
      column({ name: 'ls', format: '+l', length: 3, nullCount: 0, buffers: [absentBuffer(), host(64, 16)], children: [
        column({ name: 'item', format: '+s', length: 6, nullCount: 1, buffers: [host(128, 1)], children: [
          column({ name: 'a', format: 'g', length: 6, nullCount: 0, buffers: [absentBuffer(), host(192, 48)] }),
          column({ name: 'b', format: 'z', length: 6, nullCount: 0, buffers: [absentBuffer(), host(256, 28), host(320, 9)] }),
        ] }),
      ] }),
    ]),
    'dictionary-ordered': frame(4, [column({ name: 'd', format: 'c', length: 4, nullCount: 0, dictionary: 0, dictionaryOrdered: true, buffers: [absentBuffer(), host(64, 4)] })], {
      dictionaries: [column({ name: '', format: 'u', length: 2, nullCount: 0, buffers: [absentBuffer(), host(128, 12), host(192, 6)] })],
    }),
    'metadata-unicode': frame(1, [column({ name: 'prix €', format: 'f', length: 1, nullCount: 0, metadata: [['unité', 'mm'], ['', '']], buffers: [absentBuffer(), host(64, 4)] })], {
      metadata: [['source', 'fixtures'], ['ключ', 'значение']],
    }),
    'cuda-ipc-tensor-with-event': frame(4, [
      column({ name: 'tensor', format: '+w:3', length: 4, nullCount: 0, nullable: false, buffers: [absentBuffer()], children: [
        column({ name: 'v', format: 'f', length: 12, nullCount: 0, nullable: false, buffers: [absentBuffer(), cudaBuffer(512, 48, 1)] }),
      ] }),
    ], { syncKind: 2, syncHandle: Uint8Array.from({ length: 64 }, (_, i) => 255 - i) }),
    // a nullable float64 column whose validity and data are two allocations of one stream-ordered pool
    'cuda-pool-column': frame(6, [
      column({ name: 'p', format: 'g', length: 6, nullCount: 1, buffers: [poolBuffer(0, 1, 2), poolBuffer(256, 48, 3)] }),
    ]),
    // an int64 column in a span of VMM chunks (PyTorch expandable segments), 20 MiB into the span
    'cuda-vmm-column': frame(3, [
      column({ name: 'v', format: 'l', length: 3, nullCount: 0, nullable: false, buffers: [absentBuffer(), vmmBuffer(20 << 20, 24, 2)] }),
    ]),
  };
  return frames;
}

const changed: string[] = [];
function put(path: string, data: Uint8Array | string): void {
  const bytes = typeof data === 'string' ? Buffer.from(data) : Buffer.from(data);
  if (existsSync(path)) {
    if (Buffer.compare(readFileSync(path), bytes) === 0) return;
    if (!force) {
      changed.push(path);
      return;
    }
  }
  writeFileSync(path, bytes);
}

function codeOf(bytes: Uint8Array): string {
  try {
    decodeFrame(bytes);
    return 'OK';
  } catch (e) {
    if (e instanceof GpuringError) return e.code;
    throw e;
  }
}

/** The segment images are made by the C implementation (interop/tests/segment_images.c). */
function segmentImages(): number {
  const made = mkdtempSync(join(tmpdir(), 'gpuring-images-'));
  try {
    execFileSync(cProgram('segment_images'), [made]);
    mkdirSync(join(root, 'segments'), { recursive: true });
    const files = readdirSync(made);
    for (const f of files) put(join(root, 'segments', f), readFileSync(join(made, f)));
    return files.filter((f) => f.endsWith('.expect')).length;
  } finally {
    rmSync(made, { recursive: true, force: true });
  }
}

function main(): void {
  for (const dir of ['frames', 'corrupt']) mkdirSync(join(root, dir), { recursive: true });
  const bodies: Record<string, Uint8Array> = {};
  for (const [name, d] of Object.entries(goldenFrames())) {
    const bytes = (bodies[name] = encodeFrame(d));
    put(join(root, 'frames', `${name}.bin`), bytes);
    put(join(root, 'frames', `${name}.json`), `${JSON.stringify(descriptionToJson(d), null, 1)}\n`);
    put(join(root, 'frames', `${name}.flat`), descriptionToFlat(d));
  }
  const index: Record<string, { from: string; code: string; what: string }> = {};
  for (const c of corruptions(bodies)) {
    const code = codeOf(c.bytes);
    if (code === 'OK') throw new Error(`corruption ${c.name} is accepted by the decoder: fix the generator`);
    index[c.name] = { from: c.from, code, what: c.what };
    put(join(root, 'corrupt', `${c.name}.bin`), c.bytes);
  }
  put(join(root, 'corrupt', 'index.json'), `${JSON.stringify(index, null, 1)}\n`);
  put(join(root, 'corrupt', 'codes.txt'), Object.entries(index).map(([n, v]) => `${n} ${v.code}\n`).join(''));
  const images = segmentImages();
  if (changed.length) {
    console.error(`refusing to overwrite ${changed.length} fixture(s) whose bytes changed (rerun with --force if the wire format changed on purpose):\n  ${changed.join('\n  ')}`);
    process.exit(1);
  }
  console.log(`fixtures: ${Object.keys(bodies).length} frames, ${Object.keys(index).length} corrupted variants, ${images} segment images in ${root}`);
}

if (import.meta.url === `file://${process.argv[1]}`) main();
