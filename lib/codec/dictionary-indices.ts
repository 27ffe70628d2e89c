/**
 * Dictionary indices read from shared memory, checked before apache-arrow
 * looks values up with them (SPEC.md §8.2): every index of a node's slice not
 * marked null names an entry of the dictionary. The C and Python readers check
 * the same and report the same code.
 */
import { GpuringError } from '../errors.js';
import type { NodeSlice } from './value-offsets.js';

/**
 * Throws FRAME_BOUNDS unless each of the `c.length` indices of `indices` (the
 * slice, from `c.offset`) whose bit in `validity` (from bit 0; empty: none
 * null) is set lies in [0, entries).
 */
export function checkIndices(c: NodeSlice, indices: ArrayLike<number | bigint>, validity: Uint8Array, entries: number): void {
  for (let k = 0; k < c.length; k++) {
    const row = c.offset + k;
    if (validity.length > 0 && !((validity[row >> 3]! >> (row & 7)) & 1)) continue;
    const v = Number(indices[k]!);
    if (v < 0 || v >= entries) throw new GpuringError('FRAME_BOUNDS', `column '${c.name}': dictionary index ${v} of row ${k} is outside its ${entries} entries`);
  }
}
