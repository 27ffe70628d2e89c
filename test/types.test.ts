// Every type gpuring carries crosses from a producer process to this one and
// equals the table it was built from, value by value.
import test from 'ava';
import { tableDifference } from '../lib/arrow/compare.js';
import { allTypesTable, wideTable } from './helpers/all-types.js';
import { child, exitOf, withRing } from './helpers/ring.js';

const ROWS = 37;

test('every type round-trips between processes: full, sliced (offset 3) and zero-row', async (t) => {
  await withRing('types', { slots: 8 }, async (_ring, name) => {
    const { Consumer } = await import('../lib/index.js');
    const consumer = Consumer.open(name);
    const producer = child('publish-all-types', name, ROWS);
    const expected = allTypesTable(ROWS);
    const cases = [expected, expected.slice(3, ROWS - 2), expected.slice(0, 0)];
    for (let i = 0; i < 3; i++) {
      const frame = await consumer.next({ timeout: 20_000 });
      const want = cases[Number(frame.tag)]!;
      const got = frame.toTable();
      t.is(tableDifference(want, got), null, `frame ${frame.tag}`);
      t.deepEqual([...got.schema.metadata], [['producer', 'gpuring tests']]);
      t.deepEqual([...got.schema.fields.find((f) => f.name === 'int32')!.metadata], [['unit', 'widgets']]);
      frame.release();
    }
    t.is(cases[0]!.numCols, 38, 'the every-type table has all its columns');
    consumer.close();
    t.deepEqual(await exitOf(producer), { code: 0, signal: null });
  });
});

test('a frame of 1,000 columns crosses intact', async (t) => {
  await withRing('wide', { slots: 4 }, async (_ring, name) => {
    const { Consumer } = await import('../lib/index.js');
    const consumer = Consumer.open(name);
    const producer = child('publish-wide', name, 1000);
    const frame = await consumer.next({ timeout: 20_000 });
    const got = frame.toTable();
    t.is(got.numCols, 1000);
    t.is(tableDifference(wideTable(1000, 4), got), null);
    frame.release();
    consumer.close();
    t.deepEqual(await exitOf(producer), { code: 0, signal: null });
  });
});
