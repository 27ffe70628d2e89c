/**
 * `gpuring demo`: a producer process streams multi-type tables through a fresh
 * ring to a consumer process, in three steps that report apart:
 *   1. transport: `frames` frames as fast as the ring takes them, each made a
 *      Table by the consumer and released (what a zero-copy consumer does);
 *   2. latency: frames one at a time, each published once the last was
 *      released: publish call until toTable() returned in the other process;
 *   3. verification: `frames` frames again, every value of every one checked
 *      against the table it should be (slow: that is JavaScript comparing).
 * With `--device N` the producer uploads each table to GPU N and publishes it
 * as device columns; the consumer maps them and copies them to the host.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PlainTable, tableDifference } from '../arrow/compare.js';
import { forEachBuffer } from '../codec/description.js';
import { Consumer } from '../consumer.js';
import { cudaInfo } from '../device-buffer.js';
import { GpuringError } from '../errors.js';
import type { Frame } from '../frame.js';
import { Producer } from '../producer.js';
import { Ring } from '../ring.js';
import { demoTable } from './demo-table.js';
import { bytes, type Output } from './output.js';
import { ProgressBar } from './progress-bar.js';

const DISTINCT_TABLES = 16;
/** Frames of the latency step: enough for a p99. */
const LATENCY_FRAMES = 300;
const main = fileURLToPath(new URL(`./main${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

/** What the consumer process prints: progress lines, then one result. */
type ConsumerLine =
  | { type: 'progress'; step: Step; done: number; total: number }
  | { type: 'result'; transport: Transport; latency: Latency; verification: Verification };
type Step = 'transport' | 'latency' | 'verification';
interface Transport { frames: number; bytes: number; seconds: number }
interface Latency { frames: number; p50Us: number; p99Us: number }
interface Verification { frames: number; mismatches: number; firstMismatch: string | null; seconds: number }

/** Verification frame i carries table (i % 16) + 1, tagged with its seed. */
function seedOf(i: number): number {
  return (i % DISTINCT_TABLES) + 1;
}

const now = () => process.hrtime.bigint();
const tablesOf = (rows: number) => Array.from({ length: DISTINCT_TABLES }, (_, i) => demoTable(i + 1, rows));

/** `device` < 0: host memory. */
export async function demoProducer(name: string, frames: number, rows: number, device: number): Promise<void> {
  const tables = tablesOf(rows);
  const producer = Producer.open(name);
  const on = device >= 0 ? { device } : {};
  for (let i = 0; i < frames; i++) await producer.publish(tables[i % DISTINCT_TABLES]!, { tag: now(), ...on });
  await producer.drain();
  for (let i = 0; i < LATENCY_FRAMES; i++) {
    await producer.publish(tables[i % DISTINCT_TABLES]!, { tag: now(), ...on });
    await producer.drain();
  }
  for (let i = 0; i < frames; i++) await producer.publish(tables[seedOf(i) - 1]!, { tag: BigInt(seedOf(i)), ...on });
  await producer.drain();
  producer.close();
}

/** Bytes of a frame's column buffers (values, validity, offsets; children and dictionaries too). */
function frameBytes(frame: Frame): number {
  let bytes = 0;
  forEachBuffer(frame.description, (b) => (bytes += b.length));
  return bytes;
}

/** Runs `count` frames of one step through `each`, printing progress about four times a second. */
async function step(consumer: Consumer, name: Step, count: number, each: (frame: Frame, i: number) => void): Promise<void> {
  let shown = 0;
  for (let i = 0; i < count; i++) {
    const frame = await consumer.next({ timeout: 30_000 });
    each(frame, i);
    frame.release();
    if (performance.now() - shown > 250 || i + 1 === count) {
      process.stdout.write(`${JSON.stringify({ type: 'progress', step: name, done: i + 1, total: count })}\n`);
      shown = performance.now();
    }
  }
}

export async function demoConsumer(name: string, frames: number, rows: number): Promise<void> {
  const expected = tablesOf(rows).map((t) => new PlainTable(t));
  const consumer = Consumer.open(name);
  const transport: Transport = { frames, bytes: 0, seconds: 0 };
  let started = 0n;
  await step(consumer, 'transport', frames, (frame, i) => {
    if (i === 0) started = frame.tag;
    frame.toTable();
    transport.bytes += frameBytes(frame);
  });
  transport.seconds = Number(now() - started) / 1e9;
  const waits: number[] = [];
  await step(consumer, 'latency', LATENCY_FRAMES, (frame) => {
    frame.toTable();
    waits.push(Number(now() - frame.tag) / 1000);
  });
  waits.sort((a, b) => a - b);
  const latency: Latency = { frames: LATENCY_FRAMES, p50Us: waits[Math.floor(waits.length / 2)]!, p99Us: waits[Math.floor(waits.length * 0.99)]! };
  const verification: Verification = { frames, mismatches: 0, firstMismatch: null, seconds: 0 };
  const checking = performance.now();
  await step(consumer, 'verification', frames, (frame) => {
    const difference = tableDifference(expected[Number(frame.tag) - 1]!, frame.toTable());
    if (difference) (verification.mismatches++, (verification.firstMismatch ??= difference));
  });
  verification.seconds = (performance.now() - checking) / 1000;
  consumer.close();
  process.stdout.write(`${JSON.stringify({ type: 'result', transport, latency, verification })}\n`);
}

function child(role: string, name: string, ...args: number[]) {
  // '--': the device argument may be -1, which would read as an option
  return spawn(process.execPath, [...process.execArgv, main, '--', role, name, ...args.map(String)], { stdio: ['ignore', 'pipe', 'inherit'] });
}

function exited(proc: ReturnType<typeof child>): Promise<number> {
  return new Promise((resolve) => proc.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1))));
}

/** Fails at once, rather than in the producer process, where device `device` cannot be used. */
function requireDevice(device: number): void {
  const info = cudaInfo();
  if (!info.available) throw new GpuringError('CUDA_UNAVAILABLE', `--device needs the CUDA driver: ${info.error}`);
  if (device >= info.devices.length) throw new GpuringError('DEVICE_NOT_FOUND', `no CUDA device ${device} (${info.devices.length} visible)`);
}

const STEP_LABELS: Record<Step, string> = { transport: 'transport', latency: 'latency, one frame at a time', verification: 'verifying every value' };

/** `device` < 0: host memory. */
export async function demoCommand(frames: number, rows: number, device: number, out: Output): Promise<boolean> {
  if (device >= 0) requireDevice(device);
  const name = `demo-${process.pid}`;
  const ring = Ring.create(name, { slots: 64 });
  try {
    const memory = device < 0 ? 'host memory' : `device memory on GPU ${device}`;
    out.progress(`ring ${name}: producer process -> consumer process, ${frames} frames of ${rows} rows x 9 columns in ${memory} (int32, float64, utf8 with nulls, bool, timestamp, list<int32>, fixed_size_list<float32>[4], dictionary<utf8>, struct)`);
    const consumer = child('demo-consumer', name, frames, rows);
    const producer = child('demo-producer', name, frames, rows, device);
    const bar = new ProgressBar(process.stderr, out.json);
    let result: Extract<ConsumerLine, { type: 'result' }> | undefined;
    createInterface({ input: consumer.stdout! }).on('line', (text) => {
      const line = JSON.parse(text) as ConsumerLine;
      if (line.type === 'result') result = line;
      else bar.update(STEP_LABELS[line.step], line.done, line.total);
    });
    const [pc, cc] = await Promise.all([exited(producer), exited(consumer)]);
    bar.finish();
    const summary = demoSummary(name, memory, frames, rows, result, pc, cc);
    out.result(summary, () => formatSummary(summary, producer.pid!, consumer.pid!));
    return summary.ok;
  } finally {
    ring.close();
    Ring.unlink(name);
  }
}

type DemoSummary = ReturnType<typeof demoSummary>;

function demoSummary(ring: string, memory: string, frames: number, rows: number, r: Extract<ConsumerLine, { type: 'result' }> | undefined, pc: number, cc: number) {
  const t = r?.transport;
  const ok = pc === 0 && cc === 0 && r !== undefined && r.verification.frames === frames && r.verification.mismatches === 0;
  return {
    ok, ring, memory, frames, rowsPerFrame: rows,
    transport: t ? { ...t, framesPerSecond: t.frames / t.seconds, bytesPerSecond: t.bytes / t.seconds } : null,
    latency: r?.latency ?? null,
    verification: r?.verification ?? null,
    producerExit: pc,
    consumerExit: cc,
  };
}

function formatSummary(s: DemoSummary, producerPid: number, consumerPid: number): string {
  const { transport: t, latency: l, verification: v } = s;
  if (!t || !l || !v) return `FAILED: producer exit ${s.producerExit}, consumer exit ${s.consumerExit}`;
  const count = (n: number) => Math.round(n).toLocaleString('en-US');
  return [
    `transport: ${t.frames} frames of ${s.rowsPerFrame} rows (${bytes(t.bytes)} of column buffers in ${s.memory}) from pid ${producerPid} to pid ${consumerPid}, each made a Table and released`,
    `  ${count(t.framesPerSecond)} frames/s, ${bytes(t.bytesPerSecond)}/s, ${(t.seconds * 1000).toFixed(1)} ms in all`,
    `hand-off latency, one frame at a time (publish call until toTable() returned in the consumer): p50 ${l.p50Us.toFixed(1)} µs, p99 ${l.p99Us.toFixed(1)} µs over ${l.frames} frames`,
    `verification: every value of ${v.frames} frames checked by the consumer in ${v.seconds.toFixed(2)} s (JavaScript comparing values, not the ring)`,
    s.ok ? '  every value matched: ok' : `  FAILED: ${v.firstMismatch ?? `producer exit ${s.producerExit}, consumer exit ${s.consumerExit}`}`,
  ].join('\n');
}
