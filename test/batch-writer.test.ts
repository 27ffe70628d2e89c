// BatchWriter (publish(table) without describing) against the describing
// path it replaces: the same body bytes and the same buffer bytes at the same
// places, for every type, flat and nested (lists, fixed-size lists, structs,
// dictionaries), slices at byte and bit offsets, nulls and none, zero rows;
// and no writer for dictionary values that hold a dictionary.
import * as A from 'apache-arrow';
import test from 'ava';
import { ByteSink } from '../lib/arrow/byte-sink.js';
import { BatchWriter } from '../lib/arrow/batch-writer.js';
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
const all = allTypesTable(37);
const cases: [string, A.RecordBatch][] = [
  ['every flat type with nulls', allFlat.batches[0]!],
  ['sliced at a byte boundary', allFlat.slice(8, 30).batches[0]!],
  ['sliced at bit 3', allFlat.slice(3, 33).batches[0]!],
  ['zero rows', allFlat.slice(5, 5).batches[0]!],
  ['every type, nested and dictionaries too, with nulls', all.batches[0]!],
  ['every type sliced at a byte boundary', all.slice(8, 30).batches[0]!],
  ['every type sliced at bit 3', all.slice(3, 33).batches[0]!],
  ['every type, zero rows', all.slice(5, 5).batches[0]!],
  ['no nulls', new A.Table({ a: A.vectorFromArray([1, 2, 3], new A.Int32()), s: A.vectorFromArray(['x', 'yy', ''], new A.Utf8()) }).batches[0]!],
  ['all null', new A.Table({ a: A.vectorFromArray([null, null], new A.Float64()), s: A.vectorFromArray([null, null], new A.Utf8()) }).batches[0]!],
];

test('there are flat columns of every layout to write: fixed, bool, utf8 and large utf8', (t) => {
  const types = allFlat.schema.fields.map((f) => f.type.toString());
  for (const want of ['Int8', 'Uint64', 'Float16', 'Bool', 'Utf8', 'LargeUtf8', 'Binary']) t.true(types.includes(want), want);
  t.true(allFlat.numCols >= 20);
});

test('there are nested columns of every kind to write: list, large list, fixed-size list, struct, dictionaries', (t) => {
  const types = all.schema.fields.filter(nestedOrDictionary).map((f) => f.type.typeId);
  for (const want of [A.Type.List, A.Type.LargeList, A.Type.FixedSizeList, A.Type.Struct, A.Type.Dictionary]) t.true(types.includes(want), A.Type[want]);
});

for (const [name, batch] of cases) {
  test(`${name}: the body and the buffers equal the describing path's`, (t) => {
    const writer = BatchWriter.of(batch);
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

for (const [kind, table] of [['flat', allFlat], ['nested', all]] as const)
  test(`one writer serves every batch of its ${kind} schema, each frame its own counts, buffers and arena`, (t) => {
    const writer = BatchWriter.of(table.batches[0]!)!;
    const other = '/gpuring.flat.p3g2.a2';
    // As the producer calls it: one handle object per arena, the same object again for the same arena.
    const handles = new Map([ARENA, other].map((name) => [name, hostBuffer(name, 0, 0).handle]));
    const frames: [A.Table, string][] = [[table.slice(1, 20), ARENA], [table.slice(0, 0), ARENA], [table, ARENA], [table.slice(2, 9), other], [table, ARENA]];
    for (const [slice, arena] of frames) {
      const batch = slice.batches[0]!;
      writer.gather(batch);
      t.deepEqual(writer.body(BASE, handles.get(arena)), described(batch, arena).body);
    }
  });

test('a schema whose dictionary values hold a dictionary gets no writer (the describing path takes it); a flat one is flat, a nested one not', (t) => {
  const inner = A.vectorFromArray(['a', 'b', 'a'], new A.Dictionary(new A.Utf8(), new A.Int32()));
  const outer = A.makeVector(A.makeData({ type: new A.Dictionary(inner.type, new A.Int8(), 7), length: 2, nullCount: 0, data: Int8Array.of(0, 2), dictionary: inner }));
  t.is(BatchWriter.of(new A.Table({ d: outer }).batches[0]!), null);
  t.true(BatchWriter.of(allFlat.batches[0]!)!.flat);
  t.false(BatchWriter.of(all.batches[0]!)!.flat);
});
