/**
 * Frame body encoder: the canonical bytes of a description. Byte-identical to
 * gpr_body_encode in C: nodes in pre-order (columns, then dictionaries),
 * strings in node order (name, format, metadata) with schema metadata last,
 * every reserved and padding byte zero.
 */
import { GpuringError } from '../errors.js';
import { invalidDescription, type BufferDescriptor, type ColumnDescriptor, type FrameDescription } from './description.js';
import { BODY_MAGIC, BODY_VERSION, bodySize, Buffer_, BUFFER_BYTES, HANDLE_BYTES, Header, HEADER_BYTES, MAX_BODY_BYTES, MAX_COUNT, MAX_DEPTH, MAX_NODES, MEMORY_KINDS, Node, NODE_BYTES, NodeFlags } from './layout.js';
import { encodeMetadata } from './metadata.js';
import { utf8 } from './utf8.js';

/**
 * Where a bad value is: a node's path (`columns[0].children[1]`, or '' for the
 * description itself), a field, and for a buffer's field its index. Built into
 * a string only when refusing: encoding valid frames makes no strings.
 */
function refuse(path: string, field: string, what: string, buffer = -1): never {
  invalidDescription([path, buffer >= 0 ? `buffers[${buffer}]` : '', field].filter(Boolean).join('.'), what);
}

/**
 * The encoder checks every value as it writes it and refuses what the body
 * cannot carry exactly (a fraction, a string for a number, a 10-byte handle),
 * so the bytes always say what the description says. Whether they make a
 * valid frame (formats, buffer counts and sizes) is the C validator's call,
 * which the producer runs on every body before publishing it.
 */
function int(n: unknown, min: number, max: number, path: string, field: string, buffer = -1): number {
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) refuse(path, field, `must be an integer in [${min}, ${max}]`, buffer);
  return n;
}

function bool(b: unknown, path: string, field: string): boolean {
  if (typeof b !== 'boolean') refuse(path, field, 'must be a boolean');
  return b;
}

function bytes(b: unknown, n: number, path: string, field: string, buffer = -1): Uint8Array {
  if (!(b instanceof Uint8Array) || b.length !== n) refuse(path, field, `must be a Uint8Array of ${n} bytes`, buffer);
  return b;
}

function text(s: unknown, path: string, field: string): Uint8Array {
  if (typeof s !== 'string') refuse(path, field, 'must be a string');
  return utf8(s);
}

function list<T>(a: T[], path: string, field: string): T[] {
  if (!Array.isArray(a)) refuse(path, field, 'must be an array');
  return a;
}

function metadata(pairs: [string, string][] | null, path: string): Uint8Array {
  if (pairs !== null && !(Array.isArray(pairs) && pairs.every((p) => Array.isArray(p) && p.length === 2 && typeof p[0] === 'string' && typeof p[1] === 'string')))
    refuse(path, 'metadata', 'must be null or an array of [key, value] string pairs');
  return encodeMetadata(pairs);
}

/** Writes an integer of at most 2^53 (or -1) as 64 bits without a BigInt. */
export function setU64(view: DataView, at: number, n: number): void {
  view.setUint32(at, n >>> 0, true);
  view.setUint32(at + 4, n < 0 ? 0xffffffff : Math.floor(n / 0x100000000), true);
}

function object(o: unknown, path: string, buffer = -1): void {
  if (typeof o !== 'object' || o === null) refuse(path, '', 'must be an object', buffer);
}

/** Lists `c` and its descendants in pre-order, as the body does; `paths` names each for errors. */
function visit(c: ColumnDescriptor, path: string, depth: number, out: ColumnDescriptor[], paths: string[]): void {
  object(c, path);
  if (depth > MAX_DEPTH) refuse(path, '', `nests deeper than ${MAX_DEPTH} levels`);
  if (out.length >= MAX_NODES) refuse(path, '', `is past the limit of ${MAX_NODES} columns in all`);
  out.push(c);
  paths.push(path);
  list(c.children, path, 'children').forEach((child, i) => visit(child, `${path}.children[${i}]`, depth + 1, out, paths));
}

/** A description's nodes in pre-order (columns, then dictionaries), as the body lists them. */
export interface Preorder {
  nodes: ColumnDescriptor[];
  /** Each node's path, for errors: `columns[0].children[1]`. */
  paths: string[];
  /** Node index of each dictionary's root. */
  dictionaryRoots: number[];
}

