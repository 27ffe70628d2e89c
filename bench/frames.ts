/** The small frame the latency benchmarks hand over: 8 int32 columns of one row. */
import { makeVector, Table } from 'apache-arrow';
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
