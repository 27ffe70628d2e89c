// The C examples (interop/c) against Node, each side in its own process:
// frames a C producer writes read equal in Node, and frames Node publishes
// are read by the C consumer with the checksums Node computes.
import { spawn, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import * as A from 'apache-arrow';
import test from 'ava';
import { Consumer, Producer } from '../lib/index.js';
import { cProgram, exitOf, root, withRing } from './helpers/ring.js';
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

test('gpuring.h and gpuring/cuda.h after a system header: build in the default mode or with -D_GNU_SOURCE; strict ISO C stops at one #error that names the fix', (t) => {
  const compile = (source: string, ...flags: string[]) =>
    spawnSync('cc', [...flags, `-I${join(root, 'interop/include')}`, '-fsyntax-only', '-x', 'c', '-'], { input: source, encoding: 'utf8' });
  const program = (...headers: string[]) => `${headers.map((h) => `#include <${h}>\n`).join('')}int main(void) { return 0; }\n`;
  const after = program('stdio.h', 'gpuring.h', 'gpuring/cuda.h');
  t.is(compile(program('gpuring.h', 'stdio.h'), '-std=c11', '-Wall', '-Wextra', '-Werror').stderr, '', 'included first');
  t.is(compile(after, '-std=gnu17', '-Wall', '-Wextra', '-Werror').stderr, '', 'after stdio.h, the default mode');
  t.is(compile(after, '-std=c11', '-D_GNU_SOURCE', '-Wall', '-Wextra', '-Werror').stderr, '', 'after stdio.h, -std=c11 -D_GNU_SOURCE');
  t.is(compile(program('gpuring/cuda.h'), '-std=c11', '-Wall', '-Wextra', '-Werror').stderr, '', 'gpuring/cuda.h alone');
  const refused = compile(after, '-std=c11');
  t.not(refused.status, 0);
  const errors = refused.stderr.split('\n').filter((line) => /\berror:/.test(line));
  t.is(errors.length, 1, refused.stderr);
  t.regex(errors[0]!, /include <gpuring\.h> before any system header, or compile with -D_GNU_SOURCE/);
});
