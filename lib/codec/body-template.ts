/**
 * Schema once, frames as fixed binary descriptors. A BodyTemplate is the
 * encoded body of one description, kept for every later description with the
 * same layout: the same node tree with the same names, formats, metadata,
 * flags, dictionaries and buffer counts. Filling it copies those bytes and
 * writes only what changes from frame to frame (row count, sync, each node's
 * length, null count and offset, each buffer descriptor), with the same checks
 * as encodeFrame(), whose bytes it reproduces exactly. A producer keeps one per
 * stream (per apache-arrow Schema, say) and falls back to a new template when a
 * description does not match: the key only saves work, never decides bytes.
 * One shortcut, taken only when asked for (`holdArrays`), relies on a
 * contract: a buffer's handle and device UUID arrays that are the very objects
 * the template was made from are not copied again, so their owner must never
 * write to them (the producer shares one per arena and never does; a caller's
 * description may, so publishFrame() does not ask).
 */
import type { ColumnDescriptor, FrameDescription } from './description.js';
import { encodeFrame, preorder, writeBuffers, writeFrameHeader, writeNodeCounts, type HeldBytes } from './encode.js';
import { Buffer_, BUFFER_BYTES, HEADER_BYTES, NODE_BYTES } from './layout.js';

/** Memory for a body: `bytes` (exactly its size; fill() writes every byte) and a DataView whose offset 0 is bytes[0]. */
export interface BodyMemory {
  bytes: Uint8Array;
  view: DataView;
}

/** Memory for a body of `size` bytes: a new array by default, a producer's BodyScratch on its hot path. */
export type BodyAllocator = (size: number) => BodyMemory;

function freshBody(size: number): BodyMemory {
  const bytes = new Uint8Array(size);
  return { bytes, view: new DataView(bytes.buffer) };
}

/** What a node of the template fixes: everything but lengths, counts, offsets and buffers. */
interface FixedNode {
  name: string;
  format: string;
  metadata: [string, string][] | null;
  nullable: boolean;
  dictionaryOrdered: boolean;
  mapKeysSorted: boolean;
  dictionary: number;
  childCount: number;
  bufferCount: number;
  path: string;
}

function sameMetadata(a: [string, string][] | null, b: [string, string][] | null): boolean {
  if (a === b) return true;
  if (!a || !b || a.length !== b.length) return false;
  return a.every(([k, v], i) => k === b[i]![0] && v === b[i]![1]);
}

function sameFixed(f: FixedNode, n: ColumnDescriptor): boolean {
  return (
    n.name === f.name && n.format === f.format && n.nullable === f.nullable && n.dictionaryOrdered === f.dictionaryOrdered &&
    n.mapKeysSorted === f.mapKeysSorted && n.dictionary === f.dictionary && n.children?.length === f.childCount &&
    n.buffers?.length === f.bufferCount && sameMetadata(n.metadata, f.metadata)
  );
}

export class BodyTemplate {
  readonly #bytes: Uint8Array;
  readonly #nodes: FixedNode[];
  readonly #roots: number;
  readonly #dictionaries: number;
  readonly #metadata: [string, string][] | null;
  readonly #held: HeldBytes = [];

  private constructor(bytes: Uint8Array, d: FrameDescription, holdArrays: boolean) {
    this.#bytes = bytes;
    const { nodes, paths } = preorder(d);
    this.#nodes = nodes.map((n, i) => ({
      name: n.name, format: n.format, metadata: n.metadata, nullable: n.nullable, dictionaryOrdered: n.dictionaryOrdered,
      mapKeysSorted: n.mapKeysSorted, dictionary: n.dictionary, childCount: n.children.length, bufferCount: n.buffers.length, path: paths[i]!,
    }));
    this.#roots = d.columns.length;
    this.#dictionaries = d.dictionaries.length;
    this.#metadata = d.metadata;
    if (!holdArrays) return;
    let at = HEADER_BYTES + nodes.length * NODE_BYTES;
    for (const b of nodes.flatMap((n) => n.buffers)) {
      this.#held[(at + Buffer_.deviceUuid) >> 3] = b.deviceUuid;
      this.#held[(at + Buffer_.handle) >> 3] = b.handle;
      at += BUFFER_BYTES;
    }
  }

  /** Encodes `d` (all checks of encodeFrame) and keeps its layout; the body returned is the template's own, never to be written. */
  static encode(d: FrameDescription, { holdArrays }: { holdArrays: boolean }): [BodyTemplate, Uint8Array] {
    const body = encodeFrame(d);
    return [new BodyTemplate(body, d, holdArrays), body];
  }

  /**
   * The body of `d` if its layout is this template's (bytes equal to
   * encodeFrame(d)), written into `allocate(size)`, or null if it is not.
   */
  fill(d: FrameDescription, allocate: BodyAllocator = freshBody): Uint8Array | null {
    if (d.columns?.length !== this.#roots || d.dictionaries?.length !== this.#dictionaries || !sameMetadata(d.metadata, this.#metadata)) return null;
    const memory = allocate(this.#bytes.length);
    memory.bytes.set(this.#bytes);
    const at = { node: 0, buffers: HEADER_BYTES + this.#nodes.length * NODE_BYTES };
    for (const n of d.columns) if (!this.#fillNode(n, memory, at)) return null;
    for (const n of d.dictionaries) if (!this.#fillNode(n, memory, at)) return null;
    writeFrameHeader(memory.view, memory.bytes, d);
    return memory.bytes;
  }

  /** Writes node `n` and its descendants (pre-order) at `at`, which it advances; false if they are not the template's. */
  #fillNode(n: ColumnDescriptor, memory: BodyMemory, at: { node: number; buffers: number }): boolean {
    const f = this.#nodes[at.node];
    if (!f || typeof n !== 'object' || n === null || !sameFixed(f, n)) return false;
    writeNodeCounts(memory.view, HEADER_BYTES + at.node * NODE_BYTES, n, f.path);
    at.buffers = writeBuffers(memory.view, memory.bytes, at.buffers, n, f.path, this.#held);
    at.node++;
    for (const child of n.children) if (!this.#fillNode(child, memory, at)) return false;
    return true;
  }
}
