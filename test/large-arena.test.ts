// Arenas larger than one ArrayBuffer can hold in this Node (buffer.constants.MAX_LENGTH:
// 4 GiB before Node 22). Node refuses to make a larger one over outside memory by
// running its finalizer at once, which freed the addon's bookkeeping twice: a
// process asking for one (a large allocate() or loan(), a large arenaBytes, or a
// consumer reading a frame from another language's large arena) aborted with
// "double free". Now a Node producer cuts arenaBytes to the limit, and a
// consumer reads a frame there through windows of the arena. These tests need
// a Node whose limit is 4 GiB and that much /dev/shm; test/lend-limit.test.ts
// covers the same paths (and allocations refused) under a lowered limit on any
// Node.
import { spawn } from 'node:child_process';
import { constants } from 'node:buffer';
import { statfsSync } from 'node:fs';
import { freemem } from 'node:os';
import { tableFromArrays } from 'apache-arrow';
import test from 'ava';
import { Consumer, Producer } from '../lib/index.js';
import { exitOf, root, withRing } from './helpers/ring.js';

const LIMIT = constants.MAX_LENGTH;

test('arenaBytes over what one ArrayBuffer can hold is cut to that: a regular arena of that size is lent whole', async (t) => {
  const room = LIMIT + 2 ** 30;
  const { bavail, bsize } = statfsSync('/dev/shm');
  if (LIMIT >= 2 ** 40 || bavail * bsize < room || freemem() < room) {
    t.log(`skipped: needs a Node whose limit is below 2^40 (${LIMIT}), and ${room} bytes free in /dev/shm (${bavail * bsize}) and memory (${freemem()})`);
    return t.pass();
  }
  await withRing('big-arena-bytes', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name, { arenaBytes: LIMIT + (1 << 21) });
    const consumer = Consumer.open(name);
    try {
      const a = producer.allocate(8);
      t.true(a.bytes.buffer.byteLength <= LIMIT && a.bytes.buffer.byteLength > LIMIT / 2, `its arena's view: ${a.bytes.buffer.byteLength} bytes`);
      a.bytes.set([1, 2, 3, 4, 5, 6, 7, 8]);
      a.free();
      await producer.publish(tableFromArrays({ x: Float64Array.from([4, 5]) }));
      const frame = await consumer.next({ timeout: 5000 });
      t.deepEqual(Array.from(frame.toTable().getChild('x')!.toArray() as Float64Array), [4, 5]);
      frame.release();
    } finally {
      consumer.close();
      producer.close();
    }
  });
});

test("a frame in another language's arena too large to lend whole is read through windows, and its release reaches the producer", async (t) => {
  const arenaSize = LIMIT + (1 << 21);
  const { bavail, bsize } = statfsSync('/dev/shm');
  if (LIMIT >= 2 ** 40 || bavail * bsize < arenaSize + 2 ** 30) {
    t.log(`skipped: needs a Node whose limit is below 2^40 (${LIMIT}) and ${arenaSize + 2 ** 30} bytes free in /dev/shm (${bavail * bsize})`);
    return t.pass();
  }
  await withRing('big-foreign', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = spawn('python3', ['-c', `
import sys, pyarrow as pa, gpuring
with gpuring.Producer.open(sys.argv[1], arena_size=int(sys.argv[2])) as p:
    p.publish(pa.table({"x": pa.array([1.0, 2.0], pa.float64())}))
    p.drain(timeout=30)
`, name, String(arenaSize)], { stdio: ['ignore', 'ignore', 'inherit'], env: { ...process.env, PYTHONPATH: `${root}/interop/python/src` } });
    try {
      const frame = await consumer.next({ timeout: 30_000 });
      t.is(frame.numRows, 2);
      t.deepEqual(Array.from(frame.toTable().getChild('x')!.toArray() as Float64Array), [1, 2]);
      t.deepEqual(Array.from(frame.columns()[0]!.values as Float64Array), [1, 2]);
      frame.release();
      t.deepEqual(await exitOf(producer), { code: 0, signal: null }, 'the producer saw its frame released (drain returned)');
    } finally {
      producer.kill();
      consumer.close();
    }
  });
});
