/**
 * Fan-out (SPEC.md §5.4): one producer, k subscriber processes that each
 * receive every frame, on one broadcast ring, against what users do without
 * one: publish the same frame once per consumer, into k work-queue rings of one
 * consumer each (bench/host-child.ts does both with the same prepared frame).
 *   - throughput: frames/s that reach all k (publishMany(256), consumers
 *     taking nextBatch()), after WARMUP_FRAMES untimed ones, the mean of two runs;
 *   - latency: a frame every GAP_US to consumers asleep in next(), from the
 *     producer's first publish call to each consumer's next() resolving, all
 *     consumers' samples of two runs pooled, the first LATENCY_WARMUP of each left out.
 * The two sides alternate (ours, theirs, theirs, ours) so that neither always runs on a colder machine.
 */
import type { ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { type CreateOptions } from '../dist/index.js';
import { withRing } from '../test/helpers/ring.js';
import { WARMUP_FRAMES } from './frames.js';
import { compare, LATENCY_WARMUP, percentile, type BenchRecord } from './harness.js';

/** Starts a bench/host-child.ts role (host.ts's child()). */
export type SpawnChild = (role: string, ...args: (string | number)[]) => ChildProcess;

const exited = (p: ChildProcess) => new Promise((r) => p.on('exit', r));
const lines = (p: ChildProcess) => createInterface({ input: p.stdout! })[Symbol.asyncIterator]();

/** `count` rings made with `options`, removed afterwards. */
async function withRings<T>(count: number, options: CreateOptions, fn: (names: string[]) => Promise<T>, names: string[] = []): Promise<T> {
  if (names.length === count) return fn(names);
  return withRing('bench-fan', options, (_ring, name) => withRings(count, options, fn, [...names, name]));
}

/** The rings of one run and where each of its k consumers attaches. */
function layout(k: number, broadcast: boolean): [number, CreateOptions, (names: string[]) => string[]] {
  if (broadcast) return [1, { slots: 1024, delivery: 'all', participants: 64 }, (names) => Array<string>(k).fill(names[0]!)];
  return [k, { slots: 1024 }, (names) => names];
}

async function throughput(spawn: SpawnChild, frames: number, k: number, broadcast: boolean): Promise<number> {
  const [rings, options, attach] = layout(k, broadcast);
  return withRings(rings, options, async (names) => {
    const sinks = attach(names).map((name) => spawn('sink', name, 1, 0));
    const counts = sinks.map((c) => new Promise<number>((r) => c.stdout!.once('data', (d: Buffer) => r(JSON.parse(d.toString()).frames))));
    await new Promise((r) => setTimeout(r, 1500)); // let the consumers attach before publishing
    const flood = spawn('fan-flood', names.join(','), frames);
    const seconds = await new Promise<number>((r) => flood.stdout!.once('data', (d: Buffer) => r(JSON.parse(d.toString()).seconds)));
    await exited(flood);
    for (const c of sinks) c.send('stop');
    const got = await Promise.all(counts);
    if (got.some((c) => c !== frames + WARMUP_FRAMES)) throw new Error(`fan-out: consumers took ${got.join(', ')} of ${frames + WARMUP_FRAMES} frames each`);
    return frames / seconds;
  });
}

async function latency(spawn: SpawnChild, n: number, k: number, broadcast: boolean, gapUs: number): Promise<number[]> {
  const [rings, options, attach] = layout(k, broadcast);
  return withRings(rings, options, async (names) => {
    const sinks = attach(names).map((name) => lines(spawn('latency-sink', name, n + LATENCY_WARMUP)));
    for (const s of sinks) await s.next(); // "ready": subscribed before the first frame
    const producer = spawn('fan-paced', names.join(','), n + LATENCY_WARMUP, gapUs);
    const samples = await Promise.all(sinks.map(async (s) => (JSON.parse((await s.next()).value as string) as number[]).slice(LATENCY_WARMUP)));
    await exited(producer);
    return samples.flat();
  });
}

/** Throughput and p50/p99 latency for each subscriber count, broadcast ring against k work-queue rings. */
export async function fanOutRecords(spawn: SpawnChild, progress: (line: string) => void, counts = [1, 2, 4, 8]): Promise<BenchRecord[]> {
  const records: BenchRecord[] = [];
  const baseline = (k: number) => `the same frame published once per consumer (${k} work-queue ring${k > 1 ? 's' : ''})`;
  // Each side runs twice, in the order ours, theirs, theirs, ours: whichever
  // runs first in a row pays for a colder machine, so neither always does.
  const abba = async <T>(measure: (broadcast: boolean) => Promise<T>): Promise<[T[], T[]]> => {
    const [a1, b1, b2, a2] = [await measure(true), await measure(false), await measure(false), await measure(true)];
    return [[a1, a2], [b1, b2]];
  };
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  for (const k of counts) {
    progress(`fan-out, ${k} subscriber${k > 1 ? 's' : ''} ...`);
    const [ours, theirs] = await abba((broadcast) => throughput(spawn, 100_000, k, broadcast));
    records.push(compare(`fan-out throughput, prepared frame to ${k} subscriber process${k > 1 ? 'es' : ''} (every frame to each)`, 'rate', 'frames/s', mean(ours), baseline(k), mean(theirs), true));
    const [oursRuns, theirsRuns] = await abba((broadcast) => latency(spawn, 1000, k, broadcast, 1000));
    const [oursLat, theirsLat] = [oursRuns.flat(), theirsRuns.flat()];
    for (const p of [50, 99])
      records.push(compare(`fan-out latency, a frame every 1 ms to ${k} sleeping subscriber${k > 1 ? 's' : ''} (publish call to each next())`, `p${p}`, 'µs', percentile(oursLat, p), baseline(k), percentile(theirsLat, p), false));
  }
  return records;
}
