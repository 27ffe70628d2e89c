/**
 * publish(table) without describing. For a stream the body's strings, names,
 * formats, flags, buffer counts and tree of nodes are the same in every frame
 * of one Schema: the writer encodes one body per Schema and then, per batch,
 * gathers the buffers describeBatch() would place (the same views, in wire
 * order: each column's tree depth-first, then each dictionary's), and writes
 * into a copy of that body only the row count, each node's length and null
 * count, and each buffer descriptor. The bytes equal describeBatch() +
 * encodeFrame() with the buffers copied one after another at 64-byte
 * alignment, as the producer's describing path places them
 * (test/batch-writer.test.ts). Every schema but one whose dictionary values
 * hold a dictionary has a writer.
 *
 * One writer per Schema; not re-entrant (gather() and body() share its arrays and
 * body() its output),
 * which a producer's synchronous publish path never is.
 */
import { type Data, type DataType, type Dictionary, makeData, type RecordBatch, Type } from 'apache-arrow';
import { absentBuffer } from '../codec/description.js';
import { encodeFrame } from '../codec/encode.js';
import { align64, Buffer_, BUFFER_BYTES, Header, HANDLE_BYTES, HEADER_BYTES, Node, NODE_BYTES } from '../codec/layout.js';
import { sliceBits } from './bits.js';
import type { ByteSink } from './byte-sink.js';
import { describeBatch, layoutOf } from './table-writer.js';
import { childFields } from './types.js';

/** A flat column's buffers after its validity (what a FrameLoan lays out). */
export type ColumnPlan = { layout: 'fixed'; bits: number } | { layout: 'bool' } | { layout: 'varbin'; offsetBytes: number };

/**
 * A node as gather() walks it: a flat column's buffers, dictionary indices
 * (their values' tree comes after the columns), a list's offsets and child,
 * or a fixed-size list's or struct's children (no buffer but validity).
 */
type NodePlan =
  | ColumnPlan
  | { layout: 'dictionary'; bits: number; values: NodePlan }
  | { layout: 'list'; offsetBytes: number; child: NodePlan }
  | { layout: 'parent'; children: NodePlan[] };

const ABSENT = absentBuffer();
const NO_HANDLE = new Uint8Array(HANDLE_BYTES);
/** A column of rows whose array apache-arrow left out: a present buffer of 0 bytes, as describeBatch() places it. */
const EMPTY = new Uint8Array(0);

/** The plan of a node of `type`, or null for dictionary values that hold a dictionary (their indices would interleave). */
function planOf(type: DataType, inDictionary = false): NodePlan | null {
  const { f } = layoutOf(type);
  if (type.typeId === Type.Dictionary) {
    const values = inDictionary ? null : planOf((type as Dictionary).dictionary, true);
    return values && { layout: 'dictionary', bits: f.bitWidth, values };
  }
  if (f.layout === 'fixed') return { layout: 'fixed', bits: f.bitWidth };
  if (f.layout === 'bool') return { layout: 'bool' };
  if (f.layout === 'varbin') return { layout: 'varbin', offsetBytes: f.offsetBytes };
  const children = childFields(type).map((field) => planOf(field.type, inDictionary));
  if (children.some((c) => !c)) return null;
  if (f.layout === 'list') return { layout: 'list', offsetBytes: f.offsetBytes, child: children[0]! };
  return { layout: 'parent', children: children as NodePlan[] };
}

/** Nodes and buffers of `plan`'s tree, its dictionaries' trees left out (they come after the columns). */
function sizeOf(plan: NodePlan): { nodes: number; buffers: number } {
  const own = plan.layout === 'varbin' ? 3 : plan.layout === 'parent' ? 1 : 2;
  const children = plan.layout === 'list' ? [plan.child] : plan.layout === 'parent' ? plan.children : [];
  return children.map(sizeOf).reduce((a, b) => ({ nodes: a.nodes + b.nodes, buffers: a.buffers + b.buffers }), { nodes: 1, buffers: own });
}

const isColumnPlan = (plan: NodePlan): plan is ColumnPlan => plan.layout === 'fixed' || plan.layout === 'bool' || plan.layout === 'varbin';

export class BatchWriter {
  readonly #plans: NodePlan[];
  /** Whether every column is flat (no children, no dictionary): what loan() lays out. */
  readonly flat: boolean;
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
  /**
   * gather()'s place: the next node and buffer descriptor, the bytes so far,
   * where the next dictionary's nodes and buffers go (after the columns'),
   * and whether a dictionary cannot be written.
   */
  #node = 0;
  #buffer = 0;
  #total = 0;
  #dictionaryNode = 0;
  #dictionaryBuffer = 0;
  #manyChunks = false;
  /** The columns' nodes and buffers, dictionaries left out: where the first dictionary's go. */
  readonly #columnNodes: number;
  readonly #columnBuffers: number;

  private constructor(plans: NodePlan[], template: Uint8Array) {
    this.#plans = plans;
    this.flat = plans.every(isColumnPlan);
    this.#out = template;
    this.#words = new Uint32Array(template.buffer, template.byteOffset, template.byteLength >>> 2);
    this.#view = new DataView(template.buffer, template.byteOffset, template.byteLength);
    const nodes = this.#view.getUint32(Header.nodeCount, true);
    const buffers = this.#view.getUint32(Header.bufferCount, true);
    this.#buffersAt = HEADER_BYTES + nodes * NODE_BYTES;
    this.#parts = new Array<ArrayBufferView | null>(buffers).fill(null);
    this.#at = new Float64Array(buffers);
    this.#sizes = new Float64Array(buffers);
    this.#lengths = new Float64Array(nodes);
    this.#nulls = new Float64Array(nodes);
    const sizes = plans.map(sizeOf);
    this.#columnNodes = sizes.reduce((n, size) => n + size.nodes, 0);
    this.#columnBuffers = sizes.reduce((n, size) => n + size.buffers, 0);
  }

