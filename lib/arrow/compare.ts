/**
 * Value-by-value comparison of two apache-arrow tables, for verifying what
 * crossed a ring (buffers may legitimately differ in layout: offsets, padding).
 */
import { isDeepStrictEqual } from 'node:util';
import type { Table } from 'apache-arrow';

/** A plain, comparable form of one cell. */
export function plainValue(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'number' && Number.isNaN(value)) return 'NaN';
  if (value instanceof Date) return value.getTime();
  if (ArrayBuffer.isView(value)) return Array.from(value as unknown as ArrayLike<unknown>, plainValue);
  if (typeof value === 'object' && Symbol.iterator in value && typeof (value as { toArray?: unknown }).toArray === 'function')
    return Array.from(value as Iterable<unknown>, plainValue);
  if (typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    const json = (value as { toJSON(): Record<string, unknown> }).toJSON();
    return Object.fromEntries(Object.entries(json).map(([k, v]) => [k, plainValue(v)]));
  }
  return value;
}

/** A table's values in plain form, column by column: compute once to check many tables against it. */
export class PlainTable {
  readonly columns: unknown[][];

  constructor(readonly table: Table) {
    this.columns = table.schema.fields.map((_, c) => Array.from(table.getChildAt(c)!, plainValue));
  }
}

/** null if the tables hold the same schema and values, else what first differs. */
export function tableDifference(expected: Table | PlainTable, actual: Table): string | null {
  const plain = expected instanceof PlainTable ? expected : new PlainTable(expected);
  const ef = plain.table.schema.fields;
  const af = actual.schema.fields;
  if (ef.length !== af.length) return `${af.length} columns, expected ${ef.length}`;
  for (let c = 0; c < ef.length; c++) {
    const [e, a] = [ef[c]!, af[c]!];
    if (e.name !== a.name || String(e.type) !== String(a.type) || e.nullable !== a.nullable)
      return `column ${c}: ${a.name}: ${a.type}${a.nullable ? '?' : ''}, expected ${e.name}: ${e.type}${e.nullable ? '?' : ''}`;
  }
  if (plain.table.numRows !== actual.numRows) return `${actual.numRows} rows, expected ${plain.table.numRows}`;
  for (let c = 0; c < ef.length; c++) {
    const ev = plain.columns[c]!;
    const av = Array.from(actual.getChildAt(c)!, plainValue);
    if (isDeepStrictEqual(ev, av)) continue;
    const r = ev.findIndex((x, i) => !isDeepStrictEqual(x, av[i]));
    return `column '${ef[c]!.name}' row ${r}: ${JSON.stringify(av[r])}, expected ${JSON.stringify(ev[r])}`;
  }
  return null;
}
