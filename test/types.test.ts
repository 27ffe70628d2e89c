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

test('a Table of no batches (new Table(schema)) of every type, nested ones too, publishes a zero-row frame of that schema', async (t) => {
  await withRing('types-empty', { slots: 8 }, async (_ring, name) => {
    const { Consumer, Producer } = await import('../lib/index.js');
    const { Table } = await import('apache-arrow');
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const schema = allTypesTable(ROWS).schema;
    await producer.publish(new Table(schema));
    const got = (await consumer.next({ timeout: 5000 })).toTable();
    t.is(got.numRows, 0);
    t.deepEqual(got.schema.fields.map((f) => String(f.type)), schema.fields.map((f) => String(f.type)));
    consumer.close();
    producer.close();
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

test('columns(): typed-array views equal the table they were built from, full and sliced (offset 3), without building a Table', async (t) => {
  await withRing('views', { slots: 8 }, async (_ring, name) => {
    const { Consumer } = await import('../lib/index.js');
    const consumer = Consumer.open(name);
    const producer = child('publish-all-types', name, ROWS);
    const expected = allTypesTable(ROWS);
    const cases = [expected, expected.slice(3, ROWS - 2), expected.slice(0, 0)];
    const numbers = ['int8', 'int16', 'int32', 'int64', 'uint8', 'uint16', 'uint32', 'uint64', 'float32', 'float64'];
    const text = new TextDecoder();
    for (let n = 0; n < 3; n++) {
      const frame = await consumer.next({ timeout: 20_000 });
      const want = cases[Number(frame.tag)]!;
      const views = new Map(frame.columns().map((v) => [v.name, v]));
      const bit = (bytes: Uint8Array, i: number) => (bytes[i >> 3]! >> (i & 7)) & 1;
      const valid = (v: { validity: Uint8Array | null; offset: number }, i: number) => !v.validity || bit(v.validity, v.offset + i) === 1;
      for (const col of [...numbers, 'bool', 'utf8', 'list']) {
        const v = views.get(col)!;
        const w = want.getChild(col)!;
        t.is(v.length, want.numRows, col);
        for (let i = 0; i < v.length; i++) {
          t.is(valid(v, i), w.get(i) !== null, `${col}[${i}] validity`);
          if (!valid(v, i)) continue;
          if (numbers.includes(col)) t.is(v.values![i], w.get(i), `${col}[${i}]`);
          if (col === 'bool') t.is(bit(v.values as Uint8Array, v.offset + i) === 1, w.get(i), `bool[${i}]`);
          const [from, to] = [Number(v.offsets?.[i]), Number(v.offsets?.[i + 1])];
          if (col === 'utf8') t.is(text.decode((v.values as Uint8Array).subarray(from, to)), w.get(i), `utf8[${i}]`);
          if (col === 'list') t.is(to - from, w.get(i).length, `list[${i}] length`);
        }
      }
      t.is(frame.column('int32')!.name, 'int32');
      t.is(frame.column(0)!.name, want.schema.fields[0]!.name);
      t.is(frame.column('no such column'), undefined);
      frame.release();
    }
    consumer.close();
    t.deepEqual(await exitOf(producer), { code: 0, signal: null });
  });
});
