/**
 * FrameLayout: what the frames of one stream share, learned from the first
 * and kept by the consumer (FrameLayouts): the apache-arrow Schema, and where
 * each column's counts and buffers lie in the body. A later frame whose layout
 * bytes are the same (node count, names, formats, flags, metadata: everything
 * but lengths, null counts, offsets and buffers) becomes a Table straight from
 * its body, with no FrameDescription decoded and no type built again: the
 * consumer's half of "schema once, frames as fixed binary descriptors".
 *
 * Frames of every type take this path (nested columns and dictionaries too)
 * where every buffer lies in host memory or is absent; device frames build
 * their Table from the description, copying each buffer to the host. Both give
 * the same Table, with the same checks (buffers inside their arena, value
 * offsets, dictionary indices: table-reader.ts).
 */
import type { Data, DataType, Schema, Table } from 'apache-arrow';
import type { ColumnDescriptor, FrameDescription } from '../codec/description.js';
import { parseFormat, type FormatInfo } from '../codec/format.js';
import { Buffer_, BUFFER_BYTES, Header, HEADER_BYTES, HANDLE_BYTES, Node, NODE_BYTES } from '../codec/layout.js';
import { type Arena, arenaBytes } from '../arena-windows.js';
import type { NodeSlice } from '../codec/value-offsets.js';
import { type ByteRange, fixedData, flatData, isFlat, nestedData, type NestedParts, schemaOfFrame } from './table-reader.js';
import { TableTemplate } from './table-template.js';

/** Maps a buffer's handle (64 bytes, the arena's name) to the arena's memory. */
export type ArenaResolver = (handle: Uint8Array) => Arena;

/**
 * Where one node (a column, a child, a dictionary) and its first buffer lie
 * in the body, and the plans of its children and dictionary. Its type is not
 * here: it comes down from the column's, as the description path passes it.
 */
interface NodePlan {
  format: FormatInfo;
  nodeAt: number;
  buffersAt: number;
  /** No children, no dictionary: flatData(); else nestedData() through `parts`. */
  flat: boolean;
  children: NodePlan[];
  /** The plan of its dictionary's root, for a dictionary-encoded node. */
  dictionary: NodePlan | null;
  /** nestedData()'s way to `children` and `dictionary`, for the frame being read (see #view). */
  parts: NestedParts | null;
  /** Filled for each frame (toTable() runs to its end before another starts): this node's slice... */
  node: NodeSlice;
  /** ...and, for a fixed-width node, where its values lie. */
  values: ByteRange;
}

const KIND_ABSENT = 0;
const KIND_HOST = 1;
/** Layout words of the header: node, buffer, root and dictionary counts, string bytes; then the metadata's place. */
const HEADER_WORDS: [number, number][] = [[Header.nodeCount, Header.rowCount], [Header.metadataOffset, Header.syncKind]];
/** Layout words of a node: everything before its length. */
const NODE_WORDS = Node.length;

const noBytes = (): ByteRange => ({ buffer: new ArrayBuffer(0), byteOffset: 0, length: 0 });
const u64 = (v: DataView, at: number) => v.getUint32(at, true) + v.getUint32(at + 4, true) * 2 ** 32;
const i64 = (v: DataView, at: number) => v.getUint32(at, true) + v.getInt32(at + 4, true) * 2 ** 32;

export class FrameLayout {
  /** The body's layout words (see file comment), compared word by word with later bodies... */
  readonly #words: Uint32Array;
  /** ...each read at this byte offset (the last may be a partial word, ending at #end). */
  readonly #at: Uint32Array;
  /** Where the string table, the last layout bytes, ends. */
  readonly #end: number;
  readonly #tables: TableTemplate;
  readonly #columns: NodePlan[];
  /** The columns' types, in order: each column's plan is read as its type. */
  readonly #types: DataType[];
  /** Where the buffer descriptors start, and how many there are. */
  readonly #buffersAt: number;
  readonly #buffers: number;
  /** The body and arenas of the frame being read, for the plans' `parts`; only during table(). */
  #view: DataView | undefined;
  #arena: ArenaResolver | undefined;
  /** The arena of the last host buffer resolved, by its handle: a stream's frames mostly share one. */
  readonly #lastHandle = new Uint32Array(HANDLE_BYTES / 4);
  #lastArena: Arena | undefined;
  /**
   * The words of #lastHandle that hold its arena's name, through its NUL: what
   * follows the NUL is not part of the name (handleName()), so a handle equal
   * in these words names the same arena. A name of 20-odd bytes is 6 words of 16,
   * compared for every buffer of every frame.
   */
  #lastNameWords = 0;
  /** #hostBuffer()'s scratch (see NodePlan). */
  readonly #bytes = noBytes();