export function preorder(d: FrameDescription): Preorder {
  const nodes: ColumnDescriptor[] = [];
  const paths: string[] = [];
  if (typeof d !== 'object' || d === null) refuse('description', '', 'must be an object');
  list(d.columns, '', 'columns').forEach((c, i) => visit(c, `columns[${i}]`, 1, nodes, paths));
  const dictionaryRoots: number[] = [];
  list(d.dictionaries, '', 'dictionaries').forEach((dict, i) => {
    dictionaryRoots.push(nodes.length);
    visit(dict, `dictionaries[${i}]`, 1, nodes, paths);
  });
  return { nodes, paths, dictionaryRoots };
}

/** The header fields that change from frame to frame: row count and sync. */
export function writeFrameHeader(view: DataView, out: Uint8Array, d: FrameDescription): void {
  setU64(view, Header.rowCount, int(d.rowCount, 0, MAX_COUNT, '', 'rowCount'));
  view.setUint16(Header.syncKind, int(d.syncKind, 0, 2, '', 'syncKind'), true);
  out.set(bytes(d.syncHandle, HANDLE_BYTES, '', 'syncHandle'), Header.syncHandle);
}

/** A node's fields that change from frame to frame: length, null count, offset. */
export function writeNodeCounts(view: DataView, base: number, n: ColumnDescriptor, path: string): void {
  setU64(view, base + Node.length, int(n.length, 0, MAX_COUNT, path, 'length'));
  setU64(view, base + Node.nullCount, int(n.nullCount, -1, MAX_COUNT, path, 'nullCount')); // -1 (unknown) as two's complement
  setU64(view, base + Node.offset, int(n.offset, 0, MAX_COUNT, path, 'offset'));
}

/**
 * Byte arrays `out` already holds, by position / 8 (BodyTemplate): the same
 * object there again is not copied. Only for arrays nobody writes to.
 */
export type HeldBytes = (Uint8Array | undefined)[];

function putBytes(out: Uint8Array, at: number, b: Uint8Array, held?: HeldBytes): void {
  if (held?.[at >> 3] !== b) out.set(b, at);
}

/** Whether `n` is a bigint in [0, 2^64) (asUintN(64) is compiled inline, comparisons with 2n ** 64n - 1n are not). */
function isU64(n: unknown): n is bigint {
  return typeof n === 'bigint' && BigInt.asUintN(64, n) === n;
}

/** A cuda-pool buffer's pool number (required; the pool_id field is 0 for every other kind). */
function poolIdOf(b: BufferDescriptor, path: string, k: number): bigint {
  if (!isU64(b.poolId) || b.poolId === 0n) refuse(path, 'poolId', 'must be a bigint in [1, 2^64) for a cuda-pool buffer', k);
  return b.poolId;
}

/** Writes node `n`'s buffer descriptors from byte `at`; returns where the next node's begin. */
export function writeBuffers(view: DataView, out: Uint8Array, at: number, n: ColumnDescriptor, path: string, held?: HeldBytes): number {
  const buffers = n.buffers;
  for (let k = 0; k < buffers.length; k++) {
    const b = buffers[k]!;
    object(b, path, k);
    const kind = MEMORY_KINDS.indexOf(b.kind);
    if (kind < 0) refuse(path, 'kind', `must be one of ${MEMORY_KINDS.join(', ')}`, k);
    view.setUint16(at + Buffer_.kind, kind, true);
    view.setInt32(at + Buffer_.deviceOrdinal, int(b.deviceOrdinal, -1, 0x7fffffff, path, 'deviceOrdinal', k), true);
    putBytes(out, at + Buffer_.deviceUuid, bytes(b.deviceUuid, 16, path, 'deviceUuid', k), held);
    setU64(view, at + Buffer_.offset, int(b.offset, 0, MAX_COUNT, path, 'offset', k));
    setU64(view, at + Buffer_.length, int(b.length, 0, MAX_COUNT, path, 'length', k));
    if (!isU64(b.allocationId)) refuse(path, 'allocationId', 'must be a bigint in [0, 2^64)', k);
    view.setBigUint64(at + Buffer_.allocId, b.allocationId, true);
    if (b.kind === 'cuda-pool') view.setBigUint64(at + Buffer_.poolId, poolIdOf(b, path, k), true);
    else setU64(view, at + Buffer_.poolId, 0);
    putBytes(out, at + Buffer_.handle, bytes(b.handle, HANDLE_BYTES, path, 'handle', k), held);
    at += BUFFER_BYTES;
  }
  return at;
}

