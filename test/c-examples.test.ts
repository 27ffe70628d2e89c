// The C examples (interop/c) against Node, each side in its own process:
// frames a C producer writes read equal in Node, and frames Node publishes
// are read by the C consumer with the checksums Node computes.
import { spawn } from 'node:child_process';
import * as A from 'apache-arrow';
import test from 'ava';
import { Consumer, Producer } from '../lib/index.js';
import { cProgram, exitOf, withRing } from './helpers/ring.js';
import { cConsumerReport, expectedReport, producerColumns, reportSources, tableColumns } from './helpers/c-consumer.js';

test('frames from the C producer read in Node hold exactly what it wrote', async (t) => {
  await withRing('c-prod', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const proc = spawn(cProgram('producer', 'interop/c'), [name, '3', '500'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      for (let k = 0; k < 3; k++) {
        const f = await consumer.next({ timeout: 20_000 });
        t.is(f.tag, BigInt(k));
        t.deepEqual(tableColumns(f.toTable()), producerColumns(k, 500));
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
    const sources = reportSources();
    const report = cConsumerReport(name, sources.length);
    for (const [k, table] of sources.entries()) await producer.publish(table, { tag: BigInt(k) });
    const lines = await report;
    t.deepEqual(lines, sources.map((table, k) => expectedReport(table, k + 1, k, 'host')));
    await producer.drain();
    producer.close();
  });
});
