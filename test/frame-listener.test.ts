// consumer.listen() (lib/frame-listener.ts): frames handed to a handler from
// the event loop's wake-up, in order, each once; never from within listen();
// stop() from inside the handler; what it excludes; errors; close(); and the
// process lifetime it holds, across processes.
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, type Frame, GpuringError, Producer } from '../lib/index.js';
import { locate, patch, u32 } from './helpers/shm-patch.js';
import { child, eventually, exitOf, nextLine, withRing } from './helpers/ring.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i], new Int32()) });
const valueOf = (f: Frame) => f.toTable().getChild('i')!.get(0) as number;
/** Lets the consumer's event loop run (its doorbell's callback among it). */
const turn = (ms = 20) => new Promise((r) => setTimeout(r, ms));

/** A consumer and a producer of a new ring, frames 0 .. count - 1 published. */
async function withPublished(prefix: string, count: number, fn: (consumer: Consumer, producer: Producer) => Promise<void>): Promise<void> {
  await withRing(prefix, { slots: 16 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    for (let i = 0; i < count; i++) await producer.publish(frame(i));
    await fn(consumer, producer);
  });
}

test('frames from a producer in another process, each published only once the listener sleeps, reach the handler in order, each once', async (t) => {
  await withRing('listen-sleeper', { slots: 8 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    const seqs: number[] = [];
    let resolve!: () => void;
    const all = new Promise<void>((r) => (resolve = r));
    const listener = consumer.listen((f) => {
      seqs.push(f.toTable().getChild('seq')!.get(0) as number);
      f.release();
      if (seqs.length === 30) resolve();
    });
    const producer = child('publish-to-sleeper', name, 30);
    await all;
    t.deepEqual(seqs, Array.from({ length: 30 }, (_, i) => i));
    t.is((await exitOf(producer)).code, 0);
    listener.stop();
    t.is(consumer.tryNext(), null, 'nothing left over');
  });
});

test('a listener in another process gets every frame in order while its handler throws (uncaught exceptions), stops, and its process exits by itself', async (t) => {
  await withRing('listen-child', { slots: 16 }, async (_ring, name) => {
    for (const mode of ['plain', 'throw']) {
      const listener = child('listen', name, 200, mode);
      await turn(200); // the listener opens its consumer before the frames come
      using producer = Producer.open(name);
      const stress = child('stress-produce', name, 0, 200);
      const report = await nextLine<{ seen: number[]; bad: number; uncaught: string[] }>(listener);
      t.deepEqual(report.seen, Array.from({ length: 200 }, (_, i) => i), `${mode}: every frame once, in order`);
      t.is(report.bad, 0);
      t.deepEqual(report.uncaught, mode === 'throw' ? Array.from({ length: 40 }, (_, k) => `handler threw at frame ${5 * (k + 1)}`) : []);
      t.deepEqual(await exitOf(listener), { code: 0, signal: null }, `${mode}: the stopped listener holds the process no longer`);
      t.is((await exitOf(stress)).code, 0);
      producer.close();
    }
  });
});

test('a listener keeps its process alive; killed while asleep, it costs the producer nothing and its frames go to the next consumer', async (t) => {
  await withRing('listen-killed', { slots: 8 }, async (_ring, name) => {
    const idle = child('listen-idle', name);
    t.like(await nextLine<{ ready: boolean }>(idle), { ready: true });
    await turn(500);
    t.is(idle.exitCode, null, 'alive with nothing but its listener');
    idle.kill('SIGKILL');
    await exitOf(idle);
    using producer = Producer.open(name);
    for (let i = 0; i < 3; i++) await producer.publish(frame(i), { timeout: 5000 });
    using consumer = Consumer.open(name);
    const got: number[] = [];
    for (let i = 0; i < 3; i++) {
      const f = await consumer.next({ timeout: 5000 });
      got.push(valueOf(f));
      f.release();
    }
    t.deepEqual(got, [0, 1, 2]);
  });
});

test('the first call comes from a later turn of the event loop, never from within listen(); then every ready frame, in order', async (t) => {
  await withPublished('listen-ready', 5, async (consumer, producer) => {
    const got: number[] = [];
    const listener = consumer.listen((f) => (got.push(valueOf(f)), f.release()));
    t.deepEqual(got, [], 'nothing handed over within listen()');
    await eventually(() => got.length === 5);
    t.deepEqual(got, [0, 1, 2, 3, 4]);
    await producer.publish(frame(5));
    await eventually(() => got.length === 6);
    t.deepEqual(got, [0, 1, 2, 3, 4, 5], 'and the frame published while it slept');
    listener.stop();
  });
});

