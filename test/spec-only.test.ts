// The C programs written from SPEC.md alone (interop/spec-only) against Node,
// each side in its own process: the proof that the document suffices. Values
// both ways, and the two crashes SPEC.md §10 promises recovery from: a
// consumer killed holding a lease and a claim, a producer killed mid-publish.
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import test from 'ava';
import { Consumer, Producer } from '../lib/index.js';
import { cConsumerReport, expectedReport, producerColumns, reportSources, tableColumns } from './helpers/c-consumer.js';
import { child, cProgram, eventually, exitOf, nextLine, root, SPEC_ONLY, withRing } from './helpers/ring.js';

const WAIT = { timeout: 20_000 };
const specProgram = (name: 'spec_producer' | 'spec_consumer') => cProgram(name, SPEC_ONLY);
const arenasOf = (ring: string) => readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${ring}.`));

test('the spec-only programs include nothing of the implementation: system headers and their own', (t) => {
  const dir = join(root, SPEC_ONLY);
  const sources = readdirSync(dir).filter((f) => /\.[ch]$/.test(f));
  t.deepEqual(sources.sort(), ['spec_consumer.c', 'spec_frame.h', 'spec_producer.c', 'spec_ring.h']);
  for (const file of sources) {
    for (const [, header] of readFileSync(join(dir, file), 'utf8').matchAll(/#include\s+([<"][^>"]+[>"])/g)) {
      t.true(/^<[a-z/]+\.h>$/.test(header!) || /^"spec_\w+\.h"$/.test(header!), `${file} includes ${header}`);
    }
  }
});

test('frames from the spec-only producer read in Node hold exactly what it wrote', async (t) => {
  await withRing('spec-prod', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const proc = spawn(specProgram('spec_producer'), [name, '3', '500'], { stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      for (let k = 0; k < 3; k++) {
        const f = await consumer.next(WAIT);
        t.is(f.tag, BigInt(k));
        t.is(f.id, k + 1);
        t.deepEqual(tableColumns(f.toTable()), producerColumns(k, 500));
        f.release();
      }
    } finally {
      consumer.close();
    }
    t.deepEqual(await nextLine(proc), { published: 3 });
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
    t.deepEqual(arenasOf(name), [], 'the producer detached: its entry and its arena are freed');
  });
});

test('frames from Node are read by the spec-only consumer with the checksums Node computes', async (t) => {
  await withRing('spec-cons', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const sources = reportSources();
    const report = cConsumerReport(name, sources.length, specProgram('spec_consumer'));
    for (const [k, table] of sources.entries()) await producer.publish(table, { tag: BigInt(k) });
    t.deepEqual(await report, sources.map((table, k) => expectedReport(table, k + 1, k, 'host')));
    await producer.drain();
    producer.close();
  });
});

test('a broadcast ring (SPEC.md §5.4): frames from Node reach a spec-only subscriber and a Node subscriber, each with the checksums Node computes', async (t) => {
  await withRing('spec-bcast', { slots: 16, delivery: 'all' }, async (ring, name) => {
    const sources = reportSources();
    using node = Consumer.open(name);
    const report = cConsumerReport(name, sources.length, specProgram('spec_consumer'));
    t.true(await eventually(() => ring.inspect().participants.filter((p) => p.subscriber).length === 2), 'the spec-only consumer subscribed');
    const producer = Producer.open(name);
    for (const [k, table] of sources.entries()) await producer.publish(table, { tag: BigInt(k) });
    for (const [k, table] of sources.entries()) {
      const f = await node.next(WAIT);
      t.is(f.tag, BigInt(k));
      t.is(f.toTable().numRows, table.numRows);
      f.release();
    }
    t.deepEqual(await report, sources.map((table, k) => expectedReport(table, k + 1, k, 'host')));
    await producer.drain();
    producer.close();
  });
});

test('a broadcast ring (SPEC.md §5.4): frames from the spec-only producer reach two Node subscribers, each exactly as written', async (t) => {
  await withRing('spec-bcast-prod', { slots: 16, delivery: 'all' }, async (_ring, name) => {
    using a = Consumer.open(name);
    using b = Consumer.open(name);
    const proc = spawn(specProgram('spec_producer'), [name, '20', '100'], { stdio: ['ignore', 'pipe', 'inherit'] });
    // In turn: the producer reuses a frame's arena region only once both released it.
    for (let k = 0; k < 20; k++)
      for (const consumer of [a, b]) {
        const f = await consumer.next(WAIT);
        t.is(f.tag, BigInt(k));
        t.deepEqual(tableColumns(f.toTable()), producerColumns(k, 100));
        f.release();
      }
    t.deepEqual(await nextLine(proc), { published: 20 }, 'it reaped every frame once both had released it');
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
  });
});

test('a spec-only consumer killed holding a lease and a claim: the claim goes to a Node consumer, the lease comes back', async (t) => {
  await withRing('spec-die-c', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const sources = reportSources();
    const tables = [0, 1, 2, 3].map((k) => sources[k % 2]!);
    for (const [k, table] of tables.entries()) await producer.publish(table, { tag: BigInt(k) });
    const proc = spawn(specProgram('spec_consumer'), [name, '4', '20000', '--die-holding'], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.deepEqual(await nextLine(proc), expectedReport(tables[0]!, 1, 0, 'host'), 'the first frame reached its user');
    t.deepEqual(await exitOf(proc), { code: null, signal: 'SIGKILL' });
    const consumer = Consumer.open(name);
    const tags: bigint[] = [];
    for (let k = 0; k < 3; k++) {
      const f = await consumer.next(WAIT);
      tags.push(f.tag);
      t.deepEqual(f.toTable().numRows, tables[Number(f.tag)]!.numRows);
      f.release();
    }
    t.deepEqual(tags.sort(), [1n, 2n, 3n], 'the claimed frame is redelivered, the leased one is not');
    await producer.drain({ timeout: 20_000 });
    t.is(producer.inFlight, 0, 'the dead consumer\'s lease was released on its behalf');
    consumer.close();
    producer.close();
  });
});

test('a spec-only producer killed mid-publish: its published frames arrive, the half-written one is skipped, the ring goes on', async (t) => {
  await withRing('spec-die-p', { slots: 16 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const proc = spawn(specProgram('spec_producer'), [name, '3', '200', '--die-writing'], { stdio: ['ignore', 'ignore', 'inherit'] });
    t.deepEqual(await exitOf(proc), { code: null, signal: 'SIGKILL' });
    for (let k = 0; k < 3; k++) {
      const f = await consumer.next(WAIT);
      t.deepEqual(tableColumns(f.toTable()), producerColumns(k, 200), 'a dead producer\'s frames stay readable');
      f.release();
    }
    const producer = Producer.open(name);
    await producer.publish(reportSources()[0]!, { tag: 7n });
    const after = await consumer.next(WAIT);
    t.is(after.tag, 7n, 'the next frame is delivered past the slot the dead producer left WRITING');
    after.release();
    await producer.drain();
    t.true(await eventually(() => arenasOf(name).length === 1), 'the dead producer\'s arena is removed; the Node producer\'s stays');
    producer.close();
    consumer.close();
  });
});

test('the spec-only consumer\'s own sweep recovers from dead consumers: a claim redelivered to it, a lease released for the producer', async (t) => {
  await withRing('spec-sweep', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name, { sweepInterval: 600_000 }); // the spec-only consumer must be the one that sweeps
    const tables = [0, 1, 2].map((k) => reportSources()[k % 2]!);
    for (const [k, table] of tables.entries()) await producer.publish(table, { tag: BigInt(k) });
    const leaser = child('hold', name, 1);
    t.deepEqual((await nextLine<{ tags: string[] }>(leaser)).tags, ['0']);
    const claimer = spawn(cProgram('hold'), [name, 'claim'], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.is(await new Promise<string>((resolve) => createInterface({ input: claimer.stdout! }).once('line', resolve)), 'ready 1');
    for (const proc of [leaser, claimer]) (proc.kill('SIGKILL'), await exitOf(proc));
    const lines = await cConsumerReport(name, 2, specProgram('spec_consumer'));
    t.deepEqual(lines.sort((a, b) => a.tag - b.tag), [1, 2].map((k) => expectedReport(tables[k]!, k + 1, k, 'host')));
    await producer.drain({ timeout: 20_000 });
    t.is(producer.inFlight, 0, 'the dead Node consumer\'s lease was released by the spec-only consumer\'s sweep');
    producer.close();
  });
});
