// What a process keeps of a ring's shared memory. A closed producer or
// consumer keeps nothing once close() returns (native/lent_mappings.h), and
// none of its native state once its object is collected
// (LoopParticipant::HookExit); before, the views lent to JS held the ring's
// files mapped until a garbage collection ran their finalizers, and every
// participant's state lived until the process ended. A consumer that stays
// open lets go of the arenas of producers that left, once no frame can refer
// to them (ConsumerState::ForgetRemovedArenas); before, each producer that
// came and went kept its arenas' memory in /dev/shm while the consumer lived.
import { tableFromArrays } from 'apache-arrow';
import test from 'ava';
import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Consumer, Producer, type Frame } from '../lib/index.js';
import { native } from '../lib/native.js';
import { child, eventually, exitOf, withRing } from './helpers/ring.js';

// Serial: liveParticipants() counts every participant of this process.
v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collects garbage and lets finalizers run: they run on later turns of the event loop. */
async function collect(): Promise<void> {
  for (let turn = 0; turn < 10; turn++) (gc(), await new Promise((r) => setTimeout(r, 10)));
}

/** The lines of /proc/self/maps that map a file of ring `name`: its segment or an arena, removed or not. */
function mappedFilesOf(name: string): string[] {
  const file = new RegExp(`/gpuring\\.${name}(\\.p\\d+g\\d+\\.a\\d+)?( \\(deleted\\))?$`);
  return readFileSync('/proc/self/maps', 'utf8').split('\n').filter((line) => file.test(line));
}

/** Polls for `ms`: a poll that finds nothing sweeps and lets go each tick, as a sleeping consumer's wake-ups do. */
async function pollFor(consumer: Consumer, ms: number): Promise<void> {
  for (const end = Date.now() + ms; Date.now() < end; await new Promise((r) => setTimeout(r, 10))) if (consumer.tryNext()) throw new Error('no frame was expected');
}

/** The mappings of arenas producer `index` of ring `name` made, whatever its generation. */
const arenasOf = (name: string, index: number) => mappedFilesOf(name).filter((line) => line.includes(`.p${index}g`));

test.serial("close() lets go of the ring's shared memory at once: views taken before read zeros, writes fault nothing, and no file of the ring stays mapped", async (t) => {
  await withRing('closed', { slots: 8 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(tableFromArrays({ a: Int32Array.from([1, 2, 3]) }));
    const frame = consumer.tryNext()!;
    const values = frame.columns()[0]!.values as Int32Array; // a view of the producer's arena, mapped here by the consumer
    const table = frame.toTable();
    const allocation = producer.allocate(64).bytes; // a view of the producer's own arena mapping
    t.deepEqual([...values], [1, 2, 3]);
    t.true(mappedFilesOf(name).length >= 3, `the segment and both arena views are mapped while open: ${mappedFilesOf(name).join('; ')}`);

    frame.release();
    consumer.close();
    await producer.drain();
    producer.close();
    ring.close();

    t.deepEqual(mappedFilesOf(name), [], 'nothing of the ring is mapped, though every view is still referenced');
    t.deepEqual([...values], [0, 0, 0]);
    t.is(table.getChild('a')!.get(2), 0);
    allocation.fill(7);
  });
});

test.serial('closed producers and consumers are freed with their objects: none of their native state outlives them', async (t) => {
  await withRing('freed', { slots: 8 }, async (_ring, name) => {
    await collect(); // what earlier tests closed
    const before = native().liveParticipants();
    for (let i = 0; i < 50; i++) {
      Producer.open(name).close();
      Consumer.open(name).close();
    }
    t.is(native().liveParticipants(), before + 100, 'each open made a state, alive until its object is collected');
    await collect();
    t.is(native().liveParticipants(), before);
  });
});

test.serial('consumers dropped without close() after a for-await loop (one that broke, one stopped while it waited) are freed with their objects', async (t) => {
  await withRing('iterated', { slots: 64 }, async (_ring, name) => {
    const producer = Producer.open(name);
    await collect();
    const before = native().liveParticipants();
    for (let i = 0; i < 40; i++) {
      const consumer = Consumer.open(name);
      await producer.publish(tableFromArrays({ a: Int32Array.of(i) }));
      for await (const frame of consumer) {
        t.is(frame.toTable().getChild('a')!.get(0), i);
        frame.release();
        break;
      }
      const frames = consumer[Symbol.asyncIterator]();
      const waiting = frames.next(); // asleep, with its iterator result made and held by the core
      await new Promise((r) => setTimeout(r, 5));
      await frames.return!();
      t.true((await waiting).done);
    }
    await collect();
    // The last one or two may still be reachable from this function's own
    // frames (so with plain next() too); a leak per loop would leave all 40.
    t.true(native().liveParticipants() - before <= 2, `${native().liveParticipants() - before} of 40 consumers still alive: an iterator result or spare kept them`);
    producer.close();
  });
});

test.serial('a consumer that stays open lets go of the arenas of producers that left, and never of one whose frame it still holds', async (t) => {
  await withRing('departed', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name, { sweepInterval: 20 });
    const rounds: { index: number; kept: Frame }[] = [];
    for (let round = 0; round < 3; round++) {
      const producer = child('stress-produce', name, round, 3);
      const frames: Frame[] = [];
      for (let i = 0; i < 3; i++) frames.push(await consumer.next({ timeout: 10_000 }));
      for (const f of frames) f.toTable();
      // Two released, the last held: the producer waits in drain() for it.
      for (const f of frames.slice(0, 2)) f.release();
      producer.kill('SIGKILL');
      await exitOf(producer);
      rounds.push({ index: frames[2]!.producer, kept: frames[2]! });
    }
    await pollFor(consumer, 300); // 15 sweep ticks
    for (const { index, kept } of rounds) {
      t.true(arenasOf(name, index).length > 0, `producer ${index}'s arena stays mapped while its frame is held`);
      t.is(kept.toTable().getChild('seq')!.get(0), 2, 'and the frame it holds reads what was written');
    }
    for (const { kept } of rounds) kept.release();
    const letGo = await eventually(() => consumer.tryNext() === null && mappedFilesOf(name).every((line) => !/\.p\d+g\d+\.a\d+/.test(line)));
    t.true(letGo, `every arena let go once its last frame was released and its dead producer freed: ${mappedFilesOf(name).join('; ')}`);
    consumer.close();
  });
});
