// kill -9 in the middle of things: no frame is lost, leases are reclaimed,
// and the ring keeps working.
import { spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { createInterface } from 'node:readline';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, GpuringError, Producer, Ring } from '../lib/index.js';
import { child, cProgram, eventually, exitOf, nextLine, uniqueName, withRing } from './helpers/ring.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i], new Int32()) });

async function publish(producer: Producer, from: number, to: number): Promise<void> {
  for (let i = from; i < to; i++) await producer.publish(frame(i), { tag: BigInt(i) });
}

/** Takes frames until none arrives for 300 ms; returns their tags (released). */
/**
 * Takes `count` frames (each may be slow to come on a loaded machine), then
 * whatever else arrives within 300 ms: a frame delivered twice shows up as an
 * extra tag, a lost one as a timeout. Tags sorted.
 */
async function drainTags(consumer: Consumer, count: number): Promise<number[]> {
  const tags: number[] = [];
  const take = async (timeout: number) => {
    const f = await consumer.next({ timeout });
    tags.push(Number(f.tag));
    f.release();
  };
  while (tags.length < count) await take(30_000);
  for (;;) {
    try {
      await take(300);
    } catch {
      return tags.sort((a, b) => a - b);
    }
  }
}

/** Starts interop/tests/hold.c in `mode` and waits until it holds its slot. */
async function cHolder(name: string, mode: 'claim' | 'write') {
  const proc = spawn(cProgram('hold'), [name, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve) => createInterface({ input: proc.stdout! }).once('line', resolve));
  return { proc, pos: Number(line.split(' ')[1]) };
}

// Ready: the frame waits in the ring when next() is called. Asleep: it is
// published while next() waits, and the core hands over the Frame made before
// the wait (lib/spare-frame.ts), with no JS run then to watch it.
for (const mode of ['ready', 'asleep'] as const)
  test(`a frame garbage-collected without release(): its lease is ended for it, with a warning, and the producer gets its memory back (consumer ${mode})`, async (t) => {
    await withRing(`leak-${mode}`, { slots: 2 }, async (ring, name) => {
      const producer = Producer.open(name);
      if (mode === 'ready') await producer.publish(frame(1));
      const leaker = child('leak-frame', name);
      if (mode === 'asleep') {
        t.true(await eventually(() => ring.inspect().doorbells.data > 0), 'the leaker sleeps in next()');
        await producer.publish(frame(1));
      }
      t.deepEqual(await nextLine(leaker), { warned: true });
      await producer.drain();
      t.is(producer.inFlight, 0);
      leaker.kill('SIGKILL');
      await exitOf(leaker);
      producer.close();
    });
  });

test('one frame never released fills the ring; RING_FULL names its slot, state and holder', async (t) => {
  await withRing('held', { slots: 4 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const holder = child('hold', name, 1);
    await publish(producer, 0, 1);
    const { index } = await nextLine<{ index: number }>(holder);
    await publish(producer, 1, 4); // 3 more wait in the ring: the held slot is next to reuse
    const error = await t.throwsAsync(producer.publish(frame(4), { timeout: 0 }), { instanceOf: GpuringError });
    t.is(error!.code, 'RING_FULL');
    t.regex(error!.message, new RegExp(`slot 0 \\(pos 0\\) LEASED by participant ${index} \\(pid ${holder.pid}\\), not released`));
    holder.kill('SIGKILL');
    await exitOf(holder);
    producer.close();
  });
});

function participants(ring: Ring) {
  return ring.inspect().participants;
}

test('a consumer killed while holding leases: its leases are released to the producer, nothing is lost', async (t) => {
  await withRing('kill-lease', { slots: 16 }, async (ring, name) => {
    const producer = Producer.open(name);
    const released: number[] = [];
    producer.on('release', (id) => released.push(id));
    await publish(producer, 0, 10);
    const holder = child('hold', name, 4);
    const { tags, index } = await nextLine<{ tags: string[]; index: number }>(holder);
    t.deepEqual(tags, ['0', '1', '2', '3'], 'the holder took the four oldest frames');
    const held = participants(ring).find((p) => p.index === index);
    t.is(held?.leases, 4);
    t.is(held?.leased, 4, 'its own counter says it took four');
    t.is(participants(ring).find((p) => p.index === producer.index)?.published, 10);
    holder.kill('SIGKILL');
    await exitOf(holder);
    // The producer's thread sweeps while it has frames in flight and finds the dead consumer.
    t.true(await eventually(() => [1, 2, 3, 4].every((id) => released.includes(id))), `leases of the dead consumer released (got ${released})`);
    t.false(participants(ring).some((p) => p.index === index), 'its participant entry was freed');
    const consumer = Consumer.open(name);
    t.deepEqual(await drainTags(consumer, 6), [4, 5, 6, 7, 8, 9], 'the frames it did not take are still delivered, once');
    // The ring keeps working, for more than a full lap of its 16 slots.
    const [, more] = await Promise.all([publish(producer, 10, 40), drainTags(consumer, 30)]);
    t.deepEqual(more, Array.from({ length: 30 }, (_, i) => 10 + i));
    await producer.drain();
    consumer.close();
    producer.close();
  });
});

test('an idle producer with no release listener still learns of a killed consumer\'s leases: inFlight falls, memory comes back', async (t) => {
  await withRing('kill-idle', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    await publish(producer, 0, 6);
    const holder = child('hold', name, 4);
    await nextLine(holder);
    holder.kill('SIGKILL');
    await exitOf(holder);
    // Nothing waits: the producer reaps now and then and sweeps every tick on its own.
    t.true(await eventually(() => producer.inFlight === 2), `in flight: ${producer.inFlight}`);
    producer.close();
  });
});

