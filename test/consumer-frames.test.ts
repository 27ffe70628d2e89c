// `for await (const frame of consumer)` (lib/consumer-frames.ts): the frame a
// wait brings is yielded at once and the frames ready behind it come at the
// loop's next turn; order, hand-back when the loop stops (also while it waits),
// calls made while one waits, errors, and closing.
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, GpuringError, Producer } from '../lib/index.js';
import { locate, patch, u32 } from './helpers/shm-patch.js';
import { child, exitOf, withRing } from './helpers/ring.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i], new Int32()) });
const valueOf = (f: { toTable(): Table }) => f.toTable().getChild('i')!.get(0) as number;
/** Lets the consumer's event loop run (its doorbell's callback among it). */
const turn = () => new Promise((r) => setTimeout(r, 20));

test('a loop asleep gets the frame that woke it, then those published meanwhile, in order, each once', async (t) => {
  await withRing('iter-order', { slots: 64 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    const frames = consumer[Symbol.asyncIterator]();
    const first = frames.next(); // asleep: nothing published yet
    await turn();
    await producer.publish(frame(0));
    const got = await first;
    t.false(got.done);
    for (let i = 1; i <= 5; i++) await producer.publish(frame(i));
    const seen = [valueOf(got.value)];
    got.value.release();
    while (seen.length < 6) {
      const { value } = await frames.next();
      seen.push(valueOf(value));
      value.release();
    }
    t.deepEqual(seen, [0, 1, 2, 3, 4, 5]);
    t.is(consumer.tryNext(), null, 'nothing left over, nothing twice');
    await frames.return!();
    await producer.drain();
  });
});

test('next() called again while one waits: each call gets its own frame, in the order called', async (t) => {
  await withRing('iter-queued', { slots: 64 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    const frames = consumer[Symbol.asyncIterator]();
    const calls = [frames.next(), frames.next(), frames.next()];
    await turn();
    for (let i = 0; i < 3; i++) await producer.publish(frame(10 + i));
    const results = await Promise.all(calls);
    t.deepEqual(results.map((r) => valueOf(r.value)), [10, 11, 12]);
    for (const r of results) r.value.release();
    await frames.return!();
    await producer.drain();
  });
});

test('a loop stopped while it waits takes no frame: its wait ends done, and the frame published next goes to next()', async (t) => {
  await withRing('iter-return-waiting', { slots: 8 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    const frames = consumer[Symbol.asyncIterator]();
    const waiting = frames.next();
    await turn();
    t.deepEqual(await frames.return!(), { value: undefined, done: true });
    await producer.publish(frame(7));
    t.deepEqual(await waiting, { value: undefined, done: true }, 'the stopped loop yields nothing more');
    const again = await consumer.next({ timeout: 2000 });
    t.is(valueOf(again), 7, 'the stopped wait took nothing');
    again.release();
    t.deepEqual(await frames.next(), { value: undefined, done: true });
    await producer.drain();
  });
});

test('frames from another process: a loop that breaks mid-batch hands the rest back, and a second loop gets every one of them', async (t) => {
  await withRing('iter-child', { slots: 64 }, async (_ring, name) => {
    const producer = child('stress-produce', name, 1, 20);
    using consumer = Consumer.open(name);
    const ids: number[] = [];
    const seq = (f: { toTable(): Table }) => f.toTable().getChild('seq')!.get(0) as number;
    for await (const f of consumer) {
      ids.push(seq(f));
      f.release();
      if (ids.length === 7) break;
    }
    for await (const f of consumer) {
      ids.push(seq(f));
      f.release();
      if (ids.length === 20) break;
    }
    t.deepEqual([...ids].sort((a, b) => a - b), Array.from({ length: 20 }, (_, i) => i), 'every frame once');
    t.is((await exitOf(producer)).code, 0);
  });
});

test('a damaged frame rejects that next() (a for-await loop throws it), the next call goes on; closing the consumer ends a loop quietly', async (t) => {
  await withRing('iter-errors', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    using producer = Producer.open(name);
    const damageNext = async (i: number) => {
      await producer.publish(frame(i));
      const { arena, body } = locate(name, i);
      patch(arena, body, u32(0x12345678)); // bad magic
    };
    await damageNext(0);
    const seen: number[] = [];
    const thrown = await t.throwsAsync(
      (async () => {
        for await (const f of consumer) (seen.push(valueOf(f)), f.release());
      })(),
      { instanceOf: GpuringError },
    );
    t.is(thrown!.code, 'FRAME_INVALID');
    t.deepEqual(seen, []);
    const frames = consumer[Symbol.asyncIterator]();
    const waiting = frames.next(); // asleep when the damaged frame comes
    await turn();
    await damageNext(1);
    t.is((await t.throwsAsync(waiting, { instanceOf: GpuringError }))!.code, 'FRAME_INVALID');
    await producer.publish(frame(2));
    const after = await frames.next();
    t.is(valueOf(after.value), 2, 'the same iterator goes on after the damaged frame');
    after.value.release();
    await producer.publish(frame(3));
    const loop = (async () => {
      for await (const f of consumer) (seen.push(valueOf(f)), f.release(), setTimeout(() => consumer.close(), 20));
      return 'ended';
    })();
    t.is(await loop, 'ended');
    t.deepEqual(seen, [3]);
    t.deepEqual(await frames.next(), { value: undefined, done: true }, 'and every other iterator of it is done');
  });
});
