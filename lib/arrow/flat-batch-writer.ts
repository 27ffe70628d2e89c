/**
 * publish(table) without describing, for flat schemas. A flat schema has only
 * columns without children or a dictionary whose buffers are validity and
 * fixed-width values, bits (bool), or offsets and bytes (utf8, binary and
 * their large forms). For such a stream the body's strings, names, formats,
 * flags and buffer counts are the same in every frame: the writer encodes one
 * body per Schema and then, per batch, gathers the buffers describeBatch()
 * would place (the same views, in wire order), and writes into a copy of that
 * body only the row count, each node's length and null count, and each buffer
 * descriptor. The bytes equal describeBatch() + encodeFrame() with the buffers
 * copied one after another at 64-byte alignment, as the producer's describing
 * path places them (test/flat-batch-writer.test.ts).
 *
 * One writer per Schema; not re-entrant (gather() and body() share its arrays and
 * body() its output),
 * which a producer's synchronous publish path never is.
 */
import { type Data, type RecordBatch, Type } from 'apache-arrow';
import { absentBuffer } from '../codec/description.js';
import { encodeFrame } from '../codec/encode.js';
import { align64, Buffer_, BUFFER_BYTES, Header, HANDLE_BYTES, HEADER_BYTES, Node, NODE_BYTES } from '../codec/layout.js';
import { sliceBits } from './bits.js';
import type { ByteSink } from './byte-sink.js';
import { describeBatch, layoutOf } from './table-writer.js';

export type ColumnPlan = { layout: 'fixed'; bits: number } | { layout: 'bool' } | { layout: 'varbin'; offsetBytes: number };

const ABSENT = absentBuffer();
const NO_HANDLE = new Uint8Array(HANDLE_BYTES);
/** A column of rows whose array apache-arrow left out: a present buffer of 0 bytes, as describeBatch() places it. */
const EMPTY = new Uint8Array(0);

function planOf(type: Data['type']): ColumnPlan | null {
  if (type.typeId === Type.Dictionary) return null;
  const { f } = layoutOf(type);
  if (f.layout === 'fixed') return { layout: 'fixed', bits: f.bitWidth };
  if (f.layout === 'bool') return { layout: 'bool' };
  if (f.layout === 'varbin') return { layout: 'varbin', offsetBytes: f.offsetBytes };
  return null;
}

/** Buffers per column of each layout: validity and values, and offsets before the bytes of var-size ones. */
const buffersOf = (plan: ColumnPlan) => (plan.layout === 'varbin' ? 3 : 2);

export class FlatBatchWriter {
  readonly #plans: ColumnPlan[];
  /** The body of every frame: the schema's encoding, whose counts and buffer descriptors body() rewrites. */
  readonly #out: Uint8Array;
  /** #out as little-endian words (gpuring runs on little-endian machines only: gpuring.h): its u64 fields are 8-aligned. */
  readonly #words: Uint32Array;
  readonly #view: DataView;
  readonly #buffersAt: number;
  /** The handle each buffer descriptor of #out holds now (the same object per arena), so that body() writes a handle only when it changes. */
  readonly #handles: Uint8Array[] = [];
  /**
   * This batch, from gather() or place(): its buffers in wire order (null:
   * absent; gather() only), each one's place from the allocation's start and
   * its bytes (-1: absent), and each node's length and null count. A schema's
   * batches have as many of each, so the arrays are made once.
   */
  readonly #parts: (ArrayBufferView | null)[];
  readonly #at: Float64Array;
  readonly #sizes: Float64Array;
  readonly #lengths: Float64Array;
  readonly #nulls: Float64Array;
  #rows = 0;

  private constructor(plans: ColumnPlan[], template: Uint8Array) {
    this.#plans = plans;
    this.#out = template;
    this.#words = new Uint32Array(template.buffer, template.byteOffset, template.byteLength >>> 2);
    this.#view = new DataView(template.buffer, template.byteOffset, template.byteLength);
    this.#buffersAt = HEADER_BYTES + plans.length * NODE_BYTES;
    const buffers = plans.reduce((n, plan) => n + buffersOf(plan), 0);
    this.#parts = new Array<ArrayBufferView | null>(buffers).fill(null);
    this.#at = new Float64Array(buffers);
    this.#sizes = new Float64Array(buffers);
    this.#lengths = new Float64Array(plans.length);
    this.#nulls = new Float64Array(plans.length);
  }

  /** A writer for batches of `batch`'s Schema, or null if that schema is not flat. */
  static of(batch: RecordBatch): FlatBatchWriter | null {
    const plans: ColumnPlan[] = [];
    for (const field of batch.schema.fields) {
      const plan = planOf(field.type);
      if (!plan) return null;
      plans.push(plan);
    }
    // Where buffers go is written per frame; the template only fixes the rest.
    return new FlatBatchWriter(plans, encodeFrame(describeBatch(batch, { place: () => ABSENT })));
  }

