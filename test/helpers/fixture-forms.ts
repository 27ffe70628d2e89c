/**
 * The two text forms of a frame description that fixtures/ stores beside each
 * body (fixtures/README.md defines both):
 * - JSON: the TypeScript description, bytes as hex, allocationId as a decimal string;
 * - flat: one line per frame, node and buffer in wire order, for the C suite.
 */
import { MEMORY_KINDS, NodeFlags } from '../../lib/codec/layout.js';
import { encodeMetadata } from '../../lib/codec/metadata.js';
import type { BufferDescriptor, ColumnDescriptor, FrameDescription } from '../../lib/codec/description.js';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const fromHex = (s: string) => new Uint8Array(Buffer.from(s, 'hex'));

type Json = Record<string, unknown>;

function bufferJson(b: BufferDescriptor): Json {
  const pool = b.kind === 'cuda-pool' ? { poolId: b.poolId!.toString() } : {};
  return { kind: b.kind, deviceOrdinal: b.deviceOrdinal, deviceUuid: hex(b.deviceUuid), offset: b.offset, length: b.length, allocationId: b.allocationId.toString(), handle: hex(b.handle), ...pool };
}

function columnJson(c: ColumnDescriptor): Json {
  return { ...c, buffers: c.buffers.map(bufferJson), children: c.children.map(columnJson) };
}

export function descriptionToJson(d: FrameDescription): Json {
  return { rowCount: d.rowCount, metadata: d.metadata, columns: d.columns.map(columnJson), dictionaries: d.dictionaries.map(columnJson), syncKind: d.syncKind, syncHandle: hex(d.syncHandle) };
}

function bufferFrom(j: Json): BufferDescriptor {
  const pool = j.kind === 'cuda-pool' ? { poolId: BigInt(j.poolId as string) } : {};
  return { ...(j as unknown as BufferDescriptor), deviceUuid: fromHex(j.deviceUuid as string), handle: fromHex(j.handle as string), allocationId: BigInt(j.allocationId as string), ...pool };
}

function columnFrom(j: Json): ColumnDescriptor {
  return { ...(j as unknown as ColumnDescriptor), buffers: (j.buffers as Json[]).map(bufferFrom), children: (j.children as Json[]).map(columnFrom) };
}

export function descriptionFromJson(j: Json): FrameDescription {
  return { ...(j as unknown as FrameDescription), columns: (j.columns as Json[]).map(columnFrom), dictionaries: (j.dictionaries as Json[]).map(columnFrom), syncHandle: fromHex(j.syncHandle as string) };
}

const flatHex = (b: Uint8Array) => (b.length ? hex(b) : '-');
const text = (s: string) => flatHex(new TextEncoder().encode(s));

export function descriptionToFlat(d: FrameDescription): string {
  const lines = [`frame ${d.rowCount} ${d.columns.length} ${d.dictionaries.length} ${d.syncKind} ${hex(d.syncHandle)} ${flatHex(encodeMetadata(d.metadata))}`];
  const nodes: ColumnDescriptor[] = [];
  const flatten = (cs: ColumnDescriptor[]) => cs.forEach((c) => (nodes.push(c), flatten(c.children)));
  flatten(d.columns);
  const dictionaryRoots = d.dictionaries.map((dict) => (nodes.push(dict), flatten(dict.children), nodes.length - 1 - countDescendants(dict)));
  for (const n of nodes) {
    const flags = (n.nullable ? NodeFlags.nullable : 0) | (n.dictionaryOrdered ? NodeFlags.dictionaryOrdered : 0) | (n.mapKeysSorted ? NodeFlags.mapKeysSorted : 0);
    const dictionary = n.dictionary < 0 ? -1 : dictionaryRoots[n.dictionary]!;
    lines.push(`node ${text(n.name)} ${text(n.format)} ${flatHex(encodeMetadata(n.metadata))} ${n.children.length} ${flags} ${dictionary} ${n.buffers.length} ${n.length} ${n.nullCount} ${n.offset}`);
    for (const b of n.buffers) {
      const pool = b.kind === 'cuda-pool' ? ` ${b.poolId}` : '';
      lines.push(`buffer ${MEMORY_KINDS.indexOf(b.kind)} ${b.deviceOrdinal} ${hex(b.deviceUuid)} ${b.offset} ${b.length} ${b.allocationId} ${hex(b.handle)}${pool}`);
    }
  }
  return `${lines.join('\n')}\n`;
}

function countDescendants(c: ColumnDescriptor): number {
  return c.children.reduce((n, k) => n + 1 + countDescendants(k), 0);
}
