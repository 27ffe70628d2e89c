/**
 * One reusable buffer for the frame bodies a producer encodes. A fresh
 * Uint8Array of a few hundred bytes costs about 0.9 µs in V8 (its backing
 * store lives outside the heap), more than encoding a small frame; the native
 * publish copies the body into the arena before it returns, so the next frame
 * can be encoded into the same memory. Only for bodies handed straight to
 * such a call: a body kept (a PreparedFrame's, a template's) needs its own.
 */
import type { BodyMemory } from './encode.js';

export class BodyScratch {
  #buffer = new ArrayBuffer(4096);
  #view = new DataView(this.#buffer);

  /** `size` zeroed bytes, valid until the next take(). */
  take = (size: number): BodyMemory => {
    if (size > this.#buffer.byteLength) {
      this.#buffer = new ArrayBuffer(Math.max(size, 2 * this.#buffer.byteLength));
      this.#view = new DataView(this.#buffer);
    }
    const bytes = new Uint8Array(this.#buffer, 0, size);
    bytes.fill(0);
    return { bytes, view: this.#view };
  };
}
