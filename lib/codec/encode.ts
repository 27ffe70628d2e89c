/**
 * Frame body encoder: the canonical bytes of a description. Byte-identical to
 * gpr_body_encode in C: nodes in pre-order (columns, then dictionaries),
 * strings in node order (name, format, metadata) with schema metadata last,
 * every reserved and padding byte zero.
 */
import { GpuringError } from '../errors.js';
import type { ColumnDescriptor, FrameDescription } from './description.js';
import { frameSchema } from './description.js';
import { BODY_MAGIC, BODY_VERSION, bodySize, Buffer_, BUFFER_BYTES, Header, HEADER_BYTES, MAX_BODY_BYTES, MEMORY_KINDS, Node, NODE_BYTES, NodeFlags } from './layout.js';
import { encodeMetadata } from './metadata.js';
import { utf8 } from './utf8.js';

/** Writes an integer of at most 2^53 (or -1) as 64 bits without a BigInt. */
function setU64(view: DataView, at: number, n: number): void {
  view.setUint32(at, n >>> 0, true);
  view.setUint32(at + 4, n < 0 ? 0xffffffff : Math.floor(n / 0x100000000), true);
}

function flatten(columns: ColumnDescriptor[], out: ColumnDescriptor[]): void {
  for (const c of columns) {
    out.push(c);
    flatten(c.children, out);
  }
}

/**
 * Encodes a description. `validate: false` skips the zod check, for
 * descriptions this library built itself from apache-arrow data.
 */
export function encodeFrame(description: FrameDescription, { validate = true } = {}): Uint8Array {
  const parsed = validate ? frameSchema.safeParse(description) : { success: true as const };
  if (!parsed.success) throw new GpuringError('INVALID_ARGUMENT', `invalid frame description: ${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message}`);
  const d = description;
  const nodes: ColumnDescriptor[] = [];
  flatten(d.columns, nodes);
  const dictionaryRoots: number[] = [];
  for (const dict of d.dictionaries) {
    dictionaryRoots.push(nodes.length);
    flatten([dict], nodes);
  }
  const strings: Uint8Array[] = [];
  const nodeStrings = nodes.map((n) => {
    const parts = [utf8(n.name), utf8(n.format), encodeMetadata(n.metadata)];
    strings.push(...parts);
    return parts;
  });
  const schemaMetadata = encodeMetadata(d.metadata);
  strings.push(schemaMetadata);
  const stringsLength = strings.reduce((n, s) => n + s.length, 0);
  const bufferCount = nodes.reduce((n, c) => n + c.buffers.length, 0);
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
  setU64(view, Header.rowCount, d.rowCount);
  view.setUint16(Header.syncKind, d.syncKind, true);
  out.set(d.syncHandle, Header.syncHandle);
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
    const [name, format, meta] = nodeStrings[i]!;
    view.setUint32(base + Node.nameOffset, put(name!), true);
    view.setUint32(base + Node.nameLength, name!.length, true);
    view.setUint32(base + Node.formatOffset, put(format!), true);
    view.setUint32(base + Node.formatLength, format!.length, true);
    view.setUint32(base + Node.metadataOffset, put(meta!), true);
    view.setUint32(base + Node.metadataLength, meta!.length, true);
    view.setUint32(base + Node.childCount, n.children.length, true);
    const flags = (n.nullable ? NodeFlags.nullable : 0) | (n.dictionaryOrdered ? NodeFlags.dictionaryOrdered : 0) | (n.mapKeysSorted ? NodeFlags.mapKeysSorted : 0);
    view.setUint32(base + Node.flags, flags, true);
    view.setInt32(base + Node.dictionary, n.dictionary < 0 ? -1 : (dictionaryRoots[n.dictionary] ?? -1), true);
    view.setUint32(base + Node.bufferCount, n.buffers.length, true);
    setU64(view, base + Node.length, n.length);
    setU64(view, base + Node.nullCount, n.nullCount); // -1 (unknown) as two's complement
    setU64(view, base + Node.offset, n.offset);
    for (const b of n.buffers) {
      view.setUint16(buffersAt + Buffer_.kind, MEMORY_KINDS.indexOf(b.kind), true);
      view.setInt32(buffersAt + Buffer_.deviceOrdinal, b.deviceOrdinal, true);
      out.set(b.deviceUuid, buffersAt + Buffer_.deviceUuid);
      setU64(view, buffersAt + Buffer_.offset, b.offset);
      setU64(view, buffersAt + Buffer_.length, b.length);
      view.setBigUint64(buffersAt + Buffer_.allocId, b.allocationId, true);
      out.set(b.handle, buffersAt + Buffer_.handle);
      buffersAt += BUFFER_BYTES;
    }
  });
  view.setUint32(Header.metadataOffset, put(schemaMetadata), true);
  view.setUint32(Header.metadataLength, schemaMetadata.length, true);
  return out;
}
