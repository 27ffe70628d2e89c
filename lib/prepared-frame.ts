import { HANDLE_BYTES, Header } from './codec/layout.js';
import { hostPublishOptions, parseOptions, preparedPublishOptions, publishManyOptions } from './options.js';
import { native } from './native.js';
import { callNative, GpuringError } from './errors.js';
import type { DeviceStream } from './device-stream.js';
import { orderingStream } from './device-upload.js';

/** How the producer sends the prepared body without an event: the bytes the core keeps (Producer.prepare()). */
export type SendPlain = (tag: bigint, timeout: number) => number | Promise<number>;

/** How the producer sends a prepared body with the event to recycle on release. */
export type SendBody = (body: Uint8Array, eventId: number, timeout: number, tag: bigint) => number | Promise<number>;

/** How the producer sends `count` copies of a prepared body in one native call. */
export type SendMany = (body: Uint8Array, eventId: number, count: number, tags: BigUint64Array | null, timeout: number) => Promise<number[]>;

/** Options of PreparedFrame.publish(): as publish()'s, without device. */
export type PreparedPublishOptions = {
  /** Milliseconds to wait for space when the ring is full (default: no limit); 0 fails at once with RING_FULL. */
  timeout?: number;
  /** A number for the application, carried with the frame (default 0). */
  tag?: bigint;
  /** Readers are ordered after the work queued on this stream so far (default: the device's legacy default stream). */
  stream?: DeviceStream | bigint;
};
/** Options of PreparedFrame.publishMany(): timeout, and one tag per frame. */
export type PublishManyOptions = {
  /** Milliseconds to wait for space (default: no limit); 0 publishes what fits and fails with RING_FULL. */
  timeout?: number;
  /** Frame i's tag (default 0). */
  tags?: BigUint64Array;
  /** As for publish(): one event on this stream orders all the frames. */
  stream?: DeviceStream | bigint;
};

/**
 * A frame description validated and encoded once, published
 * as often as you like (Producer.prepare()). For producers with a fixed set
 * of device buffers, a ring of output tensors or double buffering, which
 * otherwise describe, encode and validate the same layout for every frame.
 *
 * Ownership is publishFrame()'s: the device buffers stay the caller's, alive
 * and unchanged from each publish until that frame is released (the
 * producer's 'release' event names it). Only device (cuda-ipc, cuda-pool) and absent
 * buffers can be prepared: arena allocations belong to a single frame.
 *
 * Ordering: each publish orders its readers after the work queued on the
 * `stream` it is given (by default the legacy default stream of the frame's
 * device), recording a pooled event when that stream is busy (none when
 * idle), unless the description carries an event of its own.
 */
export class PreparedFrame {
  readonly #body: Uint8Array;
  readonly #header: DataView;
  /** The header's sync_handle, where each publish's event handle goes. */
  readonly #syncHandle: Uint8Array;
  /** Device whose legacy stream orders the frame, or -1 when the description brings its own event. */
  readonly #eventDevice: number;
  readonly #headsUp: () => void;
  readonly #sendPlain: SendPlain;
  readonly #send: SendBody;
  readonly #sendMany: SendMany;

  /** @internal Producer.prepare() makes these. */
  constructor(body: Uint8Array, eventDevice: number, headsUp: () => void, sends: { plain: SendPlain; withEvent: SendBody; many: SendMany }) {
    this.#body = body;
    this.#header = new DataView(body.buffer, body.byteOffset);
    this.#syncHandle = body.subarray(Header.syncHandle, Header.syncHandle + HANDLE_BYTES);
    this.#eventDevice = eventDevice;
    this.#headsUp = headsUp;
    this.#sendPlain = sends.plain;
    this.#send = sends.withEvent;
    this.#sendMany = sends.many;
    // Those bytes are what a publish without an event sends (Producer.prepare() copies them).
    if (eventDevice >= 0) this.#clearEvent();
  }

  /** Bytes of the encoded description. */
  get byteLength(): number {
    return this.#body.length;
  }

  /**
   * Publishes the frame again; resolves to the new frame's id. Options as for
   * publish(): `timeout` for space in the ring, `tag` carried with the frame.
   */
  async publish(options?: PreparedPublishOptions): Promise<number> {
    // Before anything else: a publish often runs on a CPU just woken from
    // sleep, where each step of JS here costs microseconds.
    this.#headsUp();
    // The native publish copies the body before it returns, so the header can
    // be patched for every frame without a copy here.
    const plain = this.#eventDevice < 0 ? hostPublishOptions(options) : undefined;
    if (plain) return this.#sendPlain(plain.tag, plain.timeout);
    const o = parseOptions(preparedPublishOptions, options, 'publish() options');
    const eventId = this.#orderAfter(o.stream);
    return eventId < 0 ? this.#sendPlain(o.tag, o.timeout) : this.#send(this.#body, eventId, o.timeout, o.tag);
  }

  /**
   * Publishes the frame `count` times in one native call (one lock, one reap,
   * one wake-up of a sleeping consumer): ids in publication order, each frame
   * tagged with `tags[i]` (default 0). Waits for space as publish() does, up to
   * `timeout`; with `timeout: 0` it publishes what fits and fails with
   * RING_FULL naming the ids that went out. All frames share one event when the
   * device's stream is busy.
   */
  async publishMany(count: number, options?: PublishManyOptions): Promise<number[]> {
    const o = parseOptions(publishManyOptions, options, 'publishMany() options');
    if (!Number.isInteger(count) || count < 1 || count > 1 << 20) throw new GpuringError('INVALID_ARGUMENT', `publishMany() takes 1 to ${1 << 20} frames, not ${count}`);
    if (o.tags && o.tags.length < count) throw new GpuringError('INVALID_ARGUMENT', `publishMany(): ${o.tags.length} tags for ${count} frames`);
    return this.#sendMany(this.#body, this.#orderAfter(o.stream), count, o.tags ?? null, o.timeout);
  }

  /** Patches the header with an event recorded on `stream` (default: the device's legacy stream) if it is busy; the event's id, or -1. */
  #orderAfter(stream: DeviceStream | bigint | undefined): number {
    const queue = orderingStream(stream, this.#eventDevice);
    if (this.#eventDevice < 0) return -1;
    // The event's handle is written straight into the body.
    const id = callNative(() => native().recordEvent(this.#eventDevice, true, queue, this.#syncHandle));
    if (id < 0) this.#clearEvent();
    else this.#header.setUint16(Header.syncKind, 2, true);
    return id;
  }

  /** The header says "no event": sync kind 0, handle zero. */
  #clearEvent(): void {
    this.#header.setUint16(Header.syncKind, 0, true);
    this.#syncHandle.fill(0);
  }
}
