/**
 * Frame body decoder. The caller passes bytes already copied out of shared
 * memory; every count, range, format and buffer size is checked in the same
 * order as gpr_body_validate in C, so a damaged body gets the same error code
 * (FRAME_INVALID for structure, FRAME_BOUNDS for an offset or length outside
 * its container) in every language.
 */
import { isUtf8 } from 'node:buffer';
import { GpuringError } from '../errors.js';
import type { BufferDescriptor, ColumnDescriptor, FrameDescription } from './description.js';
import { parseFormat, type FormatInfo } from './format.js';
import { BODY_MAGIC, BODY_VERSION, bodySize, Buffer_, BUFFER_BYTES, Header, HANDLE_BYTES, HEADER_BYTES, MAX_BUFFERS, MAX_COUNT, MAX_DEPTH, MAX_NODES, MEMORY_KINDS, Node, NODE_BYTES, NodeFlags } from './layout.js';
import { decodeMetadata } from './metadata.js';
import { utf8Decoder } from './utf8.js';

interface RawNode {
  nameOffset: number;
  nameLength: number;
  formatOffset: number;
  formatLength: number;
  metadataOffset: number;
  metadataLength: number;
  childCount: number;
  flags: number;
  dictionary: number;
  bufferCount: number;
  length: bigint;
  nullCount: bigint;
  offset: bigint;
}

interface RawBuffer {
  kind: number;
  deviceOrdinal: number;
  offset: bigint;
  length: bigint;
  at: number;
}

const MAX = BigInt(MAX_COUNT);

function invalid(what: string): GpuringError {
  return new GpuringError('FRAME_INVALID', `frame body: ${what}`);
}
function bounds(what: string): GpuringError {
  return new GpuringError('FRAME_BOUNDS', `frame body: ${what}`);
}
function inRange(offset: number, length: number, limit: number): boolean {
  return offset <= limit && length <= limit - offset;
}
function bitsToBytes(end: bigint, bits: bigint): bigint {
  return (end * bits + 7n) / 8n;
}

class BodyValidator {
  readonly view: DataView;
  readonly nodeCount: number;
  readonly bufferCount: number;
  readonly rootCount: number;
  readonly dictionaryCount: number;
  readonly stringsLength: number;
  readonly rowCount: bigint;
  readonly stringsAt: number;
  readonly nodes: RawNode[] = [];
  readonly buffers: RawBuffer[] = [];
  readonly isRoot: Uint8Array;
  readonly formats: FormatInfo[] = [];

