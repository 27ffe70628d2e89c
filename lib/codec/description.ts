/**
 * The decoded form of a frame body: what a frame says about its columns and
 * where their buffers are. Encoding a description and decoding the bytes give
 * back an equal description (metadata aside: empty and absent encode alike).
 */
import { GpuringError } from '../errors.js';
import { HANDLE_BYTES, MAX_DEPTH, MAX_NODES, type MemoryKind } from './layout.js';
import { utf8, utf8Decoder } from './utf8.js';

/** Whether a buffer of this kind lies in device memory (cuda-ipc or cuda-pool). */
export const isDeviceKind = (kind: MemoryKind): boolean => kind === 'cuda-ipc' || kind === 'cuda-pool' || kind === 'cuda-vmm';

/** One buffer of a column, in Arrow order (validity, offsets, data). */
export interface BufferDescriptor {
  /**
   * Where the buffer lies: host (a shared-memory arena), cuda-ipc (device
   * memory from cudaMalloc), cuda-pool (device memory from an exportable
   * stream-ordered pool, SPEC.md §9b), cuda-vmm (device memory of the virtual
   * memory management API, such as PyTorch's expandable segments, §9d) or absent.
   */
  kind: MemoryKind;
  /** The producer's device ordinal; -1 for host memory. */
  deviceOrdinal: number;
  /** 16 bytes; zero for host memory. */
  deviceUuid: Uint8Array;
  /** Bytes from the base of the allocation the handle names. */
  offset: number;
  /** Bytes of the buffer. */
  length: number;
  /**
   * cuda-ipc, cuda-pool: the allocation's CU_POINTER_ATTRIBUTE_BUFFER_ID in the exporting
   * process. Unlike addresses and IPC handles it is never reused, so a mapping
   * cache keyed on it never serves recycled memory. 0n for host memory.
   */
  allocationId: bigint;
  /** cuda-pool only: the producer's number for the pool, which consumers ask its descriptor channel for. */
  poolId?: bigint;
  /** 64 bytes: host, the NUL-terminated arena name; cuda-ipc, the CUipcMemHandle; cuda-pool, the CUmemPoolPtrExportData. */
  handle: Uint8Array;
}

/** One field of the schema together with its array data. */
export interface ColumnDescriptor {
  /** The field's name. */
  name: string;
  /** Arrow C data interface format string. */
  format: string;
  /** The field may hold nulls. */
  nullable: boolean;
  /** Dictionary-encoded columns: the dictionary's order is meaningful. */
  dictionaryOrdered: boolean;
  /** Map columns: keys are sorted within each map. */
  mapKeysSorted: boolean;
  /** Field metadata, in order; null when there is none. */
  metadata: [string, string][] | null;
  /** Index into FrameDescription.dictionaries, or -1. */
  dictionary: number;
  /** Elements of this column (or child). */
  length: number;
  /** -1 when unknown. */
  nullCount: number;
  /** Element offset, which also indexes the validity bits. */
  offset: number;
  /** The Arrow buffers of this node, in the C data interface's order (validity first). */
  buffers: BufferDescriptor[];
  /** Child nodes of nested types; [] for others. */
  children: ColumnDescriptor[];
}

/** What a frame carries: its schema with each column's buffers, as publishFrame() takes it and Frame.description gives it. */
export interface FrameDescription {
  /** Rows of the record batch. */
  rowCount: number;
  /** Schema metadata, in order; null when there is none. */
  metadata: [string, string][] | null;
  /** The top-level columns. */
  columns: ColumnDescriptor[];
  /** Value arrays of dictionary-encoded columns. */
  dictionaries: ColumnDescriptor[];
  /** 0 none, 2 a cuda-ipc event handle in syncHandle. */
  syncKind: number;
  /** 64 bytes: the CUipcEventHandle readers wait on when syncKind is 2; zero otherwise. */
  syncHandle: Uint8Array;
}

/** A buffer descriptor for a buffer that is not there. */
export function absentBuffer(): BufferDescriptor {
  return {
    kind: 'absent',
    deviceOrdinal: -1,
    deviceUuid: new Uint8Array(16),
    offset: 0,
    length: 0,
    allocationId: 0n,
    handle: new Uint8Array(HANDLE_BYTES),
  };
}

