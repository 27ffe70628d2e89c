/** The small frame the latency benchmarks hand over: 8 int32 columns of one row. */
import { Dictionary, Field, FixedSizeList, Float32, Float64, Int32, List, makeVector, Struct, Table, Utf8, vectorFromArray } from 'apache-arrow';
import { describeBatch } from '../dist/arrow/table-writer.js';
import { absentBuffer, hostBuffer, type FrameDescription } from '../dist/codec/description.js';

export function smallFrame(): Table {
  const columns: Record<string, ReturnType<typeof makeVector>> = {};
  for (let c = 0; c < 8; c++) columns[`c${c}`] = makeVector(Int32Array.of(c));
  return new Table(columns);
}

/** The same frame's description (names, types, lengths, buffer handles). */
export function smallFrameDescription(): FrameDescription {
  return describeBatch(smallFrame(), { place: (b) => hostBuffer('/gpuring.bench.p0g1.a0', 64, b.length) });
}

/**
 * The smallest frame a prepared publish sends: one int32 column of zero rows
 * (no buffers), so a publish costs the ring and the wake-up, nothing else.
 */
export function emptyFrameDescription(): FrameDescription {
  return describeBatch(new Table({ c0: makeVector(new Int32Array(0)) }), { place: () => absentBuffer() });
}

/**
 * The nested frame of the throughput benchmark: 16 rows of a list, a
 * fixed-size list (an embedding), a struct, a dictionary-encoded string and a
 * list of structs, with nulls: what a model's output or a cuDF frame with
 * categories carries, and what a flat frame's fast paths do not cover.
 */
export function nestedFrame(): Table {
  const ids = Array.from({ length: 16 }, (_, i) => i);
  return new Table({
    tags: vectorFromArray(ids.map((i) => (i % 5 === 0 ? null : Array.from({ length: i % 4 }, (_, k) => i + k))), new List(new Field('item', new Int32(), true))),
    embedding: vectorFromArray(ids.map((i) => [i, i / 2, i / 4, i / 8]), new FixedSizeList(4, new Field('v', new Float32(), false))),
    point: vectorFromArray(ids.map((i) => ({ x: i, y: i / 3 })), new Struct([new Field('x', new Int32()), new Field('y', new Float64())])),
    kind: vectorFromArray(ids.map((i) => (i % 7 === 0 ? null : ['red', 'green', 'blue'][i % 3]!)), new Dictionary(new Utf8(), new Int32())),
    groups: vectorFromArray(ids.map((i) => Array.from({ length: i % 3 }, (_, k) => ({ n: k, w: i + k / 8 }))), new List(new Field('g', new Struct([new Field('n', new Int32()), new Field('w', new Float64())]), true))),
  });
}

/**
 * A description as JSON, handles as arrays of byte values: what users send
 * over sockets today, serialized per frame because every frame's differs.
 */
export function toJson(value: unknown): string {
  return JSON.stringify(value, (_k, v) => (v instanceof Uint8Array ? Array.from(v) : typeof v === 'bigint' ? String(v) : v));
}

/**
 * Frames every throughput run sends before it starts timing, gpuring's and the
 * socket baseline's alike: throughput is the steady state, after both ends'
 * code is compiled (the first thousand frames run several times slower).
 */
export const WARMUP_FRAMES = 5120;
