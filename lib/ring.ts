import { Consumer, type ConsumerOptions } from './consumer.js';
import { existsSync } from 'node:fs';
import { callNative, GpuringError } from './errors.js';
import { native, type NativeSegmentHandle, type RingInspection, type SweepReport } from './native.js';
import { createOptions, openFlags, openOptions, parseOptions, parseSegmentName, segmentPath, waitOptions } from './options.js';
import { pollUntil } from './poll-until.js';
import { Producer, type ProducerOptions } from './producer.js';

/** Options of Ring.create(): slots, participants, mode, ifExists. */
export type CreateOptions = Partial<typeof createOptions._input>;
/** Options of Ring.open(): openTimeout, anyOwner. */
export type OpenOptions = Partial<typeof openOptions._input>;
/** Options of Ring.waitFor(): timeout, signal. */
export type WaitOptions = Partial<typeof waitOptions._input>;

/** How often waitFor() looks for the segment: a stat, cheap enough to keep a start-up wait short. */
const WAIT_POLL_MS = 10;

/**
 * A named shared-memory segment (/dev/shm/gpuring.NAME) holding the ring
 * of frames and the table of attached processes. Creating one does not join
 * it: producers and consumers attach with `ring.producer()` / `ring.consumer()`
 * (or Producer.open / Consumer.open from any process).
 */
export class Ring {
  /** The ring's name: its segment is /dev/shm/gpuring.NAME. */
  readonly name: string;
  readonly #handle: NativeSegmentHandle;

  private constructor(name: string, handle: NativeSegmentHandle) {
    this.name = name;
    this.#handle = handle;
  }

  /**
   * Creates ring `name`; fails with SEGMENT_EXISTS if it exists (unless
   * `ifExists: 'open'`, which opens that ring as it is), NO_SPACE if
   * /dev/shm cannot hold it. The segment persists until `Ring.unlink(name)`.
   * It is built unnamed and named once whole, so a process killed while
   * creating it leaves no ring or a ready one (SPEC.md §3.1).
   */
  static create(name: string, options?: CreateOptions): Ring {
    const n = parseSegmentName(name);
    const o = parseOptions(createOptions, options, 'ring options');
    const make = () => new Ring(n, callNative(() => new (native().SegmentHandle)(n, true, o.slots, o.participants, o.mode, 0, 0, o.delivery === 'all' ? 1 : 0)));
    if (o.ifExists === 'fail') return make();
    // Another process may create or remove the name between our two calls: try again.
    for (let attempt = 0; ; attempt++) {
      try {
        return make();
      } catch (error) {
        if ((error as GpuringError).code !== 'SEGMENT_EXISTS') throw error;
      }
      try {
        return Ring.open(n);
      } catch (error) {
        if ((error as GpuringError).code !== 'SEGMENT_NOT_FOUND' || attempt >= 100) throw error;
      }
    }
  }

  /**
   * Resolves once ring `name` exists, so that a consumer (or producer) may be
   * started before whoever creates the ring: then open it as usual (the open
   * waits `openTimeout` for a creator still initializing it). Rejects with
   * SEGMENT_NOT_FOUND after `timeout` ms (default: no limit) and with ABORTED
   * when `signal` aborts.
   */
  static async waitFor(name: string, options?: WaitOptions): Promise<void> {
    const n = parseSegmentName(name);
    const o = parseOptions(waitOptions, options, 'waitFor() options');
    await pollUntil(() => existsSync(segmentPath(n)), o, WAIT_POLL_MS, `ring '${n}'`, () => new GpuringError('SEGMENT_NOT_FOUND', `no segment named '${n}' after waiting ${o.timeout} ms`));
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

  /** Attaches a producer to this ring (Producer.open(ring.name, options)). */
  producer(options?: ProducerOptions): Producer {
    return Producer.open(this.name, options);
  }

  /** Attaches a consumer to this ring (Consumer.open(ring.name, options)). */
  consumer(options?: ConsumerOptions): Consumer {
    return Consumer.open(this.name, options);
  }

  /** Unmaps the segment from this process; the ring itself stays (see Ring.unlink). */
  close(): void {
    this.#handle.close();
  }
}
