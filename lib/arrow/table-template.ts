/**
 * TableTemplate: Tables of one record batch with a fixed schema, assembled
 * per frame without apache-arrow's Table and RecordBatch constructors.
 *
 * Why: those constructors re-derive what a stream's frames share. RecordBatch
 * builds a new Schema (metadata maps merged, fields cloned) and Table compares
 * it field by field with the batch's, about 7 µs of a small frame's 9 µs
 * toTable() on the dev machine, against 1 µs for the columns' Data. A
 * consumer that knows the schema (FrameLayout) and has checked what those
 * constructors check (every column as long as the batch, as the frame
 * validator guarantees) only needs the objects they would have made.
 *
 * The objects are the constructors' own shape: the template builds one Table
 * through them when it is made and assembles later ones only if that Table has
 * the own properties this file sets (apache-arrow 21's), else it keeps calling
 * the constructors. Either way the Table is the same (test/table-template.test.ts).
 */
import { type Data, makeData, RecordBatch, type Schema, Struct, Table } from 'apache-arrow';
import { dataOver } from './table-reader.js';

const TABLE_KEYS = 'schema,batches,_offsets';
const BATCH_KEYS = 'schema,data,_metadata';
const NO_NULLS = new Uint8Array(0);

/**
 * A RecordBatch and a Table as assembled below, each made by one constructor
 * call that sets the constructor's own properties in its order: where
 * Object.assign(Object.create(proto), {...}) made each twice (the object,
 * then the literal copied into it).
 */
function BatchShell(this: Record<string, unknown>, schema: Schema, data: Data, metadata: Map<string, string>) {
  this.schema = schema;
  this.data = data;
  this._metadata = metadata;
}
BatchShell.prototype = RecordBatch.prototype;
function TableShell(this: Record<string, unknown>, schema: Schema, batches: RecordBatch[], offsets: number[]) {
  this.schema = schema;
  this.batches = batches;
  this._offsets = offsets;
}
TableShell.prototype = Table.prototype;
const newBatch = BatchShell as unknown as new (schema: Schema, data: Data, metadata: Map<string, string>) => RecordBatch;
const newTable = TableShell as unknown as new (schema: Schema, batches: RecordBatch[], offsets: number[]) => Table;

export class TableTemplate {
  readonly #schema: Schema;
  readonly #struct: Struct;
  /** Whether apache-arrow's objects have the shape assembled here (see file comment). */
  readonly #assemble: boolean;

  constructor(schema: Schema) {
    this.#schema = schema;
    this.#struct = new Struct(schema.fields);
    const probe = new Table([new RecordBatch(schema, undefined)]);
    this.#assemble = Object.keys(probe).join() === TABLE_KEYS && Object.keys(probe.batches[0]!).join() === BATCH_KEYS;
  }

  /** A Table of one batch of `rows` rows; each of `children` (the columns' Data, in schema order) must have `rows` rows. */
  table(rows: number, children: Data[]): Table {
    if (!this.#assemble) return this.#construct(rows, children);
    const data = dataOver(this.#struct, 0, rows, 0, undefined, undefined, NO_NULLS, children);
    // Chunk offsets as a plain array, as apache-arrow's own empty Table has them
    // (its Uint32Array made about 200 B of a sleeping consumer's 3.5 KB of
    // garbage per frame: dev box, sampled heap profile); only indexed and sliced.
    return new newTable(this.#schema, [new newBatch(this.#schema, data, new Map())], [0, rows]);
  }

  /** The same Table through apache-arrow's constructors. */
  #construct(rows: number, children: Data[]): Table {
    return new Table([new RecordBatch(this.#schema, makeData({ type: this.#struct, length: rows, nullCount: 0, children }))]);
  }
}