  constructor(readonly bytes: Uint8Array) {
    if (bytes.length < HEADER_BYTES) throw invalid('shorter than its header');
    const v = (this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength));
    if (v.getUint32(Header.magic, true) !== BODY_MAGIC || v.getUint16(Header.version, true) !== BODY_VERSION) throw invalid('bad magic or version');
    this.nodeCount = v.getUint32(Header.nodeCount, true);
    this.bufferCount = v.getUint32(Header.bufferCount, true);
    this.rootCount = v.getUint32(Header.rootCount, true);
    this.dictionaryCount = v.getUint32(Header.dictionaryCount, true);
    this.stringsLength = v.getUint32(Header.stringsLength, true);
    if (
      v.getUint32(Header.bodyLength, true) !== bytes.length ||
      this.nodeCount > MAX_NODES ||
      this.bufferCount > MAX_BUFFERS ||
      v.getUint16(Header.syncKind, true) > 2 ||
      bodySize(this.nodeCount, this.bufferCount, this.stringsLength) !== bytes.length
    )
      throw invalid('counts do not add up to its length');
    this.rowCount = v.getBigUint64(Header.rowCount, true);
    if (this.rowCount > MAX) throw bounds('row count out of range');
    if (this.rootCount + this.dictionaryCount > this.nodeCount) throw invalid('more trees than nodes');
    this.stringsAt = HEADER_BYTES + this.nodeCount * NODE_BYTES + this.bufferCount * BUFFER_BYTES;
    if (!inRange(v.getUint32(Header.metadataOffset, true), v.getUint32(Header.metadataLength, true), this.stringsLength)) throw bounds('metadata outside the string table');
    if (decodeMetadata(this.stringBytes(v.getUint32(Header.metadataOffset, true), v.getUint32(Header.metadataLength, true))) === undefined) throw invalid('malformed schema metadata');
    this.isRoot = new Uint8Array(this.nodeCount);
    this.readRaw();
  }

  stringBytes(offset: number, length: number): Uint8Array {
    return this.bytes.subarray(this.stringsAt + offset, this.stringsAt + offset + length);
  }

  private readRaw(): void {
    const v = this.view;
    for (let i = 0; i < this.nodeCount; i++) {
      const b = HEADER_BYTES + i * NODE_BYTES;
      this.nodes.push({
        nameOffset: v.getUint32(b + Node.nameOffset, true),
        nameLength: v.getUint32(b + Node.nameLength, true),
        formatOffset: v.getUint32(b + Node.formatOffset, true),
        formatLength: v.getUint32(b + Node.formatLength, true),
        metadataOffset: v.getUint32(b + Node.metadataOffset, true),
        metadataLength: v.getUint32(b + Node.metadataLength, true),
        childCount: v.getUint32(b + Node.childCount, true),
        flags: v.getUint32(b + Node.flags, true),
        dictionary: v.getInt32(b + Node.dictionary, true),
        bufferCount: v.getUint32(b + Node.bufferCount, true),
        length: v.getBigUint64(b + Node.length, true),
        nullCount: v.getBigInt64(b + Node.nullCount, true),
        offset: v.getBigUint64(b + Node.offset, true),
      });
    }
    const first = HEADER_BYTES + this.nodeCount * NODE_BYTES;
    for (let i = 0; i < this.bufferCount; i++) {
      const at = first + i * BUFFER_BYTES;
      this.buffers.push({
        kind: v.getUint16(at + Buffer_.kind, true),
        deviceOrdinal: v.getInt32(at + Buffer_.deviceOrdinal, true),
        offset: v.getBigUint64(at + Buffer_.offset, true),
        length: v.getBigUint64(at + Buffer_.length, true),
        at,
      });
    }
  }

  /** Every tree complete, at most MAX_DEPTH deep, root_count + dictionary_count of them. */
  checkTrees(): void {
    const stack: number[] = [];
    let trees = 0;
    this.nodes.forEach((n, i) => {
      if (stack.length === 0) this.isRoot[i] = ++trees <= this.rootCount ? 1 : 2;
      if (n.childCount > this.nodeCount - i - 1) throw invalid(`node ${i}: more children than nodes`);
      if (n.childCount && stack.length === MAX_DEPTH) throw invalid(`node ${i}: nested deeper than 64 levels`);
      if (n.childCount) stack.push(n.childCount);
      else while (stack.length && --stack[stack.length - 1]! === 0) stack.pop();
    });
    if (stack.length !== 0 || trees !== this.rootCount + this.dictionaryCount) throw invalid('node trees do not match the counts');
  }

  checkNode(i: number, nextBuffer: number): number {
    const n = this.nodes[i]!;
    const lim = this.stringsLength;
    if (!inRange(n.nameOffset, n.nameLength, lim) || !inRange(n.formatOffset, n.formatLength, lim) || !inRange(n.metadataOffset, n.metadataLength, lim))
      throw bounds(`node ${i}: string outside the string table`);
    if (decodeMetadata(this.stringBytes(n.metadataOffset, n.metadataLength)) === undefined) throw invalid(`node ${i}: malformed metadata`);
    if (!isUtf8(this.stringBytes(n.nameOffset, n.nameLength))) throw invalid(`node ${i}: name is not UTF-8`);
    const formatBytes = this.stringBytes(n.formatOffset, n.formatLength);
    // UTF-8 without NUL, as in C: a time zone is free text that the C Arrow export passes on NUL-terminated.
    const format = isUtf8(formatBytes) && !formatBytes.includes(0) ? parseFormat(utf8Decoder.decode(formatBytes)) : null;
    if (!format || n.formatLength === 0) throw invalid(`node ${i}: unsupported or malformed format string`);
    this.formats[i] = format;
    if (n.flags & ~7) throw invalid(`node ${i}: unknown flags`);
    if (n.bufferCount !== format.buffers) throw invalid(`node ${i}: wrong number of buffers for its type`);
    if (n.dictionary !== -1 && (n.dictionary <= i || n.dictionary >= this.nodeCount || this.isRoot[n.dictionary] !== 2 || !format.isInteger))
      throw invalid(`node ${i}: bad dictionary reference`);
    if (n.nullCount < -1n || (n.nullCount > 0n && n.nullCount > n.length)) throw bounds(`node ${i}: null count out of range`);
    if (n.length > MAX || n.offset > MAX - n.length) throw bounds(`node ${i}: length or offset out of range`);
    if (this.isRoot[i] === 1 && n.length !== this.rowCount) throw bounds(`node ${i}: column length differs from row count`);
    if (format.buffers > this.bufferCount - nextBuffer) throw invalid(`node ${i}: more buffers than the header says`);
    this.checkBuffers(i, nextBuffer, format);
    this.checkChildren(i, format);
    return nextBuffer + format.buffers;
  }

  private checkBuffers(i: number, first: number, f: FormatInfo): void {
    const n = this.nodes[i]!;
    const end = n.offset + n.length;
    for (let b = 0; b < f.buffers; b++) {
      const buf = this.buffers[first + b]!;
      if (buf.kind > 4) throw invalid(`node ${i}: unknown memory kind`);
      if (buf.deviceOrdinal < -1) throw invalid(`node ${i}: device ordinal below -1`);
      if (buf.kind === 0) {
        if (buf.length !== 0n) throw invalid(`node ${i}: absent buffer has a length`);
        if (b === 0 ? n.nullCount > 0n : end > 0n) throw invalid(`node ${i}: a required buffer is absent`);
        if (buf.offset > MAX) throw bounds(`node ${i}: absent buffer offset out of range`);
        continue;
      }
      if (buf.length > MAX || buf.offset > MAX - buf.length) throw bounds(`node ${i}: buffer offset + length out of range`);
      if (buf.kind === 1 && !this.bytes.subarray(buf.at + Buffer_.handle, buf.at + Buffer_.handle + HANDLE_BYTES).includes(0))
        throw invalid(`node ${i}: host handle is not NUL-terminated`);
      if (buf.kind === 3 && new DataView(this.bytes.buffer, this.bytes.byteOffset).getBigUint64(buf.at + Buffer_.poolId, true) === 0n)
        throw invalid(`node ${i}: cuda-pool buffer without a pool id`);
      if (buf.kind === 4 && new DataView(this.bytes.buffer, this.bytes.byteOffset).getBigUint64(buf.at + Buffer_.allocId, true) === 0n)
        throw invalid(`node ${i}: cuda-vmm buffer without a span id`);
      let need = 0n;
      if (b === 0) need = bitsToBytes(end, 1n);
      else if (f.layout === 'fixed' || f.layout === 'bool') need = bitsToBytes(end, BigInt(f.bitWidth));
      else if (b === 1 && (f.layout === 'varbin' || f.layout === 'list')) need = end ? (end + 1n) * BigInt(f.offsetBytes) : 0n;
      if (buf.length < need) throw bounds(`node ${i}: buffer too small for offset + length`);
    }
  }

  private checkChildren(i: number, f: FormatInfo): void {
    const n = this.nodes[i]!;
    const end = n.offset + n.length;
    if (f.children >= 0 && n.childCount !== f.children) throw invalid(`node ${i}: wrong number of children for its type`);
    if (f.layout === 'fixed-list' && end > MAX / BigInt(f.listSize)) throw bounds(`node ${i}: fixed-size list too long`);
    const need = f.layout === 'struct' ? end : f.layout === 'fixed-list' ? end * BigInt(f.listSize) : 0n;
    let c = i + 1;
    for (let k = 0; k < n.childCount; k++) {
      if (this.nodes[c]!.length < need) throw bounds(`node ${i}: child shorter than its parent needs`);
      let pending = 1;
      while (pending) pending += this.nodes[c++]!.childCount - 1;
    }
  }
}

