/**
 * Var-size value offsets read from shared memory, checked before anything
 * indexes values with them (SPEC.md §8.2): every offset of a node's slice, not
 * only its ends. Shared by the apache-arrow reader and Frame column views.
 */
import { GpuringError } from '../errors.js';
import type { ColumnDescriptor } from './description.js';

/** What the checks need of a node: its name (for messages) and its slice. */
export type NodeSlice = Pick<ColumnDescriptor, 'name' | 'offset' | 'length'>;

/** A view usable as `bytesPerElement`-wide elements: the same memory if aligned, else a copy. */
export function aligned(bytes: Uint8Array, bytesPerElement: number): Uint8Array {
  const usable = bytes.subarray(0, bytes.length - (bytes.length % bytesPerElement));
  return usable.byteOffset % bytesPerElement === 0 ? usable : usable.slice();
}

/**
 * The `length + 1` offsets of node `c`'s slice from its offsets buffer `raw`,
 * as a private copy (shared memory changed later cannot undo the check): the
 * first >= 0, each >= the one before, the last <= `limit` (the data's bytes or
 * the child's length), else FRAME_BOUNDS.
 */
export function checkedOffsets(c: NodeSlice, raw: Uint8Array, width: number, limit: number): Int32Array | BigInt64Array {
  if (c.length === 0) return width === 4 ? new Int32Array(1) : new BigInt64Array(1);
  const bytes = aligned(raw, width);
  const all = width === 4 ? new Int32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4) : new BigInt64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8);
  const view = all.slice(c.offset, c.offset + c.length + 1);
  const first = Number(view[0]!);
  const last = Number(view[c.length]!);
  if (first < 0 || last < first || last > limit) throw new GpuringError('FRAME_BOUNDS', `column '${c.name}': value offsets [${first}, ${last}] exceed its ${limit} values`);
  for (let k = 1, prev = first; k < c.length; k++) {
    const v = Number(view[k]!);
    if (v < prev || v > last) throw new GpuringError('FRAME_BOUNDS', `column '${c.name}': value offset ${k} is ${v}, outside [${prev}, ${last}]`);
    prev = v;
  }
  return view;
}