/** Encodes a description, refusing with INVALID_ARGUMENT (naming the field) any value it cannot write exactly. */
export function encodeFrame(description: FrameDescription): Uint8Array {
  const d = description;
  const { nodes, paths, dictionaryRoots } = preorder(d);
  const strings: Uint8Array[] = [];
  const nodeStrings = nodes.map((n, i) => {
    const format = text(n.format, paths[i]!, 'format');
    if (format.length === 0) refuse(paths[i]!, 'format', 'must not be empty');
    const parts = [text(n.name, paths[i]!, 'name'), format, metadata(n.metadata, paths[i]!)];
    strings.push(...parts);
    return parts;
  });
  const schemaMetadata = metadata(d.metadata, '');
  strings.push(schemaMetadata);
  const stringsLength = strings.reduce((n, s) => n + s.length, 0);
  const bufferCount = nodes.reduce((n, c, i) => n + list(c.buffers, paths[i]!, 'buffers').length, 0);
  const size = bodySize(nodes.length, bufferCount, stringsLength);
  if (size > MAX_BODY_BYTES) throw new GpuringError('INVALID_ARGUMENT', `frame body would be ${size} bytes; the limit is ${MAX_BODY_BYTES}`);
  const out = new Uint8Array(size);
  const view = new DataView(out.buffer);
  view.setUint32(Header.magic, BODY_MAGIC, true);
  view.setUint16(Header.version, BODY_VERSION, true);
  view.setUint32(Header.bodyLength, size, true);
  view.setUint32(Header.nodeCount, nodes.length, true);
  view.setUint32(Header.bufferCount, bufferCount, true);
  view.setUint32(Header.rootCount, d.columns.length, true);
  view.setUint32(Header.dictionaryCount, d.dictionaries.length, true);
  view.setUint32(Header.stringsLength, stringsLength, true);
  writeFrameHeader(view, out, d);
  const stringsAt = HEADER_BYTES + nodes.length * NODE_BYTES + bufferCount * BUFFER_BYTES;
  let at = 0;
  const put = (s: Uint8Array): number => {
    out.set(s, stringsAt + at);
    at += s.length;
    return at - s.length;
  };
  let buffersAt = HEADER_BYTES + nodes.length * NODE_BYTES;
  nodes.forEach((n, i) => {
    const base = HEADER_BYTES + i * NODE_BYTES;
    const path = paths[i]!;
    const [name, format, meta] = nodeStrings[i]!;
    view.setUint32(base + Node.nameOffset, put(name!), true);
    view.setUint32(base + Node.nameLength, name!.length, true);
    view.setUint32(base + Node.formatOffset, put(format!), true);
    view.setUint32(base + Node.formatLength, format!.length, true);
    view.setUint32(base + Node.metadataOffset, put(meta!), true);
    view.setUint32(base + Node.metadataLength, meta!.length, true);
    view.setUint32(base + Node.childCount, n.children.length, true);
    const flags =
      (bool(n.nullable, path, 'nullable') ? NodeFlags.nullable : 0) |
      (bool(n.dictionaryOrdered, path, 'dictionaryOrdered') ? NodeFlags.dictionaryOrdered : 0) |
      (bool(n.mapKeysSorted, path, 'mapKeysSorted') ? NodeFlags.mapKeysSorted : 0);
    view.setUint32(base + Node.flags, flags, true);
    const dictionary = int(n.dictionary, -1, dictionaryRoots.length - 1, path, 'dictionary');
    view.setInt32(base + Node.dictionary, dictionary < 0 ? -1 : dictionaryRoots[dictionary]!, true);
    view.setUint32(base + Node.bufferCount, n.buffers.length, true);
    writeNodeCounts(view, base, n, path);
    buffersAt = writeBuffers(view, out, buffersAt, n, path);
  });
  view.setUint32(Header.metadataOffset, put(schemaMetadata), true);
  view.setUint32(Header.metadataLength, schemaMetadata.length, true);
  return out;
}
