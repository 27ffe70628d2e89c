// Broadcast rings (SPEC.md §5.4): every subscriber receives every frame,
// across processes, and what each onSlow policy does to a subscriber that
// falls a ring behind.
import test from 'ava';
import { Consumer, GpuringError, Producer } from '../lib/index.js';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { emptyFrame } from './helpers/empty-frame.js';
import { child, exitOf, nextLine, withRing } from './helpers/ring.js';

const FRAMES = 100_000;

const tags = (from: number, count: number) => BigUint64Array.from({ length: count }, (_, i) => BigInt(from + i));

test(`1 producer x 4 subscriber processes x ${FRAMES} frames: each sees every frame once, in order; a subscriber killed (SIGKILL) while it holds the ring up gives its share back`, async (t) => {
  await withRing('bcast', { slots: 1024, delivery: 'all' }, async (_ring, name) => {
    const readers = Array.from({ length: 4 }, () => child('subscribe', name, FRAMES));
    const idle = child('subscribe-idle', name);
    for (const p of [...readers, idle]) t.like(await nextLine(p), { ready: true });
    const results = readers.map((p) => nextLine<{ inOrder: number }>(p));
    using producer = Producer.open(name);
    const prepared = producer.prepare(emptyFrame());
    await prepared.publishMany(1024, { tags: tags(0, 1024) });
    const full = await t.throwsAsync(prepared.publish({ timeout: 0 }), { instanceOf: GpuringError });
    t.is(full!.code, 'RING_FULL', 'the idle subscriber holds every frame unread');
    idle.kill('SIGKILL');
    t.is((await exitOf(idle)).signal, 'SIGKILL');
    for (let at = 1024; at < FRAMES; at += 512) await prepared.publishMany(Math.min(512, FRAMES - at), { tags: tags(at, Math.min(512, FRAMES - at)) });
    for (const r of await Promise.all(results)) t.is(r.inOrder, FRAMES);
    for (const p of readers) t.is((await exitOf(p)).code, 0);
    await producer.drain();
  });
});

