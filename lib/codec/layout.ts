/**
 * Byte layout of a frame body, mirrored from interop/include/gpuring.h (which is
 * normative). A test checks these numbers against the C static asserts' values
 * by round-tripping bodies through the C codec.
 */
export const BODY_MAGIC = 0x46525047; // "GPRF"
export const BODY_VERSION = 1;
export const HEADER_BYTES = 128;
export const NODE_BYTES = 64;
export const BUFFER_BYTES = 128;
export const HANDLE_BYTES = 64;
export const MAX_BODY_BYTES = 64 << 20;
export const MAX_NODES = 1 << 20;
export const MAX_BUFFERS = 3 << 20;
export const MAX_DEPTH = 64;
/** Every count fits a double exactly: the protocol's limit in all languages. */
export const MAX_COUNT = Number.MAX_SAFE_INTEGER;

export const Header = {
  magic: 0,
  version: 4,
  flags: 6,
  bodyLength: 8,
  nodeCount: 12,
  bufferCount: 16,
  rootCount: 20,
  dictionaryCount: 24,
  stringsLength: 28,
  rowCount: 32,
  metadataOffset: 40,
  metadataLength: 44,
  syncKind: 48,
  syncHandle: 64,
} as const;

export const Node = {
  nameOffset: 0,
  nameLength: 4,
  formatOffset: 8,
  formatLength: 12,
  metadataOffset: 16,
  metadataLength: 20,
  childCount: 24,
  flags: 28,
  dictionary: 32,
  bufferCount: 36,
  length: 40,
  nullCount: 48,
  offset: 56,
} as const;

export const Buffer_ = {
  kind: 0,
  flags: 2,
  deviceOrdinal: 4,
  deviceUuid: 8,
  offset: 24,
  length: 32,
  allocId: 40,
  poolId: 48,
  handle: 64,
} as const;

export const NodeFlags = { nullable: 1, dictionaryOrdered: 2, mapKeysSorted: 4 } as const;

export const MEMORY_KINDS = ['absent', 'host', 'cuda-ipc', 'cuda-pool', 'cuda-vmm'] as const;
export type MemoryKind = (typeof MEMORY_KINDS)[number];

/** Arena allocations and the buffers a producer copies into one start at 64-byte boundaries. */
export const align64 = (n: number): number => Math.ceil(n / 64) * 64;

export function bodySize(nodes: number, buffers: number, strings: number): number {
  return HEADER_BYTES + nodes * NODE_BYTES + buffers * BUFFER_BYTES + Math.ceil(strings / 8) * 8;
}
