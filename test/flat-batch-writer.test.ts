// FlatBatchWriter (publish(table) without describing) against the describing
// path it replaces: the same body bytes and the same buffer bytes at the same
// places, for every flat type, slices at byte and bit offsets, nulls and none,
// zero rows; and no writer for schemas that are not flat.
import * as A from 'apache-arrow';
import test from 'ava';
import { ByteSink } from '../lib/arrow/byte-sink.js';
import { FlatBatchWriter } from '../lib/arrow/flat-batch-writer.js';
import { describeBatch } from '../lib/arrow/table-writer.js';
import { hostBuffer } from '../lib/codec/description.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { align64 } from '../lib/codec/layout.js';
import { allTypesTable } from './helpers/all-types.js';

const ARENA = '/gpuring.flat.p3g2.a1';
const BASE = 4160;

/** The describing path: buffers placed one after another from BASE, as the producer copies them. */
function described(batch: A.RecordBatch, arena = ARENA): { body: Uint8Array; placed: Uint8Array[] } {
  const placed: Uint8Array[] = [];
  let at = BASE;
  const description = describeBatch(batch, {
    place: (bytes) => {
      placed.push(bytes.slice());
      const d = hostBuffer(arena, at, bytes.length);
      at += align64(bytes.length);
      return d;
    },
  });
  return { body: encodeFrame(description), placed };
}

/** `placed` one after another from byte 64, each at a 64-byte boundary, in `size` bytes of 0xee. */
function laidOut(placed: Uint8Array[], size: number): Uint8Array {
  const out = new Uint8Array(size).fill(0xee);
  let at = 64;
  for (const p of placed) (out.set(p, at), (at += align64(p.length)));
  return out;
}

const nestedOrDictionary = (f: A.Field) => A.DataType.isDictionary(f.type) || (f.type.children ?? []).length > 0;

/** TABLE's columns without children or a dictionary. */
function flatOnly(table: A.Table): A.Table {
  return table.select(table.schema.fields.filter((f) => !nestedOrDictionary(f)).map((f) => f.name));
}

const allFlat = flatOnly(allTypesTable(37));
const cases: [string, A.RecordBatch][] = [
  ['every flat type with nulls', allFlat.batches[0]!],
  ['sliced at a byte boundary', allFlat.slice(8, 30).batches[0]!],
  ['sliced at bit 3', allFlat.slice(3, 33).batches[0]!],
  ['zero rows', allFlat.slice(5, 5).batches[0]!],
  ['no nulls', new A.Table({ a: A.vectorFromArray([1, 2, 3], new A.Int32()), s: A.vectorFromArray(['x', 'yy', ''], new A.Utf8()) }).batches[0]!],
  ['all null', new A.Table({ a: A.vectorFromArray([null, null], new A.Float64()), s: A.vectorFromArray([null, null], new A.Utf8()) }).batches[0]!],
];

test('there are flat columns of every layout to write: fixed, bool, utf8 and large utf8', (t) => {
  const types = allFlat.schema.fields.map((f) => f.type.toString());
  for (const want of ['Int8', 'Uint64', 'Float16', 'Bool', 'Utf8', 'LargeUtf8', 'Binary']) t.true(types.includes(want), want);
  t.true(allFlat.numCols >= 20);
});

for (const [name, batch] of cases) {
  test(`flat ${name}: the body and the buffers equal the describing path's`, (t) => {
    const writer = FlatBatchWriter.of(batch);
    t.truthy(writer);
    const total = writer!.gather(batch);
    const { body, placed } = described(batch);
    t.is(total, placed.reduce((n, p) => n + align64(p.length), 0));
    // Into bytes at each alignment (4 leaves 8-byte types no view of their own): padding keeps its 0xee.
    for (const shift of [0, 4]) {
      const sink = new ByteSink(new Uint8Array(shift + 64 + total).fill(0xee).subarray(shift));
      writer!.copyTo(sink, 64);
      t.deepEqual(sink.bytes, laidOut(placed, 64 + total), `bytes ${shift} from an 8-byte boundary`);
    }
    t.deepEqual(writer!.body(BASE, hostBuffer(ARENA, 0, 0).handle), body);
  });
}

test('one writer serves every batch of its schema, each frame its own counts, buffers and arena', (t) => {
  const writer = FlatBatchWriter.of(cases[0]![1])!;
  const other = '/gpuring.flat.p3g2.a2';
  // As the producer calls it: one handle object per arena, the same object again for the same arena.
  const handles = new Map([ARENA, other].map((name) => [name, hostBuffer(name, 0, 0).handle]));
  const frames: [A.Table, string][] = [[allFlat.slice(1, 20), ARENA], [allFlat.slice(0, 0), ARENA], [allFlat, ARENA], [allFlat.slice(2, 9), other], [allFlat, ARENA]];
  for (const [table, arena] of frames) {
    const batch = table.batches[0]!;
    writer.gather(batch);
    t.deepEqual(writer.body(BASE, handles.get(arena)), described(batch, arena).body);
  }
});

test('schemas with nested or dictionary columns get no writer (the describing path takes them)', (t) => {
  const table = allTypesTable(5);
  const nested = table.schema.fields.filter(nestedOrDictionary);
  t.true(nested.length >= 3);
  for (const f of nested) t.is(FlatBatchWriter.of(table.select([f.name]).batches[0]!), null, f.name);
});
