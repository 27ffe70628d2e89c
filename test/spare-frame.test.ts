// A sleeping next() resolves to a Frame made before the wait, over the place
// the core writes its record (lib/spare-frame.ts). These tests check what a
// user sees of that: every frame whole and in order across the core's record
// chunks, waits served in order, and spares whose record never came (waits
// that timed out) costing nothing: no release, no warning, no frame lost.
import { runInNewContext } from 'node:vm';
import v8 from 'node:v8';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, type Frame, Producer } from '../lib/index.js';
import { child, eventually, exitOf, withRing } from './helpers/ring.js';

const NEVER_SWEEP = 600_000;
const WAIT = { timeout: 20_000 };
/** As child.ts writes it into each stress frame. */
const checkText = (producer: number, seq: number) => `${producer}:${seq}:${(seq * 2654435761) >>> 0}`;

test('a consumer asleep before every frame gets each one whole and in order, across many record chunks', async (t) => {
  await withRing('spare-order', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name, { sweepInterval: NEVER_SWEEP });
    // About 1.3 KB per record: 300 frames fill several of the core's 64 KiB chunks.
    const producer = child('publish-to-sleeper', name, 300);
    const bad: string[] = [];
    for (let seq = 0; seq < 300; seq++) {
      const f = await consumer.next(WAIT);
      const table = f.toTable();
      const got = `${table.getChild('producer')!.get(0)}:${table.getChild('seq')!.get(0)} '${table.getChild('check')!.get(0)}'`;
      if (got !== `0:${seq} '${checkText(0, seq)}'`) bad.push(`frame ${seq}: ${got}`);
      f.release();
    }
    t.deepEqual(bad, []);
    t.is((await exitOf(producer)).code, 0);
    consumer.close();
  });
});

test('several waits at once while asleep: each resolves with its own frame, in the order the waits were made', async (t) => {
  await withRing('spare-waits', { slots: 16 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name, { sweepInterval: NEVER_SWEEP });
    for (let round = 0; round < 3; round++) {
      const waits = [consumer.next(WAIT), consumer.next(WAIT), consumer.next(WAIT)];
      t.true(await eventually(() => ring.inspect().doorbells.data > 0), 'the consumer sleeps');
      for (let i = 0; i < 3; i++) await producer.publish(new Table({ i: vectorFromArray([round * 3 + i], new Int32()) }));
      const frames = await Promise.all(waits);
      t.deepEqual(frames.map((f) => f.toTable().getChild('i')!.get(0)), [round * 3, round * 3 + 1, round * 3 + 2]);
      t.is(new Set(frames).size, 3, 'three distinct Frames');
      for (const f of frames) f.release();
    }
    await producer.drain();
    t.is(producer.inFlight, 0);
    consumer.close();
    producer.close();
  });
});

test('waits that time out leave spare Frames that, once collected, release nothing and warn of nothing; frames after them arrive (by tryNext() too)', async (t) => {
  v8.setFlagsFromString('--expose-gc');
  const gc = runInNewContext('gc') as () => void;
  const warnings: string[] = [];
  const onWarning = (w: Error & { code?: string }) => void warnings.push(w.code ?? w.message);
  process.on('warning', onWarning);
  try {
    await withRing('spare-timeout', { slots: 16 }, async (_ring, name) => {
      const producer = Producer.open(name);
      const consumer = Consumer.open(name, { sweepInterval: NEVER_SWEEP });
      const held: Frame[] = [];
      for (let i = 0; i < 3; i++) {
        // A frame taken asleep, then two waits that expire: the spare made for them is never used.
        const taken = consumer.next(WAIT);
        await producer.publish(new Table({ i: vectorFromArray([i], new Int32()) }));
        held.push(await taken);
        for (let k = 0; k < 2; k++) await t.throwsAsync(consumer.next({ timeout: 5 }), { code: 'TIMEOUT' });
        // The record lands where that spare lies: tryNext() gets it, whole.
        await producer.publish(new Table({ i: vectorFromArray([100 + i], new Int32()) }));
        const polled = consumer.tryNext();
        t.is(polled?.toTable().getChild('i')!.get(0), 100 + i);
        polled?.release();
      }
      for (let k = 0; k < 5; k++) (gc(), await new Promise((r) => setTimeout(r, 10)));
      t.deepEqual(held.map((f) => f.toTable().getChild('i')!.get(0)), [0, 1, 2]);
      t.is(producer.inFlight, 3, 'the three frames taken are still leased: no collected spare released one');
      t.deepEqual(warnings, []);
      for (const f of held) f.release();
      await producer.drain();
      t.is(producer.inFlight, 0);
      consumer.close();
      producer.close();
    });
  } finally {
    process.off('warning', onWarning);
  }
});
