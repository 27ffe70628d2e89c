// Writes into a broadcast ring's segment that used to stop a subscriber, or the
// whole ring, for good (found by the broadcast case of segment-damage.test.ts):
// a cursor moved far behind, a subscriber's bit cleared from `subscribers`, the
// state word of a live subscriber's entry overwritten, and a share set again
// after its release (SPEC.md §4 "Giving up a damaged entry", §5.4 Claim and
// "Stray shares"), and a live non-subscriber's `subscription` overwritten (§5.4
// Slow subscribers). Each test damages one word the way a stray
// writer would, through the file, and checks that frames flow again.
import test from 'ava';
import { Consumer, GpuringError, Producer, type Ring } from '../lib/index.js';
import { emptyFrame } from './helpers/empty-frame.js';
import { withRing } from './helpers/ring.js';
import { CONTROL, ENTRY, SLOT } from './helpers/segment-layout.js';
import { segmentWords } from './helpers/segment-words.js';

const SLOTS = 8;
const READY = 2n;
const CLAIMED = 3n;
const CURSOR = ENTRY.cursor;
const SUBSCRIBERS = CONTROL.subscribers;
const SUBSCRIPTION = ENTRY.subscription; // u32, in the low half of the u64 read at its offset
const SEQ_MASK = (1n << 48n) - 1n;

/** Publishes `count` tagged frames from `from`, and has `consumer` take them in order. */
async function flows(t: import('ava').ExecutionContext, producer: Producer, consumer: Consumer, from: number, count: number): Promise<void> {
  const prepared = producer.prepare(emptyFrame());
  for (let k = from; k < from + count; k++) {
    await prepared.publish({ tag: BigInt(k), timeout: 5000 });
    const frame = await consumer.next({ timeout: 5000 });
    t.is(frame.tag, BigInt(k));
    frame.release();
  }
}

type Words = ReturnType<typeof segmentWords>;

/**
 * A broadcast ring with one subscriber and a producer that moved `before`
 * frames through it; then `damage` (which may check what it expects), then
 * `after` more frames must flow, in order.
 */
async function afterDamage(t: import('ava').ExecutionContext, prefix: string, before: number, after: number,
  damage: (words: Words, consumer: Consumer, producer: Producer, ring: Ring) => Promise<void> | void): Promise<void> {
  await withRing(prefix, { slots: SLOTS, delivery: 'all' }, async (ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    await flows(t, producer, consumer, 0, before);
    await damage(segmentWords(name), consumer, producer, ring);
    await flows(t, producer, consumer, SLOTS * 8, after);
  });
}

test("a subscriber whose cursor was moved 2^40 positions behind gets the next frames (a claim no longer crawls there one position at a time)", async (t) => {
  await afterDamage(t, 'bc-cursor', 3, 2 * SLOTS, (words, consumer) => {
    const at = words.entry(consumer.index) + CURSOR;
    words.write(at, (words.read(at) - (1n << 40n)) & SEQ_MASK);
  });
});

test("a subscriber whose bit was cleared from `subscribers` is a subscriber again once it finds the ring empty", async (t) => {
  await afterDamage(t, 'bc-bit', 1, 2 * SLOTS, async (words, consumer, producer) => {
    words.write(words.control + SUBSCRIBERS, 0n);
    t.is(producer.subscribers, 0);
    await t.throwsAsync(consumer.next({ timeout: 50 }), { code: 'TIMEOUT' } as never);
    t.is(producer.subscribers, 1);
  });
});

test("a live producer whose entry's `subscription` was overwritten with a value no policy has, its bit set in `subscribers`, does not hold the ring: its shares are released as a leftover bit's", async (t) => {
  await afterDamage(t, 'bc-subscription', 1, 3 * SLOTS, (words, _consumer, producer) => {
    const at = words.entry(producer.index) + SUBSCRIPTION;
    words.write(at, (words.read(at) & ~0xffffffffn) | 4n); // the first value no policy has
    words.write(words.control + SUBSCRIBERS, words.read(words.control + SUBSCRIBERS) | (1n << BigInt(producer.index)));
    t.is(producer.subscribers, 2);
  });
});

