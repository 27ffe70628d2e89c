/**
 * Damaged segment images through the whole Node API (the C suite's
 * fuzz_segment and Python's test_segment_fuzz.py, for the addon and the
 * TypeScript above it): a golden image with random bytes changed in its
 * segment and arena, or either cut short, goes through open, inspect, sweep,
 * a consumer taking (one by one, or in batches through nextBatchSync, which
 * arms its doorbell) and reading every frame, and a producer publishing one.
 * Every call must return or throw a GpuringError; the tally of outcomes shows
 * the run was not vacuous.
 */
import { tableFromArrays } from 'apache-arrow';
import { Consumer, GpuringError, Producer, Ring, type Frame } from '../../lib/index.js';
import { imageBytes, imageRing, loadImageBytes, unloadImage } from './segment-image.js';

const ARENA_SPAN = 8192; // the arena's header and the images' frame bodies lie in its first pages
const WORDS = [0n, 1n, 2n ** 48n - 1n, 2n ** 53n, 2n ** 63n, 2n ** 64n - 1n];

/** A seeded generator of numbers in [0, n). */
export function seeded(seed: number): (n: number) => number {
  let s = seed;
  return (n) => ((s = (Math.imul(s, 1103515245) + 12345) & 0x7fffffff), Math.floor((s / 0x80000000) * n));
}

/** In the first `span` bytes, 1-8 changes: a flipped bit, an edge byte, an edge or random 64-bit word, a random byte. */
function mutate(b: Buffer, span: number, rnd: (n: number) => number): void {
  const n = Math.min(b.length, span);
  if (n === 0) return;
  for (let k = 1 + rnd(8); k > 0; k--) {
    const at = rnd(n);
    const kind = rnd(10);
    if (kind < 3) b[at]! ^= 1 << rnd(8);
    else if (kind < 5) b[at] = [0, 1, 0x7f, 0x80, 0xff][rnd(5)]!;
    else if (kind < 8 && (at & ~7) + 8 <= n) b.writeBigUInt64LE(rnd(2) ? WORDS[rnd(WORDS.length)]! : (BigInt(rnd(2 ** 32)) << 32n) | BigInt(rnd(2 ** 32)), at & ~7);
    else b[at] = rnd(256);
  }
}

export type Tally = Record<string, number>;

/** Counts a GpuringError by its code; throws anything else. */
function counted(tally: Tally, error: unknown): null {
  if (!(error instanceof GpuringError)) throw error;
  count(tally, error.code);
  return null;
}

async function typed<T>(tally: Tally, call: () => T | Promise<T>): Promise<T | null> {
  try {
    return await call();
  } catch (error) {
    return counted(tally, error);
  }
}

function count(tally: Tally, what: string): void {
  tally[what] = (tally[what] ?? 0) + 1;
}

/** The next frames, one or a batch; [] when the ring is empty; null when the take failed (counted). */
async function take(consumer: Consumer, batches: boolean, tally: Tally): Promise<Frame[] | null> {
  try {
    if (batches) return consumer.nextBatchSync({ timeout: 0 });
    const f = consumer.tryNext();
    return f ? [f] : [];
  } catch (error) {
    return error instanceof GpuringError && error.code === 'TIMEOUT' ? [] : counted(tally, error);
  }
}

async function takeAndRead(consumer: Consumer, batches: boolean, tally: Tally): Promise<void> {
  for (let k = 0; k < 8; k++) {
    const frames = await take(consumer, batches, tally);
    if (frames?.length === 0) return;
    for (const f of frames ?? []) {
      if (await typed(tally, () => f.toTable())) count(tally, 'frames read');
      await typed(tally, () => f.columns().map((v) => v.values));
      f.release();
    }
  }
}

async function exercise(tally: Tally, batches: boolean): Promise<void> {
  const ring = await typed(tally, () => Ring.open(imageRing, { openTimeout: 10 }));
  if (!ring) return;
  count(tally, 'opened');
  await typed(tally, () => ring.inspect());
  await typed(tally, () => ring.sweep());
  ring.close();
  const consumer = await typed(tally, () => Consumer.open(imageRing, { openTimeout: 10 }));
  if (consumer) {
    await takeAndRead(consumer, batches, tally);
    consumer.close();
  }
  const producer = await typed(tally, () => Producer.open(imageRing, { openTimeout: 10 }));
  if (!producer) return;
  if ((await typed(tally, () => producer.publish(tableFromArrays({ seq: BigInt64Array.from([1n, 2n, 3n]) }), { timeout: 0 }))) !== null) count(tally, 'published');
  producer.close();
}

/** `iterations` damaged images from `dir`; throws (naming the iteration and image) at the first error that is not a GpuringError. */
export async function fuzzImages(dir: string, images: string[], iterations: number, seed: number): Promise<Tally> {
  const rnd = seeded(seed);
  const tally: Tally = {};
  try {
    for (let i = 0; i < iterations; i++) {
      const image = images[rnd(images.length)]!;
      const b = imageBytes(dir, image);
      if (rnd(10) < 9) mutate(b.segment, b.segment.length, rnd);
      if (b.arena && rnd(10) < 3) mutate(b.arena, ARENA_SPAN, rnd);
      if (rnd(20) === 0) b.segment = b.segment.subarray(0, rnd(b.segment.length + 1));
      if (b.arena && rnd(20) === 0) b.arena = b.arena.subarray(0, rnd(b.arena.length + 1));
      unloadImage();
      loadImageBytes(b);
      try {
        await exercise(tally, i % 2 === 1);
      } catch (error) {
        throw new Error(`iteration ${i} (seed ${seed}) of image ${image}: ${String(error)}`, { cause: error });
      }
    }
  } finally {
    unloadImage();
  }
  return tally;
}
