/**
 * `gpuring demo`: a producer process streams multi-type tables through a fresh
 * ring to a consumer process, which checks every value of every frame. With
 * `--device N` the producer uploads each table to GPU N and publishes it as
 * device columns; the consumer maps them and copies them to the host to check.
 */
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { tableDifference } from '../arrow/compare.js';
import { Consumer } from '../consumer.js';
import { cudaInfo } from '../device-buffer.js';
import { GpuringError } from '../errors.js';
import { Producer } from '../producer.js';
import { Ring } from '../ring.js';
import { demoTable } from './demo-table.js';
import { bytes, type Output } from './output.js';

const DISTINCT_TABLES = 16;
const main = fileURLToPath(new URL(`./main${extname(fileURLToPath(import.meta.url))}`, import.meta.url));

interface ConsumerReport {
  type: 'progress' | 'result';
  received: number;
  mismatches: number;
  firstMismatch?: string;
  bytes: number;
  seconds: number;
}

/** Frame i carries table (i % 16) + 1, tagged with its seed. */
function seedOf(i: number): number {
  return (i % DISTINCT_TABLES) + 1;
}

/** `device` < 0: host memory. */
export async function demoProducer(name: string, frames: number, rows: number, device: number): Promise<void> {
  const tables = Array.from({ length: DISTINCT_TABLES }, (_, i) => demoTable(i + 1, rows));
  const producer = Producer.open(name);
  const on = device >= 0 ? { device } : {};
  for (let i = 0; i < frames; i++) await producer.publish(tables[seedOf(i) - 1]!, { tag: BigInt(seedOf(i)), ...on });
  await producer.drain();
  producer.close();
}

export async function demoConsumer(name: string, frames: number, rows: number): Promise<void> {
  const tables = Array.from({ length: DISTINCT_TABLES }, (_, i) => demoTable(i + 1, rows));
  const consumer = Consumer.open(name);
  const report: ConsumerReport = { type: 'progress', received: 0, mismatches: 0, bytes: 0, seconds: 0 };
  let start = 0;
  let lastReport = 0;
  const emit = () => process.stdout.write(`${JSON.stringify(report)}\n`);
  while (report.received < frames) {
    const frame = await consumer.next({ timeout: 30_000 });
    start ||= performance.now();
    const difference = tableDifference(tables[Number(frame.tag) - 1]!, frame.toTable());
    if (difference) (report.mismatches++, (report.firstMismatch ??= difference));
    const visit = (cols: typeof frame.description.columns): number => cols.reduce((n, c) => n + c.buffers.reduce((m, b) => m + b.length, 0) + visit(c.children), 0);
    report.bytes += visit(frame.description.columns) + visit(frame.description.dictionaries);
    frame.release();
    report.received++;
    report.seconds = (performance.now() - start) / 1000;
    if (performance.now() - lastReport > 250) (emit(), (lastReport = performance.now()));
  }
  consumer.close();
  report.type = 'result';
  emit();
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
    let last: ConsumerReport | undefined;
    createInterface({ input: consumer.stdout! }).on('line', (line) => {
      last = JSON.parse(line) as ConsumerReport;
      if (last.type === 'progress') out.progress(`  ${last.received}/${frames} frames received and verified`);
    });
    const [pc, cc] = await Promise.all([exited(producer), exited(consumer)]);
    const r = last;
    const ok = pc === 0 && cc === 0 && r?.type === 'result' && r.received === frames && r.mismatches === 0;
    const summary = {
      ok,
      ring: name,
      memory,
      frames,
      rowsPerFrame: rows,
      received: r?.received ?? 0,
      mismatches: r?.mismatches ?? null,
      firstMismatch: r?.firstMismatch ?? null,
      bytes: r?.bytes ?? 0,
      seconds: r?.seconds ?? 0,
      framesPerSecond: r && r.seconds ? r.received / r.seconds : 0,
      bytesPerSecond: r && r.seconds ? r.bytes / r.seconds : 0,
      producerExit: pc,
      consumerExit: cc,
    };
    out.result(summary, () =>
      [
        `${summary.received} frames (${summary.received * rows} rows, ${bytes(summary.bytes)} of column buffers in ${memory}) crossed from pid ${producer.pid} to pid ${consumer.pid} in ${summary.seconds.toFixed(2)} s`,
        `  ${Math.round(summary.framesPerSecond).toLocaleString('en-US')} frames/s, ${bytes(summary.bytesPerSecond)}/s, each value checked by the consumer`,
        ok ? '  every value matched: ok' : `  FAILED: ${summary.firstMismatch ?? `producer exit ${pc}, consumer exit ${cc}`}`,
      ].join('\n'),
    );
    return ok;
  } finally {
    ring.close();
    Ring.unlink(name);
  }
}