  /** A writer for batches of `batch`'s Schema, or null where its dictionary values hold a dictionary. */
  static of(batch: RecordBatch): BatchWriter | null {
    const plans: NodePlan[] = [];
    for (const field of batch.schema.fields) {
      const plan = planOf(field.type);
      if (!plan) return null;
      plans.push(plan);
    }
    // Where buffers go is written per frame; the template only fixes the rest.
    return new BatchWriter(plans, encodeFrame(describeBatch(batch, { place: () => ABSENT })));
  }

  /**
   * Gathers `batch`'s buffers (the columns' arrays, or re-based bit slices)
   * in wire order; returns the bytes they take, each at a 64-byte boundary,
   * or -1 where a dictionary comes in several chunks (the describing path
   * refuses it). Then copyTo() copies them and body() writes the frame.
   */
  gather(batch: RecordBatch): number {
    this.#rows = batch.numRows;
    this.#node = this.#buffer = this.#total = 0;
    this.#dictionaryNode = this.#columnNodes;
    this.#dictionaryBuffer = this.#columnBuffers;
    this.#manyChunks = false;
    const columns = batch.data.children;
    for (let i = 0; i < this.#plans.length; i++) this.#gatherNode(this.#plans[i]!, columns[i]! as Data);
    return this.#manyChunks ? -1 : this.#total;
  }

  /** One node's counts and buffers, then its children's (as describeBatch()'s Writer.column() places them). */
  #gatherNode(plan: NodePlan, data: Data): void {
    const n = data.length;
    const node = this.#node++;
    const validity = data.nullCount === 0 || !data.nullBitmap || data.nullBitmap.length === 0 ? null : sliceBits(data.nullBitmap, data.offset, n);
    this.#add(validity, validity?.length ?? 0);
    this.#lengths[node] = n;
    this.#nulls[node] = validity ? data.nullCount : 0;
    switch (plan.layout) {
      case 'fixed':
        return this.#add(n > 0 ? (data.values ?? EMPTY) : null, (n * plan.bits) / 8);
      case 'bool':
        return this.#add(n > 0 ? sliceBits(data.values as Uint8Array, data.offset, n) : null, Math.ceil(n / 8));
      case 'varbin': {
        const end = n ? Number((data.valueOffsets as Int32Array | BigInt64Array)[n]!) : 0;
        this.#add(n > 0 ? (data.valueOffsets ?? EMPTY) : null, (n + 1) * plan.offsetBytes);
        return this.#add(n > 0 ? (data.values ?? EMPTY) : null, end);
      }
      case 'dictionary': {
        this.#add(n > 0 ? (data.values ?? EMPTY) : null, (n * plan.bits) / 8);
        const chunks = data.dictionary?.data ?? [];
        if (chunks.length > 1) this.#manyChunks = true;
        return this.#gatherDictionary(plan.values, (chunks[0] as Data | undefined) ?? (makeData({ type: (data.type as Dictionary).dictionary } as never) as Data));
      }
      case 'list':
        this.#add(n > 0 ? (data.valueOffsets ?? EMPTY) : null, (n + 1) * plan.offsetBytes);
        return this.#gatherNode(plan.child, data.children[0]! as Data);
      case 'parent':
        for (let k = 0; k < plan.children.length; k++) this.#gatherNode(plan.children[k]!, data.children[k]! as Data);
    }
  }

  /**
   * A dictionary's values, met at its column: their bytes follow the bytes so
   * far, as describeBatch() places them, while their nodes and descriptors go
   * after the columns' (and earlier dictionaries'), as it numbers them.
   */
  #gatherDictionary(plan: NodePlan, values: Data): void {
    const [node, buffer] = [this.#node, this.#buffer];
    [this.#node, this.#buffer] = [this.#dictionaryNode, this.#dictionaryBuffer];
    this.#gatherNode(plan, values);
    [this.#dictionaryNode, this.#dictionaryBuffer] = [this.#node, this.#buffer];
    [this.#node, this.#buffer] = [node, buffer];
  }

  /**
   * The batch's next buffer is the first `bytes` bytes of `part` (all of it
   * when shorter), placed after the bytes so far if present. The part is the
   * column's own array, no view of it: copyTo() copies it without one.
   */
  #add(part: ArrayBufferView | null, bytes: number): void {
    const b = this.#buffer++;
    const size = part ? Math.min(part.byteLength, bytes) : -1;
    this.#parts[b] = part;
    this.#at[b] = this.#total;
    this.#sizes[b] = size;
    if (part) this.#total += align64(size);
  }

  /** Each column's layout, in schema order (what a FrameLoan lays out); only where `flat`. */
  get plans(): readonly ColumnPlan[] {
    if (!this.flat) throw new Error('a BatchWriter of nested columns has no loan layout');
    return this.#plans as ColumnPlan[];
  }

  /**
   * Instead of gather(), for buffers already in place (a FrameLoan of a flat
   * schema, whose nodes are its columns): `rows` rows, each column's null count, and each buffer in wire order as its
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
