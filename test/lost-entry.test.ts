// A live participant whose entry another process changed (SPEC.md §4, "Losing
// the entry"): a sweep that judged it dead, or a stray write, took it. Its
// next publish or claim fails with DETACHED, it never writes the entry again,
// its close succeeds (a producer's unlinks its own arenas), and a participant
// opened again works with the others.
import { execFileSync } from 'node:child_process';
import { readdirSync } from 'node:fs';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, GpuringError, Producer } from '../lib/index.js';
import { withRing } from './helpers/ring.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i, i + 1], new Int32()) });
const ACTIVE = 1n, DEAD = 2n, FREE = 0n;

/**
 * Rewrites entry `index`'s state word from another process (SPEC.md §12:
 * participants_offset at header offset 56, 128-byte entries, the word at
 * entry offset 0): `change` gets the word and returns the new one.
 */
function rewriteEntry(name: string, index: number, change: string): bigint {
  const script = `
    const fs = require('node:fs');
    const fd = fs.openSync(${JSON.stringify(`/dev/shm/gpuring.${name}`)}, 'r+');
    const h = Buffer.alloc(64); fs.readSync(fd, h, 0, 64, 0);
    const at = Number(h.readBigUInt64LE(56)) + 128 * ${index};
    const b = Buffer.alloc(8); fs.readSync(fd, b, 0, 8, at);
    const w = b.readBigUInt64LE(0);
    b.writeBigUInt64LE((${change})(w)); fs.writeSync(fd, b, 0, 8, at);
    process.stdout.write(String(w));`;
  return BigInt(execFileSync(process.execPath, ['-e', script], { encoding: 'utf8' }));
}

const generationOf = (word: bigint) => Number(word >> 32n);
const arenaFiles = (name: string, index: number, gen: number) =>
  readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${name}.p${index}g${gen}.a`));

async function rejectsDetached(t: { is: (a: unknown, b: unknown, m?: string) => void }, what: Promise<unknown>, message: string): Promise<void> {
  const error = await what.then(() => null, (e: unknown) => e);
  t.is(error instanceof GpuringError ? error.code : String(error), 'DETACHED', message);
}

test('a producer whose entry was marked DEAD: DETACHED, a quiet close, and a new producer reaches the same consumer', async (t) => {
  await withRing('lost-dead', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = Producer.open(name);
    await producer.publish(frame(1));
    (await consumer.next({ timeout: 5000 })).release();
    const word = rewriteEntry(name, producer.index, `(w) => (w & ~7n) | ${DEAD}n`);
    t.is(word & 7n, ACTIVE);
    // The consumer's wait sweeps: the DEAD entry, with no slot left, is freed (and its arenas unlinked).
    await t.throwsAsync(consumer.next({ timeout: 400 }), { code: 'TIMEOUT' });
    t.deepEqual(arenaFiles(name, producer.index, generationOf(word)), [], 'the sweep that freed the entry unlinked its arenas');
    await rejectsDetached(t, producer.publish(frame(2), { timeout: 1000 }), 'the publish after the entry was taken');
    t.notThrows(() => producer.close());
    const again = Producer.open(name);
    await again.publish(frame(3), { tag: 3n });
    const f = await consumer.next({ timeout: 5000 });
    t.deepEqual([f.tag, [...f.toTable().getChild('i')!]], [3n, [3, 4]]);
    f.release();
    again.close();
    consumer.close();
  });
});

test('a producer whose generation was overwritten (the entry still ACTIVE): DETACHED, it gives the entry up (DEAD, for sweeps to free), and its close unlinks the arenas nobody else knows', async (t) => {
  await withRing('lost-gen', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = Producer.open(name);
    await producer.publish(frame(1));
    (await consumer.next({ timeout: 5000 })).release();
    const word = rewriteEntry(name, producer.index, '(w) => w + (5n << 32n)');
    const gen = generationOf(word);
    t.true(arenaFiles(name, producer.index, gen).length > 0, 'the producer has an arena');
    await rejectsDetached(t, producer.publish(frame(2), { timeout: 0 }), 'a publish that would not wait');
    await rejectsDetached(t, producer.publish(frame(2), { timeout: 1000 }), 'a publish that would wait for space');
    producer.close();
    t.deepEqual(arenaFiles(name, producer.index, gen), [], 'close unlinked them');
    // SPEC.md §4, "Giving up a damaged entry": still its pid and attach time, so nobody else attached there.
    const after = rewriteEntry(name, producer.index, '(w) => w');
    t.true((after & 7n) === DEAD || (after & 7n) === FREE, `the entry is DEAD or already freed, not ACTIVE (state ${after & 7n})`);
    t.is(generationOf(after), generationOf(word + (5n << 32n)), 'with the generation it was left with');
    consumer.close();
  });
});

test('a consumer whose entry was marked FREE while it held a frame: DETACHED, and a new consumer takes every later frame', async (t) => {
  await withRing('lost-free', { slots: 4 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(frame(0), { tag: 0n });
    const held = await consumer.next({ timeout: 5000 });
    rewriteEntry(name, consumer.index, `(w) => (w & ~7n) | ${FREE}n`);
    await rejectsDetached(t, consumer.next({ timeout: 1000 }), 'the next claim after the entry was taken');
    t.throws(() => consumer.tryNext(), { code: 'DETACHED' });
    const fresh = Consumer.open(name);
    t.is(fresh.index, consumer.index, 'the new consumer took the lost entry, and with it what the old one left there');
    // More frames than slots: the one the old consumer held must not block the ring.
    const tags: bigint[] = [];
    for (let i = 1n; i <= 12n; i++) {
      await producer.publish(frame(Number(i)), { tag: i, timeout: 10_000 });
      const f = await fresh.next({ timeout: 10_000 });
      tags.push(f.tag);
      f.release();
    }
    t.deepEqual(tags, Array.from({ length: 12 }, (_, k) => BigInt(k + 1)));
    // Its slot was repaired when the new consumer took the entry: the lease went with it, so releasing is no error.
    t.notThrows(() => held.release());
    t.notThrows(() => consumer.close());
    fresh.close();
    producer.close();
  });
});

test('a listening consumer whose entry was marked FREE: its next wake-up hands DETACHED to onError and ends the listener', async (t) => {
  await withRing('lost-listen', { slots: 4 }, async (_ring, name) => {
    using producer = Producer.open(name);
    const consumer = Consumer.open(name, { sweepInterval: 20 });
    const errors: string[] = [];
    let ended!: () => void;
    const detached = new Promise<void>((r) => (ended = r));
    const listener = consumer.listen(
      (f) => f.release(),
      (e) => (errors.push(e.code, listener.active ? 'active' : 'ended'), ended()),
    );
    await producer.publish(frame(0), { tag: 0n });
    rewriteEntry(name, consumer.index, `(w) => (w & ~7n) | ${FREE}n`);
    await detached; // the sweep tick wakes it, if the publish did not
    t.deepEqual(errors, ['DETACHED', 'ended'], 'the listener ended before onError ran');
    t.throws(() => consumer.tryNext(), { code: 'DETACHED' });
    t.notThrows(() => consumer.close());
  });
});
