/**
 * One reusable buffer for the frame bodies a producer fills from templates. A fresh
 * Uint8Array of a few hundred bytes costs about 0.9 µs in V8 (its backing
 * store lives outside the heap), more than encoding a small frame; the native
 * publish copies the body into the arena before it returns, so the next frame
 * can be encoded into the same memory. Only for bodies handed straight to
 * such a call: a body kept (a PreparedFrame's, a template's) needs its own.
 */
import type { BodyMemory } from './body-template.js';

export class BodyScratch {
  #buffer = new ArrayBuffer(4096);
  #view = new DataView(this.#buffer);

  /** `size` bytes (whatever the last body left there: BodyTemplate.fill() writes them all), valid until the next take(). */
  take = (size: number): BodyMemory => {
    if (size > this.#buffer.byteLength) {
      this.#buffer = new ArrayBuffer(Math.max(size, 2 * this.#buffer.byteLength));
      this.#view = new DataView(this.#buffer);
    }
    return { bytes: new Uint8Array(this.#buffer, 0, size), view: this.#view };
  };
}