/** A buffer descriptor for bytes in a host arena. */
export function hostBuffer(arenaName: string, offset: number, length: number): BufferDescriptor {
  if (typeof arenaName !== 'string') throw new GpuringError('INVALID_ARGUMENT', 'hostBuffer() takes the arena name as a string');
  const handle = new Uint8Array(HANDLE_BYTES);
  handle.set(utf8(arenaName).subarray(0, HANDLE_BYTES - 1));
  return { kind: 'host', deviceOrdinal: -1, deviceUuid: new Uint8Array(16), offset, length, allocationId: 0n, handle };
}

/** The last handle decoded and its name: a frame's buffers mostly share one arena. */
const lastHandle = new Uint8Array(HANDLE_BYTES);
let lastName = '';

/** The arena name a host buffer's handle carries. */
export function handleName(handle: Uint8Array): string {
  if (handle.length === HANDLE_BYTES && lastName !== '' && sameBytes(handle, lastHandle)) return lastName;
  const end = handle.indexOf(0);
  const name = utf8Decoder.decode(handle.subarray(0, end < 0 ? handle.length : end));
  if (handle.length === HANDLE_BYTES) (lastHandle.set(handle), (lastName = name));
  return name;
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  for (let i = 0; i < a.length; i++) {
    if (a[i] !== b[i]) return false;
    if (a[i] === 0) return true; // the name ends here; what follows is not part of it
  }
  return true;
}

/** Each buffer descriptor of `description` to its position in wire order (as forEachBuffer visits them). */
export function bufferIndex(description: FrameDescription): Map<BufferDescriptor, number> {
  const index = new Map<BufferDescriptor, number>();
  forEachBuffer(description, (b) => index.set(b, index.size));
  return index;
}

/**
 * Calls `fn` for every buffer of every column and dictionary, in wire order.
 * Descriptions come from applications, so the walk checks the shape it walks
 * (objects where nodes and buffers go, arrays where lists go, at most
 * MAX_DEPTH levels and MAX_NODES nodes: a cycle ends) and refuses any other
 * with INVALID_ARGUMENT naming the place, as the encoder does for values.
 */
export function forEachBuffer(description: FrameDescription, fn: (buffer: BufferDescriptor) => void): void {
  if (typeof description !== 'object' || description === null) invalidDescription('description', 'must be an object');
  const nodes = { seen: 0 };
  visitBuffers(description.columns, 'columns', 1, nodes, fn);
  visitBuffers(description.dictionaries, 'dictionaries', 1, nodes, fn);
}

function visitBuffers(columns: ColumnDescriptor[], path: string, depth: number, nodes: { seen: number }, fn: (buffer: BufferDescriptor) => void): void {
  if (!Array.isArray(columns)) invalidDescription(path, 'must be an array');
  if (columns.length && depth > MAX_DEPTH) invalidDescription(path, `nests deeper than ${MAX_DEPTH} levels`);
  for (let i = 0; i < columns.length; i++) {
    const c = columns[i];
    if (typeof c !== 'object' || c === null) invalidDescription(`${path}[${i}]`, 'must be an object');
    if (++nodes.seen > MAX_NODES) invalidDescription(`${path}[${i}]`, `is past the limit of ${MAX_NODES} columns in all`);
    const buffers = c.buffers;
    if (!Array.isArray(buffers)) invalidDescription(`${path}[${i}].buffers`, 'must be an array');
    for (let k = 0; k < buffers.length; k++) {
      const b = buffers[k];
      if (typeof b !== 'object' || b === null) invalidDescription(`${path}[${i}].buffers[${k}]`, 'must be an object');
      fn(b);
    }
    visitBuffers(c.children, `${path}[${i}].children`, depth + 1, nodes, fn);
  }
}

/** The error for a description that cannot be encoded: INVALID_ARGUMENT, naming where (`columns[0].buffers[1].kind`). */
export function invalidDescription(at: string, what: string): never {
  throw new GpuringError('INVALID_ARGUMENT', `invalid frame description: ${at}: ${what}`);
}
