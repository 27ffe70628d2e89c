// Hostile arguments to every public call: each call either works or fails with a
// GpuringError carrying a known code, the process never crashes, and the ring
// still carries frames afterwards. The first run found a loan() that needed an arena
// over Node's ArrayBuffer limit aborting the process ("double free", see
// test/large-arena.test.ts), and TypeErrors where a GpuringError belongs (a
// bigint segment name, a host buffer whose handle is not bytes, a symbol in an
// error message, on('release', 'not a function')). GPURING_FUZZ_API_CALLS and
// GPURING_FUZZ_SEED change the count and the seed; a failure names both.
import { constants } from 'node:buffer';
import { readdirSync } from 'node:fs';
import { Field, Float64, Int32, Schema, tableFromArrays, Utf8 } from 'apache-arrow';
import test from 'ava';
import { Consumer, decodeFrame, encodeFrame, ERROR_CODES, Frame, GpuringError, hostBuffer, Producer, Ring } from '../lib/index.js';
import { withRing } from './helpers/ring.js';

const CALLS = Number(process.env.GPURING_FUZZ_API_CALLS ?? 3000);
const SEED = Number(process.env.GPURING_FUZZ_SEED ?? 20261129);

/** mulberry32: a small seeded generator, so that a failure can be replayed. */
function generator(seed: number): () => number {
  let s = seed | 0;
  return () => {
    s = (s + 0x6d2b79f5) | 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const rnd = generator(SEED);
const pick = <T>(items: T[]): T => items[Math.floor(rnd() * items.length)]!;
// Sizes past Node's ArrayBuffer limit are refused before an arena is made; those
// below it would reserve that much /dev/shm, so the others stay small (2^20 rows of a loan: ~10 MiB).
const huge = constants.MAX_LENGTH <= 2 ** 32 ? [2 ** 32, 2 ** 40] : [];
const OPTION_KEYS = ['timeout', 'tag', 'spin', 'max', 'slots', 'device', 'stream', 'signal', 'tags', 'onSlow', 'start', 'arenaBytes', 'bytes', 'sweepInterval'];

function weird(): unknown {
  const values: (() => unknown)[] = [
    () => undefined, () => null, () => NaN, () => Infinity, () => -Infinity, () => -1, () => 0, () => -0, () => 1.5, () => 2 ** 20, () => 2 ** 53, () => -(2 ** 53), () => 1e300,
    ...huge.map((n) => () => n),
    () => '', () => 'x', () => 'a'.repeat(300), () => '\0', () => '../x', () => true, () => ({}), () => [], () => [1, 2], () => 1n, () => -1n, () => 2n ** 64n,
    () => Symbol('s'), () => () => 1, () => new Uint8Array(0), () => new Uint8Array(64), () => new ArrayBuffer(8),
    () => ({ [pick(OPTION_KEYS)]: weird() }),
  ];
  return pick(values)();
}

/** A copy of `v` with some leaves swapped for weird values, entries dropped or numbers nudged. */
function mutate(v: unknown): unknown {
  if (rnd() < 0.08) return weird();
  if (Array.isArray(v)) return v.map(mutate).concat(rnd() < 0.05 ? [weird()] : []);
  if (v instanceof Uint8Array) return rnd() < 0.1 ? new Uint8Array(Math.floor(rnd() * 80)) : v.slice();
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).filter(() => rnd() > 0.02).map(([k, x]) => [k, mutate(x)]));
  if (typeof v === 'number' && rnd() < 0.15) return pick([v + 1, v - 1, v * 2 ** 20, -v, v + 0.5, 2 ** 32 + v]);
  return v;
}

/** Releases the frames a call hands out, whenever it does (a wait may outlive its call). */
function releaseAll(value: unknown): void {
  for (const f of Array.isArray(value) ? value : [value]) if (f instanceof Frame && !f.released) f.release();
}

