import type { Frame } from './frame.js';
import type { GpuringError } from './errors.js';

/** What Consumer.listen() hands each frame to. */
export type FrameHandler = (frame: Frame) => void;
/** What Consumer.listen() hands a failure to take a frame to. */
export type FrameErrorHandler = (error: GpuringError) => void;

/**
 * A consumer's frames going to a handler as they come (Consumer.listen()),
 * until stop(), the consumer's close(), or DETACHED.
 */
export class FrameListener implements Disposable {
  readonly #unlisten: () => void;
  #active = true;

  /** @internal Consumer.listen() makes these; `unlisten` stops the native delivery (the consumer's core). */
  constructor(unlisten: () => void) {
    this.#unlisten = unlisten;
  }

  /** True until stop(), the consumer's close(), or DETACHED ended it. */
  get active(): boolean {
    return this.#active;
  }

  /**
   * Ends the listening: the handler is not called again after this
   * returns, even from within it. Frames not yet handed over stay in the ring
   * for the consumer's next call (or another consumer); frames handed over
   * stay leased until released. Idempotent.
   */
  stop(): void {
    if (!this.#active) return;
    this.#active = false;
    this.#unlisten();
  }

  /** stop(), for `using`. */
  [Symbol.dispose](): void {
    this.stop();
  }
}
