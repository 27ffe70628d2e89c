/**
 * Damaged frame bodies for fixtures/corrupt: each one breaks exactly one rule
 * of interop/SPEC.md, so that every decoder must find that rule broken and
 * report the same code. Offsets come from lib/codec/layout.ts.
 */
import { Buffer_, BUFFER_BYTES, Header, HEADER_BYTES, Node, NODE_BYTES } from '../lib/codec/layout.js';

export interface Corruption {
  name: string;
  from: string;
  what: string;
  bytes: Uint8Array;
}

type Edit = (v: DataView, b: Uint8Array) => Uint8Array | void;

const nodeAt = (i: number) => HEADER_BYTES + i * NODE_BYTES;
const bufferAt = (v: DataView, i: number) => HEADER_BYTES + v.getUint32(Header.nodeCount, true) * NODE_BYTES + i * BUFFER_BYTES;
const stringsAt = (v: DataView) => bufferAt(v, v.getUint32(Header.bufferCount, true));
/** Position of the first occurrence of `text` in the body's string table. */
const stringAt = (v: DataView, b: Uint8Array, text: string) => stringsAt(v) + Buffer.from(b.subarray(stringsAt(v))).indexOf(text);

const EDITS: [string, string, string, Edit][] = [
  ['bad-magic', 'all-types', 'first word is not GPRF', (v) => v.setUint32(Header.magic, 0x12345678, true)],
  ['bad-version', 'all-types', 'body version 2', (v) => v.setUint16(Header.version, 2, true)],
  ['truncated', 'all-types', 'last 8 bytes cut off', (_v, b) => b.slice(0, b.length - 8)],
  ['shorter-than-header', 'all-types', 'only 100 bytes', (_v, b) => b.slice(0, 100)],
  ['length-mismatch', 'all-types', 'body_length one more than the bytes', (v) => v.setUint32(Header.bodyLength, v.getUint32(Header.bodyLength, true) + 1, true)],
  ['node-count-huge', 'all-types', 'node_count 2^31', (v) => v.setUint32(Header.nodeCount, 0x80000000, true)],
  ['more-trees-than-nodes', 'slice-odd-bit-offset', 'root_count 2 with one node', (v) => v.setUint32(Header.rootCount, 2, true)],
  ['row-count-too-big', 'slice-odd-bit-offset', 'row count 2^53', (v) => v.setBigUint64(Header.rowCount, 2n ** 53n, true)],
  ['metadata-outside-strings', 'metadata-unicode', 'schema metadata runs past the string table', (v) => v.setUint32(Header.metadataLength, 0xffff, true)],
  ['metadata-malformed', 'metadata-unicode', 'schema metadata count says 1000 pairs', (v) => v.setInt32(stringsAt(v) + v.getUint32(Header.metadataOffset, true), 1000, true)],
  ['name-outside-strings', 'all-types', 'node 0 name offset past the strings', (v) => v.setUint32(nodeAt(0) + Node.nameOffset, 0x7fffffff, true)],
  ['name-not-utf8', 'metadata-unicode', 'node 0 name bytes 0xff 0xfe', (v) => { const at = stringsAt(v) + v.getUint32(nodeAt(0) + Node.nameOffset, true); v.setUint8(at, 0xff); v.setUint8(at + 1, 0xfe); }],
  ['unknown-format', 'slice-odd-bit-offset', "format 'i' becomes 'Q'", (v) => v.setUint8(stringsAt(v) + v.getUint32(nodeAt(0) + Node.formatOffset, true), 0x51)],
  ['unknown-node-flags', 'slice-odd-bit-offset', 'node flags bit 3', (v) => v.setUint32(nodeAt(0) + Node.flags, 8, true)],
  ['wrong-buffer-count', 'slice-odd-bit-offset', 'int32 node claims 3 buffers', (v) => v.setUint32(nodeAt(0) + Node.bufferCount, 3, true)],
  ['null-count-above-length', 'slice-odd-bit-offset', 'null count 6 of 5', (v) => v.setBigInt64(nodeAt(0) + Node.nullCount, 6n, true)],
  ['null-count-below-minus-one', 'slice-odd-bit-offset', 'null count -2', (v) => v.setBigInt64(nodeAt(0) + Node.nullCount, -2n, true)],
  ['column-length-not-row-count', 'slice-odd-bit-offset', 'column length 4 in a 5-row frame', (v) => v.setBigUint64(nodeAt(0) + Node.length, 4n, true)],
  ['offset-overflow', 'slice-odd-bit-offset', 'element offset 2^53 - 2', (v) => v.setBigUint64(nodeAt(0) + Node.offset, 2n ** 53n - 2n, true)],
  ['data-buffer-too-small', 'slice-odd-bit-offset', 'int32 data 31 bytes for 8 elements', (v) => v.setBigUint64(bufferAt(v, 1) + Buffer_.length, 31n, true)],
  ['validity-too-small-for-bit-offset', 'slice-odd-bit-offset', 'validity 0 bytes with nulls', (v) => v.setBigUint64(bufferAt(v, 0) + Buffer_.length, 0n, true)],
  ['offsets-too-small', 'utf8-slice', 'utf8 offsets 28 bytes for 7 elements', (v) => v.setBigUint64(bufferAt(v, 1) + Buffer_.length, 28n, true)],
  ['unknown-memory-kind', 'slice-odd-bit-offset', 'buffer kind 5', (v) => v.setUint16(bufferAt(v, 1) + Buffer_.kind, 5, true)],
  ['device-ordinal-below-minus-one', 'cuda-ipc-tensor-with-event', 'device ordinal -2', (v) => v.setInt32(bufferAt(v, 1) + Buffer_.deviceOrdinal, -2, true)],
  ['absent-buffer-with-length', 'utf8-slice', 'absent validity of length 8', (v) => v.setBigUint64(bufferAt(v, 0) + Buffer_.length, 8n, true)],
  ['absent-buffer-offset-overflow', 'utf8-slice', 'absent validity at offset 2^53', (v) => v.setBigUint64(bufferAt(v, 0) + Buffer_.offset, 2n ** 53n, true)],
  ['time-zone-with-nul', 'all-types', "zone 'Europe/Paris' becomes 'Europe\\0Paris'", (v, b) => { b[stringAt(v, b, 'Europe/Paris') + 6] = 0; }],
  ['time-zone-not-utf8', 'all-types', "zone 'UTC' becomes 'UT\\xff'", (v, b) => { b[stringAt(v, b, 'UTC') + 2] = 0xff; }],
  ['required-buffer-absent', 'slice-odd-bit-offset', 'int32 data buffer absent', (v) => { v.setUint16(bufferAt(v, 1) + Buffer_.kind, 0, true); v.setBigUint64(bufferAt(v, 1) + Buffer_.length, 0n, true); }],
  ['host-handle-not-terminated', 'slice-odd-bit-offset', 'arena name fills all 64 bytes', (v, b) => b.fill(0x41, bufferAt(v, 1) + Buffer_.handle, bufferAt(v, 1) + Buffer_.handle + 64) && undefined],
  ['buffer-range-overflow', 'slice-odd-bit-offset', 'buffer offset 2^53', (v) => v.setBigUint64(bufferAt(v, 1) + Buffer_.offset, 2n ** 53n, true)],
  ['dictionary-points-back', 'dictionary-ordered', 'dictionary reference to node 0 (itself)', (v) => v.setInt32(nodeAt(0) + Node.dictionary, 0, true)],
  ['dictionary-not-a-dictionary-root', 'nested-list-of-struct', 'column names a child node as dictionary', (v) => v.setInt32(nodeAt(0) + Node.dictionary, 2, true)],
  ['children-past-end', 'nested-list-of-struct', 'struct claims 9 children', (v) => v.setUint32(nodeAt(1) + Node.childCount, 9, true)],
  ['wrong-child-count', 'nested-list-of-struct', 'list with 2 children', (v) => { v.setUint32(nodeAt(0) + Node.childCount, 2, true); v.setUint32(nodeAt(1) + Node.childCount, 1, true); }],
  ['child-too-short', 'nested-list-of-struct', 'struct child a has 5 of 6 elements', (v) => v.setBigUint64(nodeAt(2) + Node.length, 5n, true)],
  ['fixed-list-child-too-short', 'cuda-ipc-tensor-with-event', 'tensor values 11 of 12', (v) => v.setBigUint64(nodeAt(1) + Node.length, 11n, true)],
  ['sync-kind-unknown', 'cuda-ipc-tensor-with-event', 'sync kind 3', (v) => v.setUint16(Header.syncKind, 3, true)],
  ['trees-do-not-match', 'dictionary-ordered', 'dictionary_count 0 but a dictionary tree follows', (v) => v.setUint32(Header.dictionaryCount, 0, true)],
];

export function corruptions(bodies: Record<string, Uint8Array>): Corruption[] {
  return EDITS.map(([name, from, what, edit]) => {
    const copy = bodies[from]!.slice();
    const out = edit(new DataView(copy.buffer), copy) ?? copy;
    return { name, from, what, bytes: out };
  });
}