test(`${CALLS} calls with hostile arguments: each works or throws a GpuringError with a known code; the ring carries frames after (seed ${SEED})`, async (t) => {
  t.timeout(10 * 60_000);
  const failures = new Map<string, string>();
  const created: string[] = [];
  let ring = '';
  await withRing('api-fuzz', { slots: 16 }, async (_ring, name) => {
    ring = name;
    const producer = Producer.open(name);
    let consumer = Consumer.open(name);
    const table = tableFromArrays({ a: Int32Array.from([1, 2, 3]), b: Float64Array.from([1, 2, 3]), s: ['x', 'y', null] });
    await producer.publish(table);
    const first = await consumer.next({ timeout: 5000 });
    const description = first.description;
    first.release();
    const schema = new Schema([new Field('a', new Int32(), true), new Field('s', new Utf8(), true)]);
    const calls: [string, () => unknown][] = [
      ['Ring.create', () => { const n = weird() as string; const r = Ring.create(n, weird() as never); created.push(n); r.close(); }],
      ['Ring.open', () => Ring.open(weird() as string, weird() as never).close()],
      ['Producer.open', () => Producer.open(pick([name, weird()]) as string, weird() as never).close()],
      ['Consumer.open', () => Consumer.open(pick([name, weird()]) as string, weird() as never).close()],
      ['publish', () => producer.publish(pick([table, weird()]) as never, weird() as never)],
      ['allocate', () => producer.allocate(weird() as number).free()],
      ['publishFrame', () => producer.publishFrame(mutate(description) as never, pick([undefined, weird()]) as never)],
      ['prepare', () => producer.prepare(mutate(description) as never, pick([undefined, weird()]) as never).publish(weird() as never)],
      ['publishMany', () => producer.prepare(description).publishMany(weird() as number, weird() as never)],
      ['loan', () => { const loan = producer.loan(pick([schema, weird()]) as never, weird() as number, pick([{}, weird()]) as never); try { loan.column(weird() as never); return loan.publish(weird() as never); } finally { if (rnd() < 0.5) loan.abandon(); } }],
      ['next', () => consumer.next({ timeout: 20, ...(weird() as object), signal: AbortSignal.timeout(50) } as never)],
      ['nextSync', () => consumer.nextSync({ ...(weird() as object), timeout: pick([0, 1, NaN, 0.5, '1', null]) } as never)],
      ['nextBatch', () => consumer.nextBatch({ timeout: 20, ...(weird() as object), signal: AbortSignal.timeout(50) } as never)],
      ['nextBatchSync', () => consumer.nextBatchSync({ ...(weird() as object), timeout: pick([0, 1, NaN, '1', null]) } as never)],
      ['frame', () => { const f = consumer.tryNext(); if (!f) return; try { f.column(weird() as never); f.toTable(); f.columns(); f.copyBytes(); f.release(weird() as never); } finally { if (!f.released) f.release(); } }],
      ['decodeFrame', () => decodeFrame(mutate(encodeFrame(description)) as never)],
      ['encodeFrame', () => encodeFrame(mutate(description) as never)],
      ['hostBuffer', () => hostBuffer(weird() as string, weird() as number, weird() as number)],
      ['waitForSubscribers', () => producer.waitForSubscribers(weird() as number, { timeout: 1, ...(weird() as object) } as never)],
      // Takes nothing; a heads-up pending among the other calls must not lose or hold back any frame.
      ['headsUp', () => (producer.headsUp as (...args: unknown[]) => boolean)(weird())],
      ['drain', () => producer.drain({ timeout: 1, ...(weird() as object) } as never)],
      ['on/off', () => { const fn = pick([() => {}, weird()]); producer.on(pick(['release', weird()]) as never, fn as never); producer.off('release', fn as never); }],
    ];
    const judge = (what: string, error: unknown) => {
      if (error instanceof GpuringError && (ERROR_CODES as readonly string[]).includes(error.code)) return;
      const message = error instanceof Error ? `${error.constructor.name}: ${error.message.split('\n')[0]}` : String(error);
      failures.set(`${what}: ${message.slice(0, 160)}`, (error as Error)?.stack?.split('\n').slice(1, 4).join(' / ') ?? '');
    };
    for (let i = 0; i < CALLS; i++) {
      const [what, call] = pick(calls);
      try {
        const result = call();
        if (result instanceof Promise) {
          result.then(releaseAll, () => {});
          // A wait without a timeout may outlive the call: it is judged if it fails in time.
          await Promise.race([result, new Promise((r) => setTimeout(r, 100))]).catch((e) => judge(what, e));
        } else releaseAll(result);
      } catch (error) {
        judge(what, error);
      }
      for (let f = consumer.tryNext(); f; f = consumer.tryNext()) {
        try {
          f.toTable();
        } catch (error) {
          judge('toTable() of a frame that was published', error);
        }
        f.release();
      }
    }
    // Waits still pending were for this consumer: a new one shows the ring itself is sound.
    consumer.close();
    consumer = Consumer.open(name);
    await producer.publish(table);
    const last = await consumer.next({ timeout: 5000 });
    t.deepEqual(last.toTable().getChild('a')!.toArray(), Int32Array.from([1, 2, 3]));
    last.release();
    consumer.close();
    producer.close();
  });
  for (const n of created) Ring.unlink(n);
  t.deepEqual([...failures].map(([k, stack]) => `${k} (${stack})`), [], `GPURING_FUZZ_SEED=${SEED} GPURING_FUZZ_API_CALLS=${CALLS}`);
  t.deepEqual(readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${ring}`) || created.some((n) => f === `gpuring.${n}`)), []);
});