test('a consumer killed between taking a frame and handing it over: the frame goes to another consumer', async (t) => {
  await withRing('kill-claim', { slots: 8 }, async (ring, name) => {
    const producer = Producer.open(name);
    await publish(producer, 0, 3);
    const { proc } = await cHolder(name, 'claim');
    t.is(ring.inspect().slots.claimed, 1);
    proc.kill('SIGKILL');
    await exitOf(proc);
    const consumer = Consumer.open(name);
    ring.sweep(); // the producer's own thread may have repaired it already; either way it is counted
    t.is(ring.inspect().redelivered, 1, 'the claimed frame was handed back once');
    t.deepEqual(await drainTags(consumer, 3), [0, 1, 2], 'all three delivered, the claimed one too, none twice');
    await producer.drain();
    consumer.close();
    producer.close();
  });
});

test('a producer killed between claiming a slot and publishing: the slot is skipped, the ring does not stall', async (t) => {
  await withRing('kill-write', { slots: 4 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await publish(producer, 0, 1);
    const { proc } = await cHolder(name, 'write');
    await publish(producer, 1, 2); // lands behind the stuck slot
    t.is(ring.inspect().slots.writing, 1);
    proc.kill('SIGKILL');
    await exitOf(proc);
    // The consumer's thread waits behind the dead writer's slot, sweeps, and moves on.
    const got = [Number((await consumer.next({ timeout: 5000 })).tag), Number((await consumer.next({ timeout: 5000 })).tag)];
    t.deepEqual(got, [0, 1]);
    t.is(ring.inspect().slots.writing, 0);
    t.true(ring.inspect().recovered >= 1, 'the repair is counted');
    consumer.close();
    const c2 = Consumer.open(name);
    const [, more] = await Promise.all([publish(producer, 2, 12), drainTags(c2, 10)]); // laps of a 4-slot ring
    t.deepEqual(more, [2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    c2.close();
    producer.close();
  });
});

test('a consumer that only polls with tryNext() gets past a slot a killed producer left claimed: its polls sweep when due', async (t) => {
  await withRing('kill-poll', { slots: 8 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const { proc } = await cHolder(name, 'write');
    await publish(producer, 0, 2); // behind the stuck slot; the ring has room, so nobody waits
    producer.close(); // its detach sweeps while the writer still lives: from here on only the consumer could
    proc.kill('SIGKILL');
    await exitOf(proc);
    const got: number[] = [];
    const until = Date.now() + 5000;
    while (got.length < 2 && Date.now() < until) {
      const f = consumer.tryNext();
      if (f) (got.push(Number(f.tag)), f.release());
      else await new Promise((r) => setTimeout(r, 5));
    }
    t.deepEqual(got, [0, 1], 'both frames behind the dead producer\'s slot, polled only');
    t.is(ring.inspect().slots.writing, 0);
    consumer.close();
  });
});

test('a consumer blocked in nextSync() gets past a slot a killed producer left claimed: it sweeps on its tick while asleep', async (t) => {
  await withRing('kill-sync', { slots: 8 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const { proc } = await cHolder(name, 'write');
    await publish(producer, 0, 2); // behind the stuck slot
    producer.close(); // its detach sweeps while the writer still lives: from here on only the consumer could
    proc.kill('SIGKILL');
    await exitOf(proc);
    const got = [0, 1].map(() => {
      const f = consumer.nextSync({ timeout: 5000 });
      f.release();
      return Number(f.tag);
    });
    t.deepEqual(got, [0, 1], 'both frames behind the dead producer\'s slot');
    t.is(ring.inspect().slots.writing, 0);
    consumer.close();
  });
});

test('a process killed while creating a ring leaves no ring or a ready one, never one that openers refuse (SEGMENT_NOT_READY)', async (t) => {
  const name = uniqueName('create');
  const outcomes: string[] = [];
  t.teardown(() => rmSync(`/dev/shm/gpuring.${name}`, { force: true }));
  for (let i = 0; i < 10; i++) {
    const creator = child('create', name, 1 << 16);
    t.deepEqual(await nextLine(creator), { go: true });
    await new Promise((resolve) => setTimeout(resolve, i));
    creator.kill('SIGKILL');
    await exitOf(creator);
    try {
      Ring.open(name, { openTimeout: 1 }).close();
      outcomes.push('ready');
      Ring.unlink(name);
    } catch (error) {
      t.is((error as GpuringError).code, 'SEGMENT_NOT_FOUND', `kill ${i} ms after the create began: ${(error as Error).message}`);
      outcomes.push('none');
    }
  }
  t.log(`killed 0-9 ms into its create: ${outcomes.join(' ')}`);
});

test('a process that forgets to close exits promptly, and its entries are reclaimed', async (t) => {
  await withRing('forget', { slots: 8 }, async (ring, name) => {
    const proc = child('forget-to-close', name);
    t.deepEqual(await nextLine(proc), { ok: true });
    // From its last word, not from the spawn: loading tsx alone took 10 s beside the doorbell suite.
    const said = Date.now();
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
    t.true(Date.now() - said < 10_000, `exited on its own (${Date.now() - said} ms after it said ok)`);
    // No sweep: its exit gave the entries back, not a survivor finding them dead.
    t.deepEqual(participants(ring), [], 'no participant left behind');
    t.is(ring.inspect().slots.leased, 0, 'the lease it held was released at exit');
  });
});
