/** Bits [offset, offset + length) of a bitmap, re-based to bit 0 (a view when byte-aligned). */
export function sliceBits(bitmap: Uint8Array, offset: number, length: number): Uint8Array {
  const bytes = Math.ceil(length / 8);
  if (offset % 8 === 0) return bitmap.subarray(offset / 8, offset / 8 + bytes);
  const out = new Uint8Array(bytes);
  const shift = offset % 8;
  const first = Math.floor(offset / 8);
  for (let i = 0; i < bytes; i++) {
    const lo = bitmap[first + i]! >> shift;
    const hi = (bitmap[first + i + 1] ?? 0) << (8 - shift);
    out[i] = (lo | hi) & 0xff;
  }
  const tail = length % 8;
  if (tail && bytes) out[bytes - 1]! &= (1 << tail) - 1;
  return out;
}