test('stop() inside the handler: no call after it, and the frames not yet handed over go to next() in order', async (t) => {
  await withPublished('listen-stop', 6, async (consumer, producer) => {
    const got: number[] = [];
    const listener = consumer.listen((f) => {
      got.push(valueOf(f));
      f.release();
      if (got.length === 2) listener.stop();
    });
    await eventually(() => !listener.active);
    t.deepEqual(got, [0, 1]);
    t.false(listener.active);
    await producer.publish(frame(6));
    await turn();
    t.deepEqual(got, [0, 1], 'stopped for good');
    const rest = await consumer.nextBatch({ timeout: 1000 });
    t.deepEqual(rest.map(valueOf), [2, 3, 4, 5, 6]);
    for (const f of rest) f.release();
    listener.stop(); // idempotent
  });
});

test('a listener made inside the handler of a stopped one gets the rest of the frames, the first from a later turn', async (t) => {
  await withPublished('listen-again', 6, async (consumer, producer) => {
    const first: number[] = [], second: number[] = [];
    let sameWakeUp = false; // true from the new listen() until the microtasks of that wake-up ran
    let calledInIt: boolean | undefined;
    const listener = consumer.listen((f) => {
      first.push(valueOf(f));
      f.release();
      if (first.length < 2) return;
      listener.stop();
      sameWakeUp = true;
      queueMicrotask(() => (sameWakeUp = false));
      consumer.listen((g) => {
        calledInIt ??= sameWakeUp;
        second.push(valueOf(g));
        g.release();
      });
    });
    await eventually(() => second.length === 4);
    t.deepEqual(first, [0, 1]);
    t.deepEqual(second, [2, 3, 4, 5]);
    t.false(calledInIt, 'not from the wake-up that served the old listener');
  });
});

test('while listening, every other way of taking frames is UNSUPPORTED; listen() is refused while next() waits, and a second listen()', async (t) => {
  await withRing('listen-excludes', { slots: 8 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    const waiting = consumer.next({ timeout: 2000 });
    t.throws(() => consumer.listen(() => {}), { instanceOf: GpuringError, code: 'UNSUPPORTED' }, 'while a next() waits');
    using producer = Producer.open(name);
    await producer.publish(frame(1));
    (await waiting).release();
    const listener = consumer.listen((f) => f.release());
    t.throws(() => consumer.listen(() => {}), { code: 'UNSUPPORTED' }, 'a second listener');
    t.throws(() => consumer.tryNext(), { code: 'UNSUPPORTED' });
    t.throws(() => consumer.nextSync({ timeout: 10 }), { code: 'UNSUPPORTED' });
    await t.throwsAsync(consumer.next({ timeout: 10 }), { code: 'UNSUPPORTED' });
    await t.throwsAsync(consumer.nextBatch({ timeout: 10 }), { code: 'UNSUPPORTED' });
    await t.throwsAsync(consumer[Symbol.asyncIterator]().next(), { code: 'UNSUPPORTED' });
    listener.stop();
    await producer.publish(frame(2));
    const f = await consumer.next({ timeout: 2000 });
    t.is(valueOf(f), 2, 'next() works again once stopped');
    f.release();
  });
});

test('a damaged frame goes to onError (FRAME_INVALID) and is dropped; the frames after it still come', async (t) => {
  await withRing('listen-damaged', { slots: 8 }, async (_ring, name) => {
    using consumer = Consumer.open(name);
    using producer = Producer.open(name);
    const events: (number | string)[] = [];
    const listener = consumer.listen(
      (f) => (events.push(valueOf(f)), f.release()),
      (e) => events.push(e.code),
    );
    await turn();
    await producer.publish(frame(0));
    await eventually(() => events.length === 1); // asleep again when the damaged frame comes
    await producer.publish(frame(1));
    const { arena, body } = locate(name, 1);
    patch(arena, body, u32(0x12345678)); // bad magic, before the listener wakes
    await producer.publish(frame(2));
    await eventually(() => events.length === 3);
    t.deepEqual(events, [0, 'FRAME_INVALID', 2]);
    listener.stop();
  });
});

test('close() inside the handler ends the listener: no further call, nothing thrown', async (t) => {
  await withPublished('listen-close', 4, async (consumer, producer) => {
    const got: number[] = [];
    const listener = consumer.listen((f) => {
      got.push(valueOf(f));
      consumer.close(); // releases the frame with every other lease
    });
    await eventually(() => consumer.closed);
    await turn(); // time for a wrong second call
    t.deepEqual(got, [0]);
    t.false(listener.active);
    t.true(consumer.closed);
    t.notThrows(() => listener.stop());
    t.throws(() => consumer.listen(() => {}), { code: 'CLOSED' });
  });
});
