/**
 * `for await (const frame of consumer)`: the consumer's frames as an async
 * iterator, written by hand rather than as an async generator. A generator
 * over nextBatch() put five promise hops and a second native call (for the
 * rest of the batch) between a sleeping consumer's wake-up and the loop's
 * body: after 2 ms asleep, 27-34 µs from the wake-up to the body where
 * next()'s caller took 19-22 (H200 box, three alternated rounds). Here a
 * sleeping loop's next() returns the native wait's own promise, which the
 * core settles with an iterator result JS made before it slept
 * (ConsumerState::Request's `iteration`, `spare_result`): the body runs one
 * microtask after the wake-up, as next()'s caller does (11-21 µs, next()
 * 6-20 in the same rounds). The frames ready behind that one are taken, in
 * one native call, when the loop asks for the next.
 *
 * Contract (Consumer's [Symbol.asyncIterator] documents it for users): frames
 * come in the consumer's order, each once; each yielded frame is leased to the
 * caller. Frames taken but not yet yielded when the loop stops (`return()`: a
 * `break`, `return` or throw in the loop's body) go back to the ring, newest
 * first; waits still pending then end with `{ done: true }` and take no frame.
 * The iteration ends (done) when the consumer closes. Any other error rejects
 * that next() (a `for await` loop throws it); a later next() goes on with the
 * frames after it. Calls made while one waits wait too, and are served in the
 * order made (the core serves its waits in order and takes no frame ahead of
 * one).
 */
import type { Frame } from './frame.js';

/** What the iterator needs of its Consumer. */
export interface FrameTaker {
  /** True once the consumer closed. */
  closed(): boolean;
  /** Frames ready now, up to `max`, in order, from one native call; none when nothing is ready or a wait is pending. */
  takeReady(max: number): Frame[];
  /** A native wait of this iteration: settles as `{ value: frame, done: false }`, or `{ done: true }` on CLOSED or stopWaits(). */
  wait(): Promise<IteratorResult<Frame>>;
  /** Ends this iteration's pending waits with `{ done: true }`. */
  stopWaits(): void;
}

const DONE: IteratorReturnResult<undefined> = Object.freeze({ value: undefined, done: true });

export class ConsumerFrames implements AsyncIterableIterator<Frame> {
  readonly #taker: FrameTaker;
  readonly #max: number;
  /** Frames taken from the ring, yielded up to #at. */
  #batch: Frame[] = [];
  #at = 0;
  #done = false;

  constructor(taker: FrameTaker, max: number) {
    this.#taker = taker;
    this.#max = max;
  }

  [Symbol.asyncIterator](): this {
    return this;
  }

  next(): Promise<IteratorResult<Frame>> {
    if (this.#done || this.#taker.closed()) return this.return();
    if (this.#at < this.#batch.length) return Promise.resolve({ value: this.#batch[this.#at++]!, done: false });
    try {
      const ready = this.#taker.takeReady(this.#max);
      this.#batch = ready;
      this.#at = ready.length ? 1 : 0;
      return ready.length ? Promise.resolve({ value: ready[0]!, done: false }) : this.#taker.wait();
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Stops the iteration: frames taken but not yielded go back to the ring (last first: a broadcast subscriber hands a frame back by moving its cursor back over it, which works only from the newest taken down). */
  return(): Promise<IteratorResult<Frame>> {
    if (!this.#done) this.#taker.stopWaits();
    this.#done = true;
    for (let i = this.#batch.length - 1; i >= this.#at; i--) this.#batch[i]!.handBack();
    this.#batch = [];
    this.#at = 0;
    return Promise.resolve(DONE);
  }
}
