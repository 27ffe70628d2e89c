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

test('gpuring.h after a system header: builds with -D_GNU_SOURCE, else stops at one #error that names the fix', (t) => {
  const compile = (source: string, ...flags: string[]) =>
    spawnSync('cc', ['-std=c11', ...flags, `-I${join(root, 'interop/include')}`, '-fsyntax-only', '-x', 'c', '-'], { input: source, encoding: 'utf8' });
  const after = '#include <stdio.h>\n#include <gpuring.h>\nint main(void) { return 0; }\n';
  t.is(compile('#include <gpuring.h>\n#include <stdio.h>\nint main(void) { return 0; }\n', '-Wall', '-Werror').status, 0, 'included first');
  t.is(compile(after, '-D_GNU_SOURCE', '-Wall', '-Werror').status, 0, 'after stdio.h, with -D_GNU_SOURCE');
  const refused = compile(after);
  t.not(refused.status, 0);
  const errors = refused.stderr.split('\n').filter((line) => /\berror:/.test(line));
  t.is(errors.length, 1, refused.stderr);
  t.regex(errors[0]!, /include <gpuring\.h> before any system header, or compile with -D_GNU_SOURCE/);
});