function describeBuffer(bytes: Uint8Array, raw: RawBuffer): BufferDescriptor {
  const kind = MEMORY_KINDS[raw.kind]!;
  const pool = kind === 'cuda-pool' ? { poolId: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(raw.at + Buffer_.poolId, true) } : {};
  return {
    kind,
    ...pool,
    deviceOrdinal: raw.deviceOrdinal,
    deviceUuid: bytes.slice(raw.at + Buffer_.deviceUuid, raw.at + Buffer_.deviceUuid + 16),
    offset: Number(raw.offset),
    length: Number(raw.length),
    allocationId: new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength).getBigUint64(raw.at + Buffer_.allocId, true),
    handle: bytes.slice(raw.at + Buffer_.handle, raw.at + Buffer_.handle + HANDLE_BYTES),
  };
}

/** Builds the description of a validated body (recursion depth is bounded by MAX_DEPTH). */
function describe(v: BodyValidator): FrameDescription {
  const dec = utf8Decoder;
  const dictionaryIndex = new Map<number, number>();
  v.isRoot.forEach((r, i) => r === 2 && dictionaryIndex.set(i, dictionaryIndex.size));
  let nextNode = 0;
  let nextBuffer = 0;
  const build = (): ColumnDescriptor => {
    const i = nextNode++;
    const n = v.nodes[i]!;
    const buffers = v.buffers.slice(nextBuffer, nextBuffer + n.bufferCount).map((b) => describeBuffer(v.bytes, b));
    nextBuffer += n.bufferCount;
    const children: ColumnDescriptor[] = [];
    for (let k = 0; k < n.childCount; k++) children.push(build());
    return {
      name: dec.decode(v.stringBytes(n.nameOffset, n.nameLength)),
      format: dec.decode(v.stringBytes(n.formatOffset, n.formatLength)),
      nullable: (n.flags & NodeFlags.nullable) !== 0,
      dictionaryOrdered: (n.flags & NodeFlags.dictionaryOrdered) !== 0,
      mapKeysSorted: (n.flags & NodeFlags.mapKeysSorted) !== 0,
      metadata: decodeMetadata(v.stringBytes(n.metadataOffset, n.metadataLength)) ?? null,
      dictionary: n.dictionary < 0 ? -1 : dictionaryIndex.get(n.dictionary)!,
      length: Number(n.length),
      nullCount: Number(n.nullCount),
      offset: Number(n.offset),
      buffers,
      children,
    };
  };
  const columns: ColumnDescriptor[] = [];
  for (let r = 0; r < v.rootCount; r++) columns.push(build());
  const dictionaries: ColumnDescriptor[] = [];
  for (let r = 0; r < v.dictionaryCount; r++) dictionaries.push(build());
  const h = v.view;
  return {
    rowCount: Number(v.rowCount),
    metadata: decodeMetadata(v.stringBytes(h.getUint32(Header.metadataOffset, true), h.getUint32(Header.metadataLength, true))) ?? null,
    columns,
    dictionaries,
    syncKind: h.getUint16(Header.syncKind, true),
    syncHandle: v.bytes.slice(Header.syncHandle, Header.syncHandle + HANDLE_BYTES),
  };
}

/**
 * The description of a body that gpr_body_validate (the native consumer) has
 * already accepted: only the tree structure is re-read, nothing re-checked.
 * Never call it on bytes that were not validated.
 */
export function decodeValidatedFrame(bytes: Uint8Array): FrameDescription {
  const v = new BodyValidator(bytes);
  v.checkTrees();
  return describe(v);
}

/**
 * Validates a frame body and returns its description. `bytes` must be a private
 * copy: shared memory could change between a check and a use.
 */
export function decodeFrame(bytes: Uint8Array): FrameDescription {
  if (!(bytes instanceof Uint8Array)) throw new GpuringError('INVALID_ARGUMENT', 'decodeFrame() takes the body as a Uint8Array');
  const v = new BodyValidator(bytes);
  v.checkTrees();
  let nextBuffer = 0;
  for (let i = 0; i < v.nodeCount; i++) nextBuffer = v.checkNode(i, nextBuffer);
  if (nextBuffer !== v.bufferCount) throw invalid('fewer buffers used than declared');
  return describe(v);
}