test("a subscriber whose entry's state word was overwritten fails with DETACHED and gives the entry up, so that its bit no longer holds the ring (policy block)", async (t) => {
  await withRing('bc-entry', { slots: SLOTS, delivery: 'all' }, async (ring, name) => {
    using reader = Consumer.open(name);
    const lost = Consumer.open(name);
    using producer = Producer.open(name);
    const words = segmentWords(name);
    const state = words.entry(lost.index);
    words.write(state, words.read(state) ^ (0x5an << 40n)); // another generation, still ACTIVE
    const error = await t.throwsAsync(lost.next({ timeout: 1000 }), { instanceOf: GpuringError });
    t.is(error!.code, 'DETACHED');
    // Three rings of frames: without the give-up, the lost entry's bit would fill the ring after one.
    await flows(t, producer, reader, 0, 3 * SLOTS);
    t.false(ring.inspect().participants.some((p) => p.index === lost.index && p.state === 'active'), 'the lost entry is no longer ACTIVE');
    lost.close();
  });
});

test("a share set again after its subscriber released the frame is released by that subscriber's sweeps while it waits, and a frame it holds keeps its share", async (t) => {
  await withRing('bc-stray', { slots: SLOTS, delivery: 'all' }, async (_ring, name) => {
    using victim = Consumer.open(name);
    using other = Consumer.open(name);
    using producer = Producer.open(name);
    const prepared = producer.prepare(emptyFrame());
    await prepared.publish({ tag: 0n });
    const first = await victim.next({ timeout: 5000 });
    const kept = await other.next({ timeout: 5000 });
    const words = segmentWords(name);
    const ready = Array.from({ length: SLOTS }, (_, i) => i).find((i) => ((words.read(words.slot(i)) >> 13n) & 7n) === READY)!;
    first.release();
    const pending = words.slot(ready) + SLOT.pending;
    words.write(pending, words.read(pending) | (1n << BigInt(victim.index))); // the stray share
    kept.release();
    // The ring fills behind it: each frame read by both, the stray one by nobody.
    for (let k = 1n; k < BigInt(SLOTS); k++) {
      await prepared.publish({ tag: k });
      for (const c of [victim, other]) (await c.next({ timeout: 5000 })).release();
    }
    await t.throwsAsync(prepared.publish({ timeout: 0 }), { code: 'RING_FULL' } as never);
    // The victim waits (and sweeps, every 250 ms): its sweep finds the stray share.
    const waiting = victim.next({ timeout: 5000 });
    await prepared.publish({ tag: BigInt(SLOTS), timeout: 5000 });
    const mine = await waiting;
    t.is(mine.tag, BigInt(SLOTS));
    // Held across its next sweeps, the frame keeps the victim's share.
    await t.throwsAsync(victim.next({ timeout: 700 }), { code: 'TIMEOUT' } as never);
    const carries = (i: number) => ((words.read(words.slot(i)) >> 13n) & 7n) === READY && (words.read(words.slot(i) + SLOT.pending) & (1n << BigInt(victim.index))) !== 0n;
    t.is(Array.from({ length: SLOTS }, (_, i) => i).filter(carries).length, 1, 'the frame the victim holds, and only it, still carries its share');
    mine.release();
    (await other.next({ timeout: 5000 })).release();
  });
});

test('a CLAIMED word in a broadcast ring (subscribers never store one) is damage that a sweep repairs, and the ring goes on', async (t) => {
  await afterDamage(t, 'bc-claimed', 1, 3 * SLOTS, async (words, consumer, producer, ring) => {
    await producer.prepare(emptyFrame()).publish({ tag: 1n });
    const i = Array.from({ length: SLOTS }, (_, k) => k).find((k) => ((words.read(words.slot(k)) >> 13n) & 7n) === READY)!;
    const word = words.read(words.slot(i));
    words.write(words.slot(i), ((word >> 16n) << 16n) | (CLAIMED << 13n) | BigInt(consumer.index + 1));
    t.is(ring.sweep().corrupt, 1);
    t.is((words.read(words.slot(i)) >> 13n) & 7n, 0n, 'EMPTY again');
    t.is(consumer.tryNext(), null, 'the damaged frame is gone');
  });
});
