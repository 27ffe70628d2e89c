// Loans (producer.loan(), lib/frame-loan.ts): arena memory for one frame of a
// flat schema, filled in place and published without a copy. What consumers
// read must be what was written, for every flat type, in this process and in
// a C consumer; publishing fewer rows, bad offsets, abandoning and non-flat
// schemas behave as documented.
import * as A from 'apache-arrow';
import test from 'ava';
import { tableDifference } from '../lib/arrow/compare.js';
import { Consumer, FrameLoan, GpuringError, Producer } from '../lib/index.js';
import { allTypesTable } from './helpers/all-types.js';
import { cConsumerReport, expectedReport, reportSources } from './helpers/c-consumer.js';
import { withRing } from './helpers/ring.js';

const flatOnly = (table: A.Table) =>
  table.select(table.schema.fields.filter((f) => !A.DataType.isDictionary(f.type) && !(f.type.children ?? []).length).map((f) => f.name));

/** Bit `i` of `bits` as Arrow reads it (LSB first), from bit `offset`. */
const bit = (bits: Uint8Array, i: number) => (bits[i >> 3]! >> (i & 7)) & 1;

/**
 * Writes `table`'s rows into the loan the way a producer fills one: typed values, validity bits,
 * offsets and characters. apache-arrow slices re-base values and offsets; validity and bool bits keep `offset`.
 */
function fill(loan: FrameLoan, table: A.Table): void {
  for (const [i, column] of loan.columns.entries()) {
    const data = table.batches[0]!.data.children[i]!;
    const n = data.length;
    if (column.validity && data.nullCount > 0) for (let r = 0; r < n; r++) if (!bit(data.nullBitmap!, data.offset + r)) column.validity[r >> 3]! &= ~(1 << (r & 7));
    if (column.offsets) {
      const offsets = data.valueOffsets as Int32Array | BigInt64Array;
      const base = Number(offsets[0]);
      for (let r = 0; r <= n; r++) column.offsets[r] = (typeof column.offsets[0] === 'bigint' ? BigInt(Number(offsets[r]) - base) : Number(offsets[r]) - base) as never;
      (column.values as Uint8Array).set((data.values as Uint8Array).subarray(base, Number(offsets[n])));
    } else if (A.DataType.isBool(data.type)) {
      for (let r = 0; r < n; r++) (column.values as Uint8Array)[r >> 3] = ((column.values as Uint8Array)[r >> 3]! & ~(1 << (r & 7))) | (bit(data.values as Uint8Array, data.offset + r) << (r & 7));
    } else {
      const values = data.values as ArrayBufferView;
      const bytes = column.values.byteLength;
      new Uint8Array(column.values.buffer, column.values.byteOffset, bytes).set(new Uint8Array(values.buffer, values.byteOffset, bytes));
    }
  }
}

function charBytes(table: A.Table): Record<string, number> {
  const bytes: Record<string, number> = {};
  table.schema.fields.forEach((f, i) => {
    const data = table.batches[0]!.data.children[i]!;
    if (data.valueOffsets) bytes[f.name] = Number(data.valueOffsets[data.length]) - Number(data.valueOffsets[0]);
  });
  return bytes;
}

test('a loan of every flat type, filled in place, reaches the consumer as the table it was filled from', async (t) => {
  await withRing('loan-all', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    for (const table of [flatOnly(allTypesTable(37)), flatOnly(allTypesTable(40)).slice(3, 33), flatOnly(allTypesTable(1))]) {
      const loan = producer.loan(table.schema, table.numRows, { bytes: charBytes(table) });
      fill(loan, table);
      const id = await loan.publish({ tag: 7n });
      const frame = await consumer.next({ timeout: 5000 });
      t.is(frame.id, id);
      t.is(frame.tag, 7n);
      t.is(tableDifference(table, frame.toTable()), null);
      frame.release();
    }
    await producer.drain();
    t.is(producer.stats().unpublishedAllocations, 0);
    producer.close();
    consumer.close();
  });
});

test('loans of two schemas, interleaved with publish(table) of one of them: every frame arrives as written (each schema keeps its own layout)', async (t) => {
  await withRing('loan-schemas', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const ints = new A.Table({ a: A.makeVector(Int32Array.of(1, 2, 3)), b: A.makeVector(Float64Array.of(0.5, 1.5, 2.5)) });
    const texts = new A.Table({ s: A.vectorFromArray(['x', 'yz', ''], new A.Utf8()), n: A.makeVector(Int16Array.of(-1, 0, 1)) });
    const sent: A.Table[] = [];
    for (const table of [ints, texts, ints, texts, ints]) {
      const loan = producer.loan(table.schema, table.numRows, { bytes: charBytes(table) });
      fill(loan, table);
      await loan.publish();
      sent.push(table);
      if (table === ints) (await producer.publish(texts), sent.push(texts));
    }
    for (const table of sent) {
      const frame = await consumer.next({ timeout: 5000 });
      t.is(tableDifference(table, frame.toTable()), null);
      frame.release();
    }
    await producer.drain();
    producer.close();
    consumer.close();
  });
});

