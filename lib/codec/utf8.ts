/**
 * UTF-8 encodings of the short strings that every frame repeats (column
 * names, format strings, arena names), each encoded once: on small frames
 * TextEncoder costs more than the rest of the encoding together. The arrays
 * are shared; callers copy from them and never write to them. Bounded: the
 * cache starts over when full, so arbitrary names cannot grow it.
 */
const MAX_ENTRIES = 4096;
const encoder = new TextEncoder();
const encoded = new Map<string, Uint8Array>();

/**
 * Decodes names, formats and metadata exactly as sent: TextDecoder would
 * otherwise drop a leading U+FEFF, so a column '\ufeffid' would read as 'id'
 * here and as '\ufeffid' in C and Python.
 */
export const utf8Decoder = new TextDecoder('utf-8', { ignoreBOM: true });
/** The same, throwing on bytes that are not UTF-8. */
export const strictUtf8Decoder = new TextDecoder('utf-8', { ignoreBOM: true, fatal: true });

export function utf8(s: string): Uint8Array {
  let bytes = encoded.get(s);
  if (!bytes) {
    if (encoded.size >= MAX_ENTRIES) encoded.clear();
    bytes = encoder.encode(s);
    encoded.set(s, bytes);
  }
  return bytes;
}
