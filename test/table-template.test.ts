// TableTemplate assembles a stream's Tables without apache-arrow's Table and
// RecordBatch constructors (lib/arrow/table-template.ts). Its Tables must be
// the constructors' in every way a user can see: the same own properties, the
// same IPC bytes, values, slices, concatenation and columns, for every type,
// nested and dictionary columns included, with metadata, and zero rows.
import * as A from 'apache-arrow';
import test from 'ava';
import { tableDifference } from '../lib/arrow/compare.js';
import { TableTemplate } from '../lib/arrow/table-template.js';
import { allTypesTable } from './helpers/all-types.js';

/** The table as the constructors build it from its batch's columns. */
function constructed(schema: A.Schema, rows: number, children: A.Data[]): A.Table {
  return new A.Table([new A.RecordBatch(schema, A.makeData({ type: new A.Struct(schema.fields), length: rows, nullCount: 0, children }))]);
}

const withMetadata = (table: A.Table) => new A.Table(new A.Schema(table.schema.fields, new Map([['origin', 'test']])), table.batches[0]!);

const cases: [string, A.Table][] = [
  ['every type', allTypesTable(37)],
  ['zero rows', allTypesTable(0)],
  ['one row', allTypesTable(1)],
  ['schema metadata', withMetadata(allTypesTable(5))],
];

for (const [label, source] of cases)
  test(`an assembled Table is the constructors' Table: ${label}`, (t) => {
    const { schema } = source;
    const template = new TableTemplate(schema);
    const children = source.batches[0]!.data.children as A.Data[];
    const rows = source.numRows;
    const expected = constructed(schema, rows, children);
    const got = template.table(rows, children);

    t.true(got instanceof A.Table);
    t.true(got.batches[0] instanceof A.RecordBatch);
    t.deepEqual(Object.keys(got), Object.keys(expected));
    t.deepEqual(Object.keys(got.batches[0]!), Object.keys(expected.batches[0]!));
    const offsets = (table: A.Table) => Array.from((table as unknown as { _offsets: ArrayLike<number> })._offsets); // protected in apache-arrow's types
    t.deepEqual(offsets(got), offsets(expected));
    t.is(tableDifference(expected, got), null);
    t.deepEqual(A.tableToIPC(got), A.tableToIPC(expected));
    t.deepEqual(got.schema.metadata, expected.schema.metadata);
    t.is(tableDifference(expected.slice(1, 4), got.slice(1, 4)), null);
    t.is(got.concat(got).numRows, 2 * rows);
    t.is(tableDifference(expected.concat(expected), got.concat(got)), null);
    const values = (table: A.Table, name: string) => [...table.getChild(name)!].map(String);
    for (const field of schema.fields) t.deepEqual(values(got, field.name), values(expected, field.name), field.name);
  });

test('Tables from one template are independent: a batch metadata map per Table, offsets per row count', (t) => {
  const source = allTypesTable(9);
  const template = new TableTemplate(source.schema);
  const children = source.batches[0]!.data.children as A.Data[];
  const a = template.table(9, children);
  const b = template.table(4, children.map((c) => c.slice(2, 4)));
  t.not(a.batches[0]!.metadata, b.batches[0]!.metadata);
  t.is(a.numRows, 9);
  t.is(b.numRows, 4);
  t.is(tableDifference(source.slice(2, 6), b), null);
});
