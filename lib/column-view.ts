/**
 * ColumnView: a received column as plain typed arrays over the frame's host
 * buffers, without building apache-arrow objects (which costs tens of µs per
 * frame). For consumers that read a few numbers per frame at high rates.
 *
 * Layout is the Arrow C data interface's, as on the wire: `validity` bits start
 * at bit `offset`; `values` and `offsets` already cover just this column's slice
 * (`length` values, `length + 1` offsets, checked against the data); a struct
 * or fixed-size-list node's `offset` also applies to its children, which are
 * described as they travel. Views are valid until the frame is released.
 */
import type { BufferDescriptor, ColumnDescriptor } from './codec/description.js';
import { parseFormat } from './codec/format.js';
import { aligned, checkedOffsets } from './codec/value-offsets.js';
import { GpuringError } from './errors.js';

/** The typed arrays a ColumnView's values can be. */
export type TypedValues = Int8Array | Uint8Array | Int16Array | Uint16Array | Int32Array | Uint32Array | BigInt64Array | BigUint64Array | Float32Array | Float64Array;

/** A received column as plain typed arrays over the frame's buffers (Frame.columns(), Frame.column()): valid until the frame is released. */
export interface ColumnView {
  /** The field's name. */
  name: string;
  /** Arrow C data interface format string. */
  format: string;
  /** Elements in this slice. */
  length: number;
  /** -1 when unknown. */
  nullCount: number;
  /** Element offset into the buffers (also the first validity bit). */
  offset: number;
  /** Validity bitmap (bit `offset` is element 0), or null when there are no nulls. */
  validity: Uint8Array | null;
  /**
   * Fixed-width numbers: a typed array of this slice's `length` values (float16
   * as raw Uint16Array). Bool: the bitmap (bit `offset` is element 0). utf8 and
   * binary: the character bytes, indexed by `offsets`. Others (decimal,
   * fixed-size binary): the slice's bytes. Nested types: null.
   */
  values: TypedValues | null;
  /** utf8, binary and list columns: this slice's offsets, checked. */
  offsets: Int32Array | BigInt64Array | null;
  /** Child columns of nested types (list, struct, fixed-size list); [] for others. */
  children: ColumnView[];
}

/** Resolves a host buffer to its bytes; throws for device buffers. */
export type HostBytes = (buffer: BufferDescriptor) => Uint8Array;

const TYPED: Record<string, (b: ArrayBuffer, at: number, n: number) => TypedValues> = {
  c: (b, at, n) => new Int8Array(b, at, n),
  C: (b, at, n) => new Uint8Array(b, at, n),
  s: (b, at, n) => new Int16Array(b, at, n),
  S: (b, at, n) => new Uint16Array(b, at, n),
  e: (b, at, n) => new Uint16Array(b, at, n),
  i: (b, at, n) => new Int32Array(b, at, n),
  I: (b, at, n) => new Uint32Array(b, at, n),
  l: (b, at, n) => new BigInt64Array(b, at, n),
  L: (b, at, n) => new BigUint64Array(b, at, n),
  f: (b, at, n) => new Float32Array(b, at, n),
  g: (b, at, n) => new Float64Array(b, at, n),
};

/** Typed-array constructor key for a fixed-width format: its own letter, or the signed integer of its width (dates, times, timestamps, durations). */
function typedKey(format: string, bitWidth: number): string | null {
  if (format.length === 1 && TYPED[format]) return format;
  if (format[0] !== 't') return null;
  return bitWidth === 32 ? 'i' : bitWidth === 64 ? 'l' : null;
}

export function columnView(c: ColumnDescriptor, bytes: HostBytes): ColumnView {
  const f = parseFormat(c.format);
  if (!f) throw new GpuringError('FRAME_INVALID', `column '${c.name}': unsupported format '${c.format}'`);
  const buffer = (i: number) => (c.buffers[i]!.kind === 'absent' ? new Uint8Array(0) : bytes(c.buffers[i]!));
  const view: ColumnView = {
    name: c.name, format: c.format, length: c.length, nullCount: c.nullCount, offset: c.offset,
    validity: c.buffers[0]!.kind === 'absent' ? null : buffer(0),
    values: null, offsets: null,
    children: c.children.map((child) => columnView(child, bytes)),
  };
  if (f.layout === 'bool') view.values = buffer(1);
  if (f.layout === 'fixed') view.values = fixedValues(c, buffer(1), f.bitWidth);
  if (f.layout === 'varbin') {
    const data = buffer(2);
    view.offsets = checkedOffsets(c, buffer(1), f.offsetBytes, data.length);
    view.values = data;
  }
  if (f.layout === 'list') view.offsets = checkedOffsets(c, buffer(1), f.offsetBytes, c.children[0]!.length);
  return view;
}

function fixedValues(c: ColumnDescriptor, data: Uint8Array, bitWidth: number): TypedValues {
  const width = bitWidth / 8;
  const slice = data.subarray(c.offset * width, (c.offset + c.length) * width);
  const key = typedKey(c.format, bitWidth);
  if (!key) return slice;
  const usable = aligned(slice, width);
  return TYPED[key]!(usable.buffer as ArrayBuffer, usable.byteOffset, c.length);
}
