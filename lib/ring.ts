/**
 * Ring: a named shared-memory segment (/dev/shm/gpuring.NAME) holding the ring
 * of frames and the table of attached processes. Creating one does not join
 * it: producers and consumers attach with `ring.producer()` / `ring.consumer()`
 * (or Producer.open / Consumer.open from any process).
 */
import { Consumer, type ConsumerOptions } from './consumer.js';
import { callNative } from './errors.js';
import { native, type NativeSegmentHandle, type RawInspection, type SweepReport } from './native.js';
import { createOptions, openFlags, openOptions, parseOptions, parseSegmentName } from './options.js';
import { Producer, type ProducerOptions } from './producer.js';

export type CreateOptions = Partial<typeof createOptions._input>;
export type OpenOptions = Partial<typeof openOptions._input>;
export type RingInspection = RawInspection;

export class Ring {
  readonly name: string;
  readonly #handle: NativeSegmentHandle;

  private constructor(name: string, handle: NativeSegmentHandle) {
    this.name = name;
    this.#handle = handle;
  }

  /**
   * Creates ring `name`; fails with SEGMENT_EXISTS if it exists, NO_SPACE if
   * /dev/shm cannot hold it. The segment persists until `Ring.unlink(name)`.
   */
  static create(name: string, options?: CreateOptions): Ring {
    const n = parseSegmentName(name);
    const o = parseOptions(createOptions, options, 'ring options');
    return new Ring(n, callNative(() => new (native().SegmentHandle)(n, true, o.slots, o.participants, o.mode, 0)));
  }

  /** Opens an existing ring, verifying magic, version, layout and size. */
  static open(name: string, options?: OpenOptions): Ring {
    const n = parseSegmentName(name);
    const o = parseOptions(openOptions, options, 'open options');
    return new Ring(n, callNative(() => new (native().SegmentHandle)(n, false, 0, 0, 0, o.openTimeout, openFlags(o))));
  }

  /**
   * Removes the name and the arenas named after it (also when the segment itself
   * is already gone: SEGMENT_NOT_FOUND only when neither existed). Attached
   * processes keep working on what they mapped; new ones cannot open it.
   */
  static unlink(name: string): void {
    const n = parseSegmentName(name);
    callNative(() => native().SegmentHandle.unlink(n));
  }

  /** Header, participants (alive or dead), slot occupancy and leases. */
  inspect(): RingInspection {
    return callNative(() => this.#handle.inspect());
  }

  /** Finds dead participants now and repairs what they held (also done automatically while waiting). */
  sweep(): SweepReport {
    return callNative(() => this.#handle.sweep());
  }

  producer(options?: ProducerOptions): Producer {
    return Producer.open(this.name, options);
  }

  consumer(options?: ConsumerOptions): Consumer {
    return Consumer.open(this.name, options);
  }

  close(): void {
    this.#handle.close();
  }
}