test('a loan read by a C consumer in another process: the checksums Node computes for the same table', async (t) => {
  await withRing('loan-c', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const sources = reportSources().map((s) => s.select(['id', 'score', 'name']));
    const report = cConsumerReport(name, sources.length);
    for (const [k, table] of sources.entries()) {
      const loan = producer.loan(table.schema, table.numRows, { bytes: charBytes(table) });
      fill(loan, table);
      await loan.publish({ tag: BigInt(k) });
    }
    t.deepEqual(await report, sources.map((table, k) => expectedReport(table, k + 1, k, 'host')));
    await producer.drain();
    producer.close();
  });
});

test('publish({ rows }) sends the first rows only, null counts from the bits; zero rows too', async (t) => {
  await withRing('loan-rows', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const schema = new A.Schema([new A.Field('x', new A.Float64(), true), new A.Field('s', new A.Utf8(), false)]);
    const loan = producer.loan(schema, 100, { bytes: { s: 64 } });
    const [x, s] = loan.columns;
    (x!.values as Float64Array).set([1.5, 2.5, 3.5, 4.5]);
    x!.validity![0] = 0b1101; // row 1 is null
    (s!.offsets as Int32Array).set([0, 1, 3, 3, 6]);
    (s!.values as Uint8Array).set(new TextEncoder().encode('abbccc'));
    await loan.publish({ rows: 4 });
    const frame = await consumer.next({ timeout: 5000 });
    const got = frame.toTable();
    t.deepEqual([...got.getChild('x')!], [1.5, null, 3.5, 4.5]);
    t.deepEqual([...got.getChild('s')!], ['a', 'bb', '', 'ccc']);
    t.is(got.getChild('x')!.nullCount, 1);
    frame.release();
    await producer.loan(schema, 0).publish();
    const empty = await consumer.next({ timeout: 5000 });
    t.is(empty.toTable().numRows, 0);
    empty.release();
    producer.close();
    consumer.close();
  });
});

test('offsets outside the lent bytes are refused and the loan stays open; abandon() frees; a loan publishes once', async (t) => {
  await withRing('loan-bad', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const schema = new A.Schema([new A.Field('s', new A.Utf8(), false)]);
    const loan = producer.loan(schema, 2, { bytes: { s: 4 } });
    (loan.column('s').offsets as Int32Array).set([0, 2, 9]);
    await t.throwsAsync(loan.publish(), { instanceOf: GpuringError, code: 'INVALID_ARGUMENT', message: /outside the 4 bytes lent/ });
    await t.throwsAsync(loan.publish({ rows: 3 }), { code: 'INVALID_ARGUMENT' });
    (loan.column('s').offsets as Int32Array).set([0, 2, 4]);
    for (const bad of [{ tag: 1 }, { tag: -1n }, { timeout: -1 }, { rows: 1.5 }, { nope: 1 }]) {
      await t.throwsAsync(loan.publish(bad as never), { instanceOf: GpuringError, code: 'INVALID_ARGUMENT' }, JSON.stringify(bad, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)));
    }
    t.true(Number.isInteger(await loan.publish()));
    await t.throwsAsync(loan.publish(), { code: 'FRAME_STATE' });

    const abandoned = producer.loan(schema, 1000, { bytes: { s: 1 << 16 } });
    t.is(producer.stats().unpublishedAllocations, 1);
    abandoned.abandon();
    t.is(producer.stats().unpublishedAllocations, 0);
    await t.throwsAsync(abandoned.publish(), { code: 'FRAME_STATE' });
    t.throws(() => producer.loan(schema, 1, { bytes: { nope: 1 } }), { code: 'INVALID_ARGUMENT' });

    // A Table built over a loan's memory and published takes that memory without a copy: the loan can no longer publish it.
    const numbers = new A.Schema([new A.Field('x', new A.Float64(), false)]);
    const taken = producer.loan(numbers, 4);
    const x = taken.column('x').values as Float64Array;
    await producer.publish(new A.Table({ x: A.makeVector(A.makeData({ type: new A.Float64(), length: 4, data: x })) }));
    await t.throwsAsync(taken.publish(), { code: 'FRAME_STATE', message: /published or freed by another call/ });
    t.throws(() => producer.loan(allTypesTable(2).schema, 2), { code: 'INVALID_ARGUMENT', message: /flat schemas/ });
    producer.close();
  });
});