  private constructor(body: Uint8Array, schema: Schema, columns: NodePlan[], dictionaries: NodePlan[]) {
    const words: number[] = [];
    const at: number[] = [];
    this.#end = forEachLayoutWord(body, (word, offset) => void (words.push(word), at.push(offset)));
    this.#words = Uint32Array.from(words);
    this.#at = Uint32Array.from(at);
    this.#tables = new TableTemplate(schema);
    this.#columns = columns;
    this.#types = schema.fields.map((f) => f.type);
    const v = new DataView(body.buffer, body.byteOffset, body.byteLength);
    this.#buffersAt = HEADER_BYTES + v.getUint32(Header.nodeCount, true) * NODE_BYTES;
    this.#buffers = v.getUint32(Header.bufferCount, true);
    for (const plan of [...columns, ...dictionaries]) this.#connect(plan);
  }

  /** The layout of a validated body and its description. */
  static of(body: Uint8Array, frame: FrameDescription): FrameLayout {
    // Nodes lie in the body in the description's order: each column's tree
    // depth-first, then each dictionary's; their buffers in the same order.
    let nodeAt = HEADER_BYTES;
    let buffersAt = HEADER_BYTES + new DataView(body.buffer, body.byteOffset, body.byteLength).getUint32(Header.nodeCount, true) * NODE_BYTES;
    const linked: [NodePlan, number][] = [];
    const plan = (c: ColumnDescriptor): NodePlan => {
      const format = parseFormat(c.format)!;
      const p: NodePlan = { format, nodeAt, buffersAt, flat: false, children: [], dictionary: null, parts: null, node: { name: c.name, offset: 0, length: 0 }, values: noBytes() };
      nodeAt += NODE_BYTES;
      buffersAt += c.buffers.length * BUFFER_BYTES;
      p.children = c.children.map(plan);
      p.flat = c.children.length === 0 && c.dictionary < 0 && isFlat(format);
      if (c.dictionary >= 0) linked.push([p, c.dictionary]);
      return p;
    };
    const columns = frame.columns.map(plan);
    const dictionaries = frame.dictionaries.map(plan);
    for (const [p, d] of linked) p.dictionary = dictionaries[d]!;
    return new FrameLayout(body, schemaOfFrame(frame), columns, dictionaries);
  }

  /** Gives a plan that is not flat, and each of its children, their `parts`. */
  #connect(p: NodePlan): void {
    for (const child of p.children) this.#connect(child);
    if (p.flat) return;
    p.parts = {
      child: (k, type) => this.#data(p.children[k]!, type),
      dictionaryLength: () => u64(this.#view!, p.dictionary!.nodeAt + Node.length),
      dictionary: (type) => this.#data(p.dictionary!, type),
    };
  }

