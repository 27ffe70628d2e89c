// A claim taken back before its hand-over (SPEC.md §5.2, Confirm): a sweeper
// that judged a previous occupant of the consumer's entry dead, stalled
// between its check and its CAS, finds the newer occupant's claim at the same
// position and makes the frame READY again. The consumer must neither hand
// that frame over (it would come twice) nor fail: it claims again. The sweeper
// here is interop/tests/take_back.c, a process of its own that spins on each
// position and takes the first claim it sees there back, with the sweep's code.
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, Producer, type Frame } from '../lib/index.js';
import { cProgram, exitOf, withRing } from './helpers/ring.js';

/** Frames until enough claims were taken back; at most MAX_FRAMES, as the sweeper may get no CPU on a busy machine for a while. */
const ENOUGH = { frames: 30, takenBack: 5 };
const MAX_FRAMES = 20_000;

/** Each way to take one frame; an empty batch means none yet. */
const takes: Record<string, (c: Consumer) => Promise<Frame[]>> = {
  'next()': async (c) => [await c.next({ timeout: 5000 })],
  'nextSync()': async (c) => [c.nextSync({ timeout: 5000 })],
  'nextBatch()': (c) => c.nextBatch({ timeout: 5000 }),
  'tryNext()': async (c) => {
    for (;;) {
      const f = c.tryNext();
      if (f) return [f];
      await new Promise((r) => setImmediate(r));
    }
  },
};

for (const [how, take] of Object.entries(takes))
  test.serial(`a claim taken back by a stalled sweeper before the hand-over: ${how} claims again and returns the frame once, no error`, async (t) => {
    await withRing(`back-${how.replace(/\W/g, '')}`, { slots: 4 }, async (_ring, name) => {
      const producer = Producer.open(name);
      const consumer = Consumer.open(name);
      const sweeper = spawn(cProgram('take_back'), [name, '0', String(MAX_FRAMES)], { stdio: ['ignore', 'pipe', 'inherit'] });
      try {
        let took = 0;
        const lines = createInterface({ input: sweeper.stdout! });
        await new Promise((r) => lines.once('line', r)); // ready
        lines.on('line', (l) => (took += Number(l.startsWith('took'))));
        let k = 0;
        for (; k < MAX_FRAMES && (k < ENOUGH.frames || took < ENOUGH.takenBack); k++) {
          await producer.publish(new Table({ k: vectorFromArray([k], new Int32()) }), { tag: BigInt(k) });
          const frames = await take(consumer);
          t.deepEqual(frames.map((f) => [f.tag, f.toTable().getChild('k')!.get(0)]), [[BigInt(k), k]], `frame ${k}`);
          frames.forEach((f) => f.release());
          t.is(consumer.tryNext(), null, `frame ${k} came once`);
          await new Promise((r) => setImmediate(r)); // the sweeper's lines are read in the loop's I/O phase
        }
        t.log(`${took} of ${k} claims taken back before their hand-over`);
        t.true(took > 0, 'the sweeper took claims back');
      } finally {
        sweeper.kill('SIGKILL');
        await exitOf(sweeper);
      }
      consumer.close();
      producer.close();
    });
  });
