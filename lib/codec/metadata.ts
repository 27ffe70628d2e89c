/**
 * Key-value metadata in the Arrow C data interface encoding: int32 count, then
 * per pair int32 key length, key bytes, int32 value length, value bytes (all
 * little-endian). Absent or empty metadata encodes as zero bytes.
 */
import { strictUtf8Decoder } from './utf8.js';

const EMPTY = new Uint8Array(0);

export function encodeMetadata(pairs: [string, string][] | null): Uint8Array {
  if (!pairs || pairs.length === 0) return EMPTY;
  const enc = new TextEncoder();
  const parts = pairs.flatMap(([k, v]) => [enc.encode(k), enc.encode(v)]);
  const out = new Uint8Array(4 + parts.reduce((n, p) => n + 4 + p.length, 0));
  const view = new DataView(out.buffer);
  view.setInt32(0, pairs.length, true);
  let at = 4;
  for (const p of parts) {
    view.setInt32(at, p.length, true);
    out.set(p, at + 4);
    at += 4 + p.length;
  }
  return out;
}

/** Decodes metadata (keys and values must be UTF-8); null if the bytes are not exactly one well-formed encoding. */
export function decodeMetadata(bytes: Uint8Array): [string, string][] | null | undefined {
  if (bytes.length === 0) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const dec = strictUtf8Decoder;
  const take = (at: number): [string, number] | undefined => {
    if (at + 4 > bytes.length) return undefined;
    const n = view.getInt32(at, true);
    if (n < 0 || at + 4 + n > bytes.length) return undefined;
    try {
      return [dec.decode(bytes.subarray(at + 4, at + 4 + n)), at + 4 + n];
    } catch {
      return undefined; // not UTF-8
    }
  };
  if (bytes.length < 4) return undefined;
  const count = view.getInt32(0, true);
  if (count < 0 || count > bytes.length / 8) return undefined;
  const pairs: [string, string][] = [];
  let at = 4;
  for (let i = 0; i < count; i++) {
    const key = take(at);
    if (!key) return undefined;
    const value = take(key[1]);
    if (!value) return undefined;
    pairs.push([key[0], value[0]]);
    at = value[1];
  }
  return at === bytes.length ? pairs : undefined;
}
