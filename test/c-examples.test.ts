// The C examples (interop/c) against Node, each side in its own process:
// frames a C producer writes read equal in Node, and frames Node publishes
// are read by the C consumer with the checksums Node computes.
import { spawn } from 'node:child_process';
import * as A from 'apache-arrow';
import test from 'ava';
import { Consumer, Producer } from '../lib/index.js';
import { cProgram, exitOf, withRing } from './helpers/ring.js';
import { cConsumerReport, expectedReport } from './helpers/c-consumer.js';

test('frames from the C producer read in Node hold exactly what it wrote', async (t) => {
  await withRing('c-prod', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const proc = spawn(cProgram('producer', 'interop/c'), [name, '3', '500'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      for (let k = 0; k < 3; k++) {
        const f = await consumer.next({ timeout: 20_000 });
        t.is(f.tag, BigInt(k));
        const table = f.toTable();
        const ids = Array.from({ length: 500 }, (_, r) => k * 500 + r);
        t.deepEqual(Array.from(table.getChild('id')!.toArray() as BigInt64Array, Number), ids);
        t.deepEqual([...table.getChild('score')!], ids.map((i) => (i % 7 === 0 ? null : i / 4)));
        t.deepEqual([...table.getChild('name')!], ids.map((i) => `row-${i}`));
        f.release();
      }
    } finally {
      consumer.close();
    }
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
  });
});

test('frames from Node are read by the C consumer with the same checksums', async (t) => {
  await withRing('c-cons', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const tables = [0, 1].map((k) => {
      const idx = Array.from({ length: 300 + k }, (_, i) => i);
      return new A.Table({
        id: A.vectorFromArray(idx.map((i) => i * 3 + k), new A.Int32()),
        score: A.vectorFromArray(idx.map((i) => (i % 5 === 0 ? null : i * 0.25 - k)), new A.Float64()),
        name: A.vectorFromArray(idx.map((i) => (i % 11 === 0 ? null : `név-${i}`)), new A.Utf8()),
        tensor: A.vectorFromArray(idx.map((i) => [i, i + 0.5, -i, k]), new A.FixedSizeList(4, new A.Field('item', new A.Float32(), false))),
      });
    });
    const sources = [tables[0]!, tables[1]!.slice(7, 250)];
    const report = cConsumerReport(name, sources.length);
    for (const [k, table] of sources.entries()) await producer.publish(table, { tag: BigInt(k) });
    const lines = await report;
    t.deepEqual(lines, sources.map((table, k) => expectedReport(table, k + 1, k, 'host')));
    await producer.drain();
    producer.close();
  });
});