test('waitForSubscribers() resolves once enough subscriber processes joined, and `subscribers` counts them; TIMEOUT when too few come; a work-queue ring has no subscribers', async (t) => {
  await withRing('bcast-wait', { slots: 8, delivery: 'all' }, async (_ring, name) => {
    using producer = Producer.open(name);
    t.is(producer.subscribers, 0);
    const late = await t.throwsAsync(producer.waitForSubscribers(1, { timeout: 30 }), { instanceOf: GpuringError });
    t.is(late!.code, 'TIMEOUT');
    const waiting = producer.waitForSubscribers(2);
    const readers = [child('subscribe', name, 1), child('subscribe', name, 1)];
    await waiting;
    t.is(producer.subscribers, 2);
    for (const r of readers) t.like(await nextLine(r), { ready: true });
    await producer.prepare(emptyFrame()).publish({ tag: 0n }); // reaches both: neither could miss it
    for (const r of readers) t.like(await nextLine(r), { inOrder: 1 });
    for (const r of readers) t.is((await exitOf(r)).code, 0);
  });
  await withRing('wq-wait', { slots: 8 }, async (_ring, name) => {
    using producer = Producer.open(name);
    t.is(t.throws(() => producer.subscribers, { instanceOf: GpuringError })!.code, 'INVALID_ARGUMENT');
    t.is((await t.throwsAsync(producer.waitForSubscribers(1), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
  });
});

/** Tags of the frames `consumer` takes now, released at once, or the error it got. */
async function takeAll(consumer: Consumer): Promise<bigint[] | GpuringError> {
  const got: bigint[] = [];
  for (;;) {
    try {
      const batch = await consumer.nextBatch({ max: 64, timeout: 50 });
      for (const f of batch) (got.push(f.tag), f.release());
    } catch (error) {
      if ((error as GpuringError).code === 'TIMEOUT') return got;
      return error as GpuringError;
    }
  }
}

test("onSlow: 'block' keeps the ring full; 'drop-oldest' drops the slow one's oldest frames (FRAMES_MISSED, with the count); 'evict' drops all it has not taken (EVICTED, with the count) and it goes on with frames published since", async (t) => {
  await withRing('bcast-slow', { slots: 8, delivery: 'all' }, async (_ring, name) => {
    using producer = Producer.open(name);
    const prepared = producer.prepare(emptyFrame());
    using fast = Consumer.open(name);
    const block = Consumer.open(name, { onSlow: 'block' });
    await prepared.publishMany(8, { tags: tags(0, 8) });
    t.deepEqual(await takeAll(fast), [...tags(0, 8)]);
    t.is((await t.throwsAsync(prepared.publish({ timeout: 0 }), { instanceOf: GpuringError }))!.code, 'RING_FULL');
    t.deepEqual(await takeAll(block), [...tags(0, 8)], 'the blocking subscriber still gets all it was sent');
    block.close();

    // The fast subscriber keeps up (it takes each frame as it comes); the slow ones never read.
    const publishKeepingUp = async (from: number, count: number) => {
      const seen: bigint[] = [];
      for (let i = from; i < from + count; i++) {
        await prepared.publish({ tag: BigInt(i), timeout: 0 });
        const f = await fast.next({ timeout: 5000 });
        seen.push(f.tag);
        f.release();
      }
      return seen;
    };
    using drop = Consumer.open(name, { onSlow: 'drop-oldest' });
    t.deepEqual(await publishKeepingUp(100, 20), [...tags(100, 20)], 'the fast subscriber loses nothing');
    const missed = await takeAll(drop);
    t.true(missed instanceof GpuringError && missed.code === 'FRAMES_MISSED' && missed.missed === 12, String(missed));
    t.deepEqual(await takeAll(drop), [...tags(112, 8)], 'then the 8 newest, in order');

    const evict = Consumer.open(name, { onSlow: 'evict' });
    t.deepEqual(await publishKeepingUp(200, 9), [...tags(200, 9)]);
    const dropped = await takeAll(drop);
    t.true(dropped instanceof GpuringError && dropped.code === 'FRAMES_MISSED' && dropped.missed === 1, String(dropped));
    t.deepEqual(await takeAll(drop), [...tags(201, 8)]);
    const evicted = await takeAll(evict);
    t.true(evicted instanceof GpuringError && evicted.code === 'EVICTED' && evicted.missed === 8, String(evicted));
    await prepared.publish({ tag: 300n });
    t.deepEqual(await takeAll(evict), [208n, 300n], 'it goes on with the frames published since');
    evict.close();
    await takeAll(fast);
    await takeAll(drop);
    await producer.drain();
  });
});

test("start: 'oldest' also receives the frames still in the ring when it joins, in order; 'newest' (the default) only those published after", async (t) => {
  await withRing('bcast-start', { slots: 8, delivery: 'all' }, async (_ring, name) => {
    using producer = Producer.open(name);
    const prepared = producer.prepare(emptyFrame());
    using first = Consumer.open(name);
    await prepared.publishMany(3, { tags: tags(0, 3) });
    using newest = Consumer.open(name);
    using oldest = Consumer.open(name, { start: 'oldest' });
    await prepared.publish({ tag: 3n });
    t.deepEqual(await takeAll(oldest), [0n, 1n, 2n, 3n]);
    t.deepEqual(await takeAll(newest), [3n]);
    t.deepEqual(await takeAll(first), [0n, 1n, 2n, 3n]);
    await producer.drain();
  });
});

test('a for-await loop that stops early hands the rest of its batch back: the subscriber gets those frames next, none missed', async (t) => {
  await withRing('bcast-handback', { slots: 8, delivery: 'all' }, async (_ring, name) => {
    using producer = Producer.open(name);
    const prepared = producer.prepare(emptyFrame());
    using consumer = Consumer.open(name);
    await prepared.publishMany(4, { tags: tags(0, 4) });
    for await (const f of consumer) {
      t.is(f.tag, 0n);
      f.release();
      break; // frames 1-3 of the batch were never yielded
    }
    t.deepEqual(await takeAll(consumer), [1n, 2n, 3n]);
    await producer.drain();
  });
});

test('slow subscribers evicted and dropped again and again while a producer reuses its memory: no frame changes or is released under a subscriber, every loss is counted', async (t) => {
  await withRing('bcast-evict', { slots: 8, delivery: 'all' }, async (_ring, name) => {
    const slow = ['evict', 'drop-oldest'].map((policy) => child('subscribe-slow', name, policy, 3000));
    for (const p of slow) t.like(await nextLine(p), { ready: true });
    const results = slow.map((p) => nextLine<{ frames: number; evicted: number; framesMissed: number; missed: number; bad: number; failedReleases: number }>(p));
    using producer = Producer.open(name);
    const started = performance.now();
    let seq = 0;
    // Host frames in the producer's arena, reused as soon as released: a frame released under a subscriber would be overwritten.
    while (performance.now() - started < 3000) await producer.publish(new Table({ v: vectorFromArray([seq], new Int32()) }), { tag: BigInt(seq++) });
    const [evict, drop] = await Promise.all(results);
    for (const r of [evict!, drop!]) {
      t.is(r.bad, 0, 'every frame held its own contents until released');
      t.is(r.failedReleases, 0, 'no frame was released for it while it held it');
      t.true(r.frames > 0);
    }
    t.true(evict!.evicted > 0 && evict!.missed > 0, `the evict subscriber was evicted (${JSON.stringify(evict)})`);
    t.true(drop!.framesMissed > 0 && drop!.missed > 0, `the drop-oldest subscriber lost frames (${JSON.stringify(drop)})`);
    t.log(`${seq} frames published; evict: ${JSON.stringify(evict)}; drop-oldest: ${JSON.stringify(drop)}`);
    for (const p of slow) t.is((await exitOf(p)).code, 0);
    await producer.drain();
  });
});