  /**
   * Gathers `batch`'s buffers (the columns' arrays, or re-based bit slices)
   * in wire order; returns the bytes they take, each at a 64-byte boundary.
   * Then copyTo() copies them and body() writes the frame.
   */
  gather(batch: RecordBatch): number {
    this.#rows = batch.numRows;
    const columns = batch.data.children;
    let total = 0;
    for (let i = 0, b = 0; i < this.#plans.length; i++) {
      const data = columns[i]! as Data;
      const plan = this.#plans[i]!;
      const n = data.length;
      const validity = data.nullCount === 0 || !data.nullBitmap || data.nullBitmap.length === 0 ? null : sliceBits(data.nullBitmap, data.offset, n);
      total = this.#add(b++, validity, validity?.length ?? 0, total);
      this.#lengths[i] = n;
      this.#nulls[i] = validity ? data.nullCount : 0;
      if (plan.layout === 'fixed') total = this.#add(b++, n > 0 ? (data.values ?? EMPTY) : null, (n * plan.bits) / 8, total);
      else if (plan.layout === 'bool') total = this.#add(b++, n > 0 ? sliceBits(data.values as Uint8Array, data.offset, n) : null, Math.ceil(n / 8), total);
      else {
        const end = n ? Number((data.valueOffsets as Int32Array | BigInt64Array)[n]!) : 0;
        total = this.#add(b++, n > 0 ? (data.valueOffsets ?? EMPTY) : null, (n + 1) * plan.offsetBytes, total);
        total = this.#add(b++, n > 0 ? (data.values ?? EMPTY) : null, end, total);
      }
    }
    return total;
  }

  /**
   * Buffer `b` of the batch is the first `bytes` bytes of `part` (all of it
   * when shorter), placed at `total` if present; returns the bytes taken so
   * far. The part is the column's own array, no view of it: copyTo() copies
   * it without one.
   */
  #add(b: number, part: ArrayBufferView | null, bytes: number, total: number): number {
    const size = part ? Math.min(part.byteLength, bytes) : -1;
    this.#parts[b] = part;
    this.#at[b] = total;
    this.#sizes[b] = size;
    return part ? total + align64(size) : total;
  }

  /** Each column's layout, in schema order (what a FrameLoan lays out). */
  get plans(): readonly ColumnPlan[] {
    return this.#plans;
  }

  /**
   * Instead of gather(), for buffers already in place (a FrameLoan): `rows`
   * rows, each column's null count, and each buffer in wire order as its
   * place from the allocation's start and its bytes, or null when absent.
   */
  place(rows: number, nulls: readonly number[], buffers: readonly ({ at: number; length: number } | null)[]): void {
    this.#rows = rows;
    nulls.forEach((n, i) => ((this.#lengths[i] = rows), (this.#nulls[i] = n)));
    buffers.forEach((b, i) => ((this.#parts[i] = null), (this.#at[i] = b ? b.at : 0), (this.#sizes[i] = b ? b.length : -1)));
  }

  /** The arrays gather() found each buffer in, in wire order; null for an absent one (the buffer is a prefix of the array). */
  get parts(): readonly (ArrayBufferView | null)[] {
    return this.#parts;
  }

  /** Copies the gathered buffers to `sink`, each at its place from byte `base` (what body() says). */
  copyTo(sink: ByteSink, base: number): void {
    for (let b = 0; b < this.#parts.length; b++) {
      const part = this.#parts[b];
      if (part) sink.copy(part, this.#sizes[b]!, base + this.#at[b]!);
    }
  }

  /**
   * The body of the gathered (or placed) batch, its buffers placed from byte
   * `base` of the arena whose shm name `handle` holds (a batch without
   * buffers needs none); gathered buffers lie one after another, each at a
   * 64-byte boundary. The writer's own buffer, rewritten by the next call:
   * the producer's publish copies it before that.
   */
  body(base: number, handle: Uint8Array = NO_HANDLE): Uint8Array {
    const out = this.#out;
    const words = this.#words;
    setWords(words, Header.rowCount, this.#rows);
    for (let i = 0, node = HEADER_BYTES; i < this.#nulls.length; i++, node += NODE_BYTES) {
      setWords(words, node + Node.length, this.#lengths[i]!);
      setWords(words, node + Node.nullCount, this.#nulls[i]!);
    }
    let at = this.#buffersAt;
    for (let i = 0; i < this.#sizes.length; i++, at += BUFFER_BYTES) {
      const size = this.#sizes[i]!;
      this.#view.setUint16(at + Buffer_.kind, size >= 0 ? 1 : 0, true);
      setWords(words, at + Buffer_.offset, size >= 0 ? base + this.#at[i]! : 0);
      setWords(words, at + Buffer_.length, Math.max(size, 0));
      const named = size >= 0 ? handle : NO_HANDLE;
      if (this.#handles[i] !== named) (out.set(named, at + Buffer_.handle), (this.#handles[i] = named));
    }
    return out;
  }
}

/** Writes a count (0 to 2^53) as the u64 at byte `at` (8-aligned) of little-endian `words`: setU64 without DataView calls. */
function setWords(words: Uint32Array, at: number, n: number): void {
  words[at >>> 2] = n >>> 0;
  words[(at >>> 2) + 1] = Math.floor(n / 0x100000000);
}