  /**
   * Whether the body `v` views (validated) has this layout. The header's words come first
   * and hold the counts that place the rest, so a body that gets past them
   * has its nodes and strings where this layout's are.
   */
  matches(v: DataView): boolean {
    if (v.byteLength < this.#end) return false;
    const words = this.#words;
    const at = this.#at;
    const end = this.#end;
    for (let k = 0; k < at.length; k++) if (wordAt(v, at[k]!, end) !== words[k]) return false;
    return true;
  }

  /** The frame whose body `v` views as a Table, or null when it must be built from its description (device buffers). */
  table(v: DataView, arena: ArenaResolver): Table | null {
    for (let i = 0, at = this.#buffersAt; i < this.#buffers; i++, at += BUFFER_BYTES) {
      const kind = v.getUint16(at + Buffer_.kind, true);
      if (kind !== KIND_HOST && kind !== KIND_ABSENT) return null;
    }
    this.#view = v;
    this.#arena = arena;
    try {
      const children: Data[] = [];
      for (let i = 0; i < this.#columns.length; i++) children.push(this.#data(this.#columns[i]!, this.#types[i]!));
      return this.#tables.table(u64(v, Header.rowCount), children);
    } finally {
      this.#view = this.#arena = undefined;
    }
  }

  /** One node's Data, read as `type`; a fixed-width node's values become one typed array (no byte view first). */
  #data(p: NodePlan, type: DataType): Data {
    const v = this.#view!;
    const node = p.node;
    node.offset = u64(v, p.nodeAt + Node.offset);
    node.length = u64(v, p.nodeAt + Node.length);
    const nullCount = i64(v, p.nodeAt + Node.nullCount);
    const arena = this.#arena!;
    if (p.flat && p.format.layout === 'fixed')
      return fixedData(type, p.format, node, nullCount, this.#hostBuffer(v, p.buffersAt, arena), this.#hostBytes(v, p.buffersAt + BUFFER_BYTES, arena, p.values));
    const buffer = (i: number) => this.#hostBuffer(v, p.buffersAt + i * BUFFER_BYTES, arena);
    return p.flat ? flatData(type, p.format, node, nullCount, buffer) : nestedData(type, p.format, node, nullCount, buffer, p.parts!);
  }

  /** The bytes of the host buffer described at `at` in the body, or undefined if it is absent. */
  #hostBuffer(v: DataView, at: number, arena: ArenaResolver): Uint8Array | undefined {
    const bytes = this.#hostBytes(v, at, arena, this.#bytes);
    return bytes && new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
  }

  /** #hostBuffer() written into `into` (no view made), or undefined if the buffer is absent. */
  #hostBytes(v: DataView, at: number, arena: ArenaResolver, into: ByteRange): ByteRange | undefined {
    if (v.getUint16(at + Buffer_.kind, true) === KIND_ABSENT) return undefined;
    return arenaBytes(this.#arenaOf(v, at + Buffer_.handle, arena), u64(v, at + Buffer_.offset), u64(v, at + Buffer_.length), into);
  }

  /** The arena whose handle is at `at`: the last one when the 64 bytes are the same, else from `arena`. */
  #arenaOf(v: DataView, at: number, arena: ArenaResolver): Arena {
    const last = this.#lastHandle;
    let same = this.#lastArena !== undefined;
    for (let k = 0; same && k < this.#lastNameWords; k++) same = v.getUint32(at + 4 * k, true) === last[k];
    if (same) return this.#lastArena!;
    const handle = new Uint8Array(v.buffer, v.byteOffset + at, HANDLE_BYTES);
    this.#lastArena = arena(handle);
    for (let k = 0; k < last.length; k++) last[k] = v.getUint32(at + 4 * k, true);
    const nul = handle.indexOf(0);
    this.#lastNameWords = nul < 0 ? last.length : (nul >> 2) + 1;
    return this.#lastArena;
  }
}

/** Calls `visit` with each layout word of a validated body and its offset, in order; returns where the strings end. */
function forEachLayoutWord(body: Uint8Array, visit: (word: number, at: number) => void): number {
  const v = new DataView(body.buffer, body.byteOffset, body.byteLength);
  for (const [from, to] of HEADER_WORDS) for (let at = from; at < to; at += 4) visit(v.getUint32(at, true), at);
  const nodes = v.getUint32(Header.nodeCount, true);
  for (let n = 0, base = HEADER_BYTES; n < nodes; n++, base += NODE_BYTES) for (let at = base; at < base + NODE_WORDS; at += 4) visit(v.getUint32(at, true), at);
  const strings = HEADER_BYTES + nodes * NODE_BYTES + v.getUint32(Header.bufferCount, true) * BUFFER_BYTES;
  const end = strings + v.getUint32(Header.stringsLength, true);
  for (let at = strings; at < end; at += 4) visit(wordAt(v, at, end), at);
  return end;
}

/** The word at `at`; within 4 bytes of `end` (the string table's last 1-3 bytes), those bytes alone. */
function wordAt(v: DataView, at: number, end: number): number {
  if (end - at >= 4) return v.getUint32(at, true);
  let word = 0;
  for (let i = 0; at + i < end; i++) word |= v.getUint8(at + i) << (8 * i);
  return word >>> 0;
}

/** What a layout is learned from the first time: the frame's description. */
export interface Described {
  readonly description: FrameDescription;
}

/** The layouts a consumer has met, most recent first; bounded, as producers and streams come and go. */
export class FrameLayouts {
  static readonly MAX = 32;
  readonly #known: FrameLayout[] = [];

  /**
   * A validated body as a Table straight from it when its layout allows, else
   * null (FrameLayout.table); its layout is learned from `frame` the first time.
   * One view of the body serves every comparison and the Table: a frame's
   * toTable() makes no other object to read it.
   */
  table(body: Uint8Array, frame: Described, arena: ArenaResolver): Table | null {
    const v = new DataView(body.buffer, body.byteOffset, body.byteLength);
    return this.#of(v, body, frame).table(v, arena);
  }

  #of(v: DataView, body: Uint8Array, frame: Described): FrameLayout {
    const known = this.#known;
    let i = 0;
    while (i < known.length && !known[i]!.matches(v)) i++;
    if (i === 0 && known.length) return known[0]!;
    const layout = i < known.length ? known.splice(i, 1)[0]! : FrameLayout.of(body, frame.description);
    known.unshift(layout);
    if (known.length > FrameLayouts.MAX) known.pop();
    return layout;
  }
}
