import { EventEmitter } from 'node:events';
import { type RecordBatch, Schema, Table } from 'apache-arrow';
import { describeBatch, toBatch, type BufferPlacer } from './arrow/table-writer.js';
import { BatchWriter } from './arrow/batch-writer.js';
import { ByteSink } from './arrow/byte-sink.js';
import { forEachBuffer, handleName, hostBuffer, invalidDescription, type BufferDescriptor, type FrameDescription } from './codec/description.js';
import { decodeFrame } from './codec/decode.js';
import { BodyScratch } from './codec/body-scratch.js';
import { BodyTemplate } from './codec/body-template.js';
import { encodeFrame } from './codec/encode.js';
import { align64, HANDLE_BYTES } from './codec/layout.js';
import { warmUpPublishPath } from './code-warm-up.js';
import { eventDevice, orderingStream, recordFrameEvent, uploadBatch } from './device-upload.js';
import { UploadPool } from './upload-pool.js';
import { PreparedFrame } from './prepared-frame.js';
import { FrameLoan, loanLayout, type LoanOptions, type LoanSink } from './frame-loan.js';
import type { DeviceBuffer } from './device-buffer.js';
import type { DeviceStream } from './device-stream.js';
import { awaitNative, callNative, fromNative, GpuringError, isCudaOutOfMemory } from './errors.js';
import { native, type NativeProducerCore, type PreparedBody, type ProducerStats } from './native.js';
import { loanOptions, openFlags, parseOptions, parseSegmentName, prepareOptions, producerOptions, publishOptions, toNativeTimeout, waitOptions } from './options.js';
import { pollUntil } from './poll-until.js';
import { waitTimer } from './wait-timer.js';
import type { WaitOptions } from './ring.js';

/** Options of Producer.open(): arenaBytes, openTimeout, anyOwner, sweepInterval. */
export type ProducerOptions = Partial<typeof producerOptions._input>;
/** Options of publish() and publishFrame(). */
export type PublishOptions = {
  /** Milliseconds to wait for space when the ring is full (default: no limit); 0 fails at once with RING_FULL. */
  timeout?: number;
  /** A number for the application, carried with the frame (default 0). */
  tag?: bigint;
  /** publish(table): upload the columns to this CUDA device and publish them as device memory. */
  device?: number;
  /**
   * publishFrame(): readers are ordered after the work queued on this stream so
   * far (a DeviceStream on the buffers' device, or any library's CUstream as a
   * bigint; default: the device's legacy default stream). Write the buffers on
   * any stream and publish at once, without synchronizing.
   */
  stream?: DeviceStream | bigint;
};

/**
 * Memory in one of the producer's arenas, for writing a column in place.
 * Build apache-arrow data over `bytes` and publish it: the frame then uses this
 * memory directly, with no copy. An allocation belongs to the first frame that
 * uses it; `free()` returns one that was never published.
 */
export interface HostAllocation {
  /** Which of this producer's arenas holds the allocation. */
  readonly arena: number;
  /** Byte offset of the allocation in its arena. */
  readonly offset: number;
  /** Bytes allocated. */
  readonly length: number;
  /** The allocation's memory, to fill before publishing. */
  readonly bytes: Uint8Array;
  /** Returns an allocation no frame used; one a frame used is the frame's. */
  free(): void;
}

interface Loose {
  arena: number;
  offset: number;
  length: number;
  internal: boolean;
}

/**
 * Publishes frames into a ring.
 *
 * Ownership: every buffer a frame references lives in this producer's host
 * arenas. From a successful `publish()` until the frame is released (by its
 * consumer, or for it when that consumer dies), the memory belongs to the
 * frame; afterwards the producer reuses it. `releases()` and the 'release'
 * event report each frame id once its memory is free again.
 * Backpressure: when the ring is full, `publish()` waits for space (up to
 * `timeout` ms, forever by default; `timeout: 0` fails at once with RING_FULL).
 * Frames are published in call order.
 * Waking: a publish rings a sleeping consumer first thing (a heads-up, SPEC.md
 * §6.1: with 4 or more CPUs, publish(table) of host columns and publishFrame()
 * before they describe and encode the frame), and, when the producer had been
 * idle for 50 µs or more, gives up its CPU once the frame is READY, so that a
 * consumer Linux woke on this CPU runs at once rather than when this thread
 * next blocks. A busy stream does neither. An application whose frames take
 * time to make gives the heads-up earlier itself: headsUp().
 */
export class Producer {
  /** The ring's name. */
  readonly name: string;
  readonly #core: NativeProducerCore;
  readonly #arenas: ArrayBuffer[] = [];
  readonly #names: string[] = [];
  /** Per arena, a descriptor whose handle and UUID arrays every buffer in that arena shares (read only). */
  readonly #arenaDescriptors: BufferDescriptor[] = [];
  readonly #arenaIndex = new Map<ArrayBuffer, number>();
  /** Per arena, its bytes, which the flat path copies frames into. */
  readonly #arenaSinks: ByteSink[] = [];
  /** Allocations not yet published, by looseKey(). */
  readonly #loose = new Map<number, Loose>();
  readonly #oneAllocation = new Float64Array(3);
  /** Column bytes of a small flat frame on their way to publishStaged(), which copies them with the body into one allocation. */
  readonly #staged = new ByteSink(new Uint8Array(STAGED_BYTES));
  readonly #events = new EventEmitter();
  /** Frames published and not yet reported released: a count, as each release is reported exactly once. */
  #inFlight = 0;
  /** Device memory and events of frames in flight, given back / recycled on release (an event shared by a batch, when its last frame is). */
  readonly #deviceFrames = new Map<number, DeviceOwned>();
  /** Device allocations of publish(table, { device }), reused once their frames are released. */
  readonly #uploads = new UploadPool();
  /** Body templates by the apache-arrow Schema their frames came from (see #encode). */
  readonly #templates = new WeakMap<object, BodyTemplate>();
  /** The layout of the last frame publishFrame() encoded (see #encode()). */
  #lastLayout: BodyTemplate | undefined;
  /** Where #encode() writes bodies that go straight to the native publish, which copies them. */
  readonly #scratch = new BodyScratch();
  /** Per Schema: its BatchWriter, or null where it has none (BatchWriter.of). */
  readonly #writers = new WeakMap<object, BatchWriter | null>();
  /** Rings a sleeping consumer now, as a publish starts: its wake-up then overlaps the publish (SPEC.md §6.1, heads-up). No call while nobody sleeps. */
  readonly #headsUp = (): void => {
    if (this.#core.sleepers[0] !== 0) this.#core.headsUp(false);
  };
  #listening = false;
  #draining = 0;
  #prompt = false;
  #closed = false;

  private constructor(name: string, core: NativeProducerCore) {
    this.name = name;
    this.#core = core;
    this.#listen();
  }

  /**
   * Joins ring `name` as a producer. Opening also runs the encoder once on a
   * sample frame held in memory (code-warm-up.ts): V8 compiles code on its
   * first call, and that compilation would otherwise be the larger part of
   * the first frame's latency.
   */
  static open(name: string, options?: ProducerOptions): Producer {
    const n = parseSegmentName(name);
    const o = parseOptions(producerOptions, options, 'producer options');
    const producer = new Producer(n, callNative(() => new (native().ProducerCore)(n, o.arenaBytes ?? 0, o.openTimeout, openFlags(o), o.sweepInterval)));
    warmUpPublishPath();
    return producer;
  }

  /** This producer's entry in the ring's participant table (as `gpuring inspect` shows it). */
  get index(): number {
    return this.#core.index;
  }

  /** True once close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Frames in flight, publishes waiting for space, unpublished allocations, arenas and their free bytes. */
  stats(): ProducerStats {
    return this.#core.stats();
  }

  /**
   * The subscribers of a broadcast ring (`delivery: 'all'`) now: the consumers
   * a frame published now goes to. A killed subscriber counts until the next
   * sweep. A work-queue ring has consumers, not subscribers: INVALID_ARGUMENT.
   */
  get subscribers(): number {
    this.#requireOpen();
    const n = this.#core.subscribers();
    if (n < 0) throw new GpuringError('INVALID_ARGUMENT', 'this ring is a work queue: it has consumers, not subscribers');
    return n;
  }

  /**
   * Resolves once a broadcast ring has at least `count` subscribers (checked
   * every millisecond). A frame goes only to the subscribers attached when it
   * is published, and straight back to the producer when there are none: a
   * producer whose first frames must reach someone waits for them here.
   * Rejects with TIMEOUT after `timeout` ms (default: no limit), ABORTED when
   * `signal` aborts, INVALID_ARGUMENT on a work-queue ring.
   */
  async waitForSubscribers(count: number, options?: WaitOptions): Promise<void> {
    const o = parseOptions(waitOptions, options, 'waitForSubscribers() options');
    if (!Number.isInteger(count) || count < 1 || count > 64) throw new GpuringError('INVALID_ARGUMENT', `waitForSubscribers() takes 1 to 64 subscribers, not ${String(count)}`);
    if (this.subscribers >= count) return; // and a work queue fails here, before any wait
    await pollUntil(() => this.subscribers >= count, o, 1, `${count} subscribers`, () => new GpuringError('TIMEOUT', `${this.subscribers} of ${count} subscribers after ${o.timeout} ms`));
  }

  /**
   * Wakes a consumer asleep on its doorbell now, for the frame this producer
   * publishes next (SPEC.md §6.1, heads-up): call it as you start making a
   * frame that takes about a wake-up's time to make (tens of µs on an idle
   * machine), so that the consumer's wake-up overlaps that work instead of
   * following the publish. Every publish gives one itself as it starts; this
   * one comes earlier. Parity with C `gpr_producer_heads_up`.
   *
   * Contract: on a work-queue ring it wakes at most one sleeper, on a broadcast
   * ring every sleeper. The next publish call of this producer, if it comes
   * within 1 ms, passes on whom this rang instead of ringing afresh; a later
   * one (or none) rings as usual, so a heads-up never loses or delays a frame:
   * a consumer that woke and found nothing sleeps again and is rung again.
   * A second call while one that reached a sleeper is pending rings nobody
   * new; one after a heads-up that reached nobody rings afresh. Returns whether it
   * reached a sleeper (false when none sleeps: no system call then, or while
   * publishes wait for space, which the next free slot serves first).
   * CLOSED after close().
   */
  headsUp(): boolean {
    this.#requireOpen();
    return this.#core.headsUp(true);
  }

  /**
   * Allocates `bytes` of arena memory to fill and publish without a copy.
   * UNSUPPORTED when its arena would be larger than one ArrayBuffer can hold
   * (`buffer.constants.MAX_LENGTH`: 4 GiB before Node.js 22).
   */
  allocate(bytes: number): HostAllocation {
    this.#requireOpen();
    if (!Number.isSafeInteger(bytes) || bytes < 0) throw new GpuringError('INVALID_ARGUMENT', `allocate() takes a whole number of bytes >= 0, not ${String(bytes)}`);
    const a = this.#allocate(bytes, false);
    const key = looseKey(a);
    return {
      arena: a.arena,
      offset: a.offset,
      length: bytes,
      bytes: new Uint8Array(this.#arenaBuffer(a.arena), a.offset, bytes),
      free: () => {
        if (!this.#loose.delete(key)) throw new GpuringError('FRAME_STATE', 'the allocation was already published or freed');
        if (!this.#closed) callNative(() => this.#core.free(a.arena, a.offset));
      },
    };
  }

  /**
   * Publishes a Table (of at most one record batch) or a RecordBatch; resolves
   * to the frame id. With `device: N` the columns are uploaded to CUDA device N
   * and travel as cuda-ipc buffers (the consumer maps them; nothing crosses
   * host memory but the frame description). Host columns are copied once into
   * the producer's arena (into several allocations where together they exceed
   * the largest arena this Node can lend JS whole, 4 GiB under Node.js 20; a
   * single buffer larger than that is UNSUPPORTED); batches sharing one
   * Schema object are written from that schema's template without describing
   * them (BatchWriter; every schema but one whose dictionary values hold a
   * dictionary): publish a stream's batches with one Schema to get that path.
   *
   * Memory: when /dev/shm cannot hold the copy (NO_SPACE), released frames
   * are reclaimed first; if that is not enough, publish() waits for this
   * producer's frames in flight to be released, up to `timeout` as for a full
   * ring, and fails with NO_SPACE only when none is in flight (nothing can
   * come back), at the timeout, or at once with `timeout: 0`. Likewise when
   * the device cannot hold an upload (`device`): it waits for this
   * producer's frames to be released (each gives its upload back), and fails
   * with CUDA (`cudaError` 2, out of memory) when none is in flight, at the
   * timeout, or at once with `timeout: 0`. Uploads reuse the device memory of
   * released frames (UploadPool), so consumers map each allocation once; the
   * producer keeps up to 256 MiB of it idle until close().
   */
  async publish(source: Table | RecordBatch, options?: PublishOptions): Promise<number> {
    const o = parseOptions(publishOptions, options, 'publish() options');
    this.#requireOpen();
    if (o.stream !== undefined) throw new GpuringError('INVALID_ARGUMENT', 'publish(table) takes no stream: it uploads device columns itself (publishFrame() takes one)');
    const { device, timeout, tag } = o;
    // A sleeping consumer's wake-up overlaps the describing and copying below
    // (not an upload's, which can take longer than it waits for its frame).
    if (device === undefined) this.#headsUp();
    // A loop of publishes that never waits leaves the event loop no turn for
    // release callbacks: collect releases here too before using more memory.
    this.#takeReleased();
    if (device === undefined) {
      const batch = toBatch(source);
      try {
        return this.#publishHost(batch, source.schema, timeout, tag);
      } catch (error) {
        return this.#publishWhenShort(error, timeout, (left) => this.#publishHost(batch, source.schema, left, tag));
      }
    }
    try {
      return this.#publishUpload(source, device, timeout, tag);
    } catch (error) {
      return this.#publishWhenShort(error, timeout, (left) => this.#publishUpload(source, device, left, tag));
    }
  }

  /** After a publish attempt threw `error`: rethrows it, or when memory was short waits for releases and tries `attempt` again. */
  #publishWhenShort(error: unknown, timeout: number, attempt: (timeout: number) => number | Promise<number>): Promise<number> {
    if (!isMemoryShort(error) || timeout === 0) throw error;
    return this.#publishAfterReleases(attempt, performance.now() + timeout, error);
  }

  /** Device columns uploaded and published (an upload that does not fit is thrown, never rejected). */
  #publishUpload(source: Table | RecordBatch, device: number, timeout: number, tag: bigint): number | Promise<number> {
    const frame = uploadBatch(source, device, this.#uploads);
    return this.#sendDevice(frame.description, { memory: frame.memory, eventId: frame.eventId }, timeout, tag);
  }

  /** Host columns into the arena and the ring (memory errors are thrown, never rejected). */
  #publishHost(batch: RecordBatch, schema: Schema, timeout: number, tag: bigint): number | Promise<number> {
    const writer = this.#batchWriter(batch);
    const sent = writer && this.#sendGathered(writer, batch, timeout, tag);
    if (sent !== null && sent !== undefined) return sent;
    const used: Loose[] = [];
    const copies: PendingCopy[] = [];
    const placer: BufferPlacer = { place: (bytes) => this.#inPlace(bytes, used) ?? deferCopy(bytes, copies) };
    let description: FrameDescription;
    try {
      description = describeBatch(batch, placer);
      this.#copyIn(copies, used);
    } catch (error) {
      this.#unuse(used);
      throw error;
    }
    return this.#send(description, used, timeout, tag, schema);
  }

  /**
   * publish() of columns that did not fit in shared memory or on the device:
   * `attempt` tried again after each release of this producer's frames
   * (publish()'s Memory rule).
   */
  async #publishAfterReleases(attempt: (timeout: number) => number | Promise<number>, deadline: number, short: unknown): Promise<number> {
    for (;;) {
      // Frames the failed allocation reclaimed are reported now: one may have been the last in flight.
      const reclaimed = this.#core.takeReleased();
      if (reclaimed.length) this.#released(reclaimed);
      else {
        if (this.#inFlight === 0) throw short;
        const released = await this.#nextRelease(deadline);
        this.#requireOpen();
        if (!released) throw stillShort(short as GpuringError, this.#inFlight);
      }
      try {
        return await attempt(Math.max(deadline - performance.now(), 0));
      } catch (error) {
        if (!isMemoryShort(error)) throw error;
        short = error;
      }
    }
  }

  /** Resolves true at the next release of one of this producer's frames, false at `deadline` (performance.now() ms) or at close. */
  #nextRelease(deadline: number): Promise<boolean> {
    this.#requireOpen();
    return new Promise<boolean>((resolve) => {
      const done = (released: boolean) => {
        clearTimeout(timer);
        this.off('release', onRelease);
        this.#events.off('close', onClose);
        resolve(released);
      };
      const onRelease = () => done(true);
      const onClose = () => done(false);
      const timer = waitTimer(deadline - performance.now(), () => done(false));
      this.on('release', onRelease);
      this.#events.on('close', onClose);
    });
  }

  /**
   * Lends arena memory for one frame of `schema` (flat: no nested or
   * dictionary column) with `rows` rows, to fill in place and publish without
   * a copy; see FrameLoan for the layout and who owns the memory when.
   * `bytes` gives each utf8/binary column its character bytes.
   */
  loan(schema: Schema, rows: number, options?: LoanOptions): FrameLoan {
    const o = parseOptions(loanOptions, options, 'loan() options');
    this.#requireOpen();
    if (!(schema instanceof Schema)) throw new GpuringError('INVALID_ARGUMENT', 'loan() takes an apache-arrow Schema');
    if (!Number.isSafeInteger(rows) || rows < 0) throw new GpuringError('INVALID_ARGUMENT', `loan(): rows must be a whole number >= 0, not ${String(rows)}`);
    const writer = this.#loanWriter(schema);
    if (!writer?.flat) throw new GpuringError('INVALID_ARGUMENT', 'loan() takes flat schemas (no nested or dictionary column); build a Table and publish() it instead');
    const [regions, total] = loanLayout(schema, writer.plans, rows, o.bytes ?? {});
    const a = total > 0 ? this.#allocate(total, false) : null;
    const memory = a ? new Uint8Array(this.#arenaBuffer(a.arena), a.offset, total) : new Uint8Array(0);
    const sink: LoanSink = {
      publish: async (n, nulls, buffers, tag, timeout) => {
        this.#requireOpen();
        if (a && this.#loose.get(looseKey(a)) !== a) throw new GpuringError('FRAME_STATE', "the loan's memory was published or freed by another call (publish(table) over it?)");
        writer.place(n, nulls, buffers);
        return this.#sendBody(writer.body(a?.offset ?? 0, a ? this.#arenaDescriptor(a.arena).handle : undefined), a ? [a] : [], timeout, tag);
      },
      free: () => void (a && this.#loose.delete(looseKey(a)) && !this.#closed && callNative(() => this.#core.free(a.arena, a.offset))),
    };
    return new FrameLoan(schema, rows, regions, memory, sink);
  }

  /** The BatchWriter of a loan's `schema`: made from an empty Table on first use only (building one costs more than the rest of a loan). */
  #loanWriter(schema: Schema): BatchWriter | null {
    // Kept under the loan's own Schema as well: the empty Table's batch may carry another.
    let writer = this.#writers.get(schema);
    if (writer === undefined) this.#writers.set(schema, (writer = this.#batchWriter(toBatch(new Table(schema)))));
    return writer;
  }

  /** The BatchWriter of `batch`'s Schema (made on first use), or null where it has none. */
  #batchWriter(batch: RecordBatch): BatchWriter | null {
    let writer = this.#writers.get(batch.schema);
    if (writer === undefined) this.#writers.set(batch.schema, (writer = BatchWriter.of(batch)));
    return writer;
  }

  /**
   * Publishes a frame described by hand. Every host buffer must lie inside an
   * allocation from `allocate()` (which the frame then owns). This is the
   * zero-copy path for producers that lay out Arrow buffers themselves,
   * including non-zero offsets and validity bits at any bit offset.
   * cuda-ipc buffers (see deviceBufferDescriptor) stay the caller's: keep them
   * alive and unchanged until the frame is released. When the frame has device
   * buffers and no event of its own, consumers are ordered after the work still
   * queued on `options.stream` (a DeviceStream on the buffers' device, or a
   * CUstream as a bigint), by default on the legacy default stream of
   * `options.device` (default: the device of the first device buffer): an
   * event is recorded there if that stream is busy (none is needed if it is
   * idle). Work queued on any other stream must be complete before
   * publishing. For the same layout published again and again, prepare() it once.
   */
  async publishFrame(description: FrameDescription, options?: PublishOptions): Promise<number> {
    const o = parseOptions(publishOptions, options, 'publish() options');
    this.#requireOpen();
    this.#headsUp(); // a sleeping consumer's wake-up overlaps the describing and encoding below
    const used: Loose[] = [];
    const claim = (b: BufferDescriptor) => {
      if (b.kind !== 'host') return;
      if (!(b.handle instanceof Uint8Array) || b.handle.length !== HANDLE_BYTES) invalidDescription('a host buffer', `its handle must be a Uint8Array of ${HANDLE_BYTES} bytes`);
      if (!Number.isSafeInteger(b.offset) || !Number.isSafeInteger(b.length)) invalidDescription('a host buffer', 'its offset and length must be whole numbers');
      const a = [...this.#loose.values()].find((l) => !l.internal && this.#arenaName(l.arena) === handleName(b.handle) && b.offset >= l.offset && b.offset + b.length <= l.offset + l.length);
      if (!a) throw new GpuringError('INVALID_ARGUMENT', 'a host buffer does not lie inside an unpublished allocation of this producer');
      if (!used.includes(a)) used.push(a);
    };
    forEachBuffer(description, claim);
    const device = eventDevice(description, o.device);
    const stream = orderingStream(o.stream, device);
    if (device < 0) return this.#send(description, used, o.timeout, o.tag);
    const eventId = recordFrameEvent(description, device, stream);
    return this.#sendDevice(description, { eventId }, o.timeout, o.tag);
  }

  /**
   * Validates and encodes a description of device (cuda-ipc, cuda-pool) and absent
   * buffers once, for publishing again and again with `prepared.publish()`
   * (see PreparedFrame). Invalid descriptions fail here, with the codes a
   * consumer would give them. `device` as for publishFrame().
   */
  prepare(description: FrameDescription, options?: { device?: number }): PreparedFrame {
    const o = parseOptions(prepareOptions, options, 'prepare() options');
    this.#requireOpen();
    forEachBuffer(description, (b) => {
      if (b.kind === 'host') throw new GpuringError('INVALID_ARGUMENT', 'prepare() takes device (cuda-ipc, cuda-pool) and absent buffers only: arena allocations belong to a single frame');
    });
    const body = encodeFrame(description);
    decodeFrame(body); // every check a consumer makes, with its codes
    const frame = new PreparedFrame(body, eventDevice(description, o.device), this.#headsUp, {
      plain: (tag, timeout) => this.#sendPrepared(prepared, tag, timeout),
      withEvent: (bytes, eventId, timeout, tag) => this.#sendDevice(bytes, { eventId }, timeout, tag),
      many: (bytes, eventId, count, tags, timeout) => this.#sendMany(bytes, { eventId, shares: { left: count } }, count, tags, timeout),
    });
    const prepared = callNative(() => this.#core.prepare(body)); // as the constructor left it: without an event
    return frame;
  }

  /** Frame ids as their memory is released, until the producer closes. */
  async *releases(): AsyncGenerator<number> {
    const queue: number[] = [];
    let wake: (() => void) | undefined;
    const onRelease = (id: number) => (queue.push(id), wake?.());
    const onClose = () => wake?.();
    this.#events.on('release', onRelease);
    this.#events.on('close', onClose);
    this.#watchReleases();
    try {
      while (!this.#closed || queue.length) {
        if (!queue.length) await new Promise<void>((r) => (wake = r));
        wake = undefined;
        while (queue.length) yield queue.shift()!;
      }
    } finally {
      this.#events.off('release', onRelease);
      this.#events.off('close', onClose);
      this.#watchReleases();
    }
  }

  /** Frames published and not yet released. */
  get inFlight(): number {
    return this.#inFlight;
  }

  /**
   * Resolves once every frame published so far has been released (its memory
   * is free again). Keeps the process alive while it waits. Rejects with
   * TIMEOUT after `timeout` ms (default: no limit), saying how many frames are
   * still out; with ABORTED when `signal` aborts; with CLOSED when the
   * producer closes meanwhile. A frame that stays out keeps its memory: a
   * wait that ends does not release anything.
   */
  async drain(options?: WaitOptions): Promise<void> {
    const o = parseOptions(waitOptions, options, 'drain() options');
    this.#requireOpen();
    if (this.#inFlight === 0) return;
    if (o.signal?.aborted) throw new GpuringError('ABORTED', 'drain() was aborted', { cause: o.signal.reason });
    this.#core.keepAlive(true);
    this.#draining++;
    this.#watchReleases();
    try {
      await new Promise<void>((resolve, reject) => {
        const settle = (error?: GpuringError) => {
          this.#events.off('close', onClose).off('drained', onDrained);
          o.signal?.removeEventListener('abort', onAbort);
          clearTimeout(timer);
          error ? reject(error) : resolve();
        };
        const onClose = () => settle(new GpuringError('CLOSED', 'the producer closed while draining'));
        const onDrained = () => settle();
        const onAbort = () => settle(new GpuringError('ABORTED', 'drain() was aborted', { cause: o.signal!.reason }));
        const late = () => settle(new GpuringError('TIMEOUT', `${this.#inFlight} frames still in flight after ${o.timeout} ms`));
        const timer = waitTimer(o.timeout, late);
        this.#events.once('close', onClose).once('drained', onDrained);
        o.signal?.addEventListener('abort', onAbort, { once: true });
      });
    } finally {
      this.#draining--;
      if (!this.#closed) (this.#core.keepAlive(false), this.#watchReleases());
    }
  }

  /**
   * `'release'` fires with a frame id when that frame's memory is free again,
   * on the event loop, from whichever call or wake-up learnt of it. A listener
   * that throws does not fail that call: its error becomes the process's
   * uncaught exception. A listener may close() the producer.
   */
  on(event: 'release', listener: (frameId: number) => void): this {
    releaseListener('on', event, listener);
    this.#events.on(event, listener);
    this.#watchReleases();
    return this;
  }

  /** Removes a listener added with on(). */
  off(event: 'release', listener: (frameId: number) => void): this {
    releaseListener('off', event, listener);
    this.#events.off(event, listener);
    this.#watchReleases();
    return this;
  }

  /**
   * Releases are watched as they happen only while someone waits for them
   * (drain(), a 'release' listener, releases()); otherwise the native core
   * reclaims released memory at each publish and every few milliseconds, so
   * that consumers' releases cost them no system call and wake no thread here.
   */
  #watchReleases(): void {
    const prompt = !this.#closed && (this.#draining > 0 || this.#events.listenerCount('release') > 0);
    if (prompt !== this.#prompt) (this.#prompt = prompt, this.#core.promptReleases(prompt));
  }

  /**
   * Leaves the ring. Frames already published stay deliverable; this producer's
   * arenas are removed once the last of them is released. After DETACHED (this
   * producer lost its entry, SPEC.md §4: every publish fails so) it succeeds
   * too, and removes its arenas at once, as no one else knows them.
   * This process lets go of the arenas at once: `allocate()` and `loan()`
   * buffers read zeros from then on, and writes to them go nowhere.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#core.close();
    this.#loose.clear();
    this.#uploads.freeIdle();
    this.#events.emit('close');
  }

  /** close(), for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }

  #requireOpen(): void {
    if (this.#closed) throw new GpuringError('CLOSED', 'the producer is closed');
  }

  #listen(): void {
    if (this.#listening) return;
    this.#listening = true;
    this.#core.onRelease((ids) => this.#released(ids));
  }

  /** Reports the frames the core reaped since the last report, asking it only when it has some. */
  #takeReleased(): void {
    if (this.#core.releasedCount[0] !== 0) this.#released(this.#core.takeReleased());
  }

  /** Bookkeeping for frames whose memory came back: device memory, events, listeners. */
  #released(ids: Float64Array): void {
    const devices = this.#deviceFrames.size > 0;
    for (const id of ids) {
      this.#inFlight--;
      const owned = devices && this.#deviceFrames.get(id);
      if (owned) (this.#deviceFrames.delete(id), this.#freeDevice(owned));
      this.#emitRelease(id);
    }
    if (ids.length && this.#inFlight === 0) this.#events.emit('drained');
  }

  /**
   * Calls each 'release' listener, as emit() would. A listener that throws
   * must not keep the listeners after it, nor the frames after this one, from
   * hearing of their releases, nor fail whichever call happened to reap them
   * (a publish() that did publish): its error is thrown on the next tick, the
   * process's uncaught exception, as Node does with errors nobody can catch.
   */
  #emitRelease(id: number): void {
    if (this.#events.listenerCount('release') === 0) return; // most reaps: no array copied
    for (const listener of this.#events.listeners('release') as ((frameId: number) => void)[]) {
      try {
        listener(id);
      } catch (error) {
        process.nextTick(() => {
          throw error;
        });
      }
    }
  }

  /**
   * publish() of a batch through its Schema's BatchWriter: its buffers copied into one
   * allocation and the body written from the stream's template, without a
   * description. Null when a buffer already lies in an unpublished allocation
   * of the caller (the describing path publishes that one without a copy),
   * when the buffers need more than one allocation (it splits them: #copyIn),
   * or when the writer cannot write it (a dictionary in chunks, which the
   * describing path refuses with its error).
   */
  #sendGathered(writer: BatchWriter, batch: RecordBatch, timeout: number, tag: bigint): number | Promise<number> | null {
    const total = writer.gather(batch);
    if (total < 0 || total > this.#core.largestAllocation) return null;
    // Only an unpublished allocation can hold a buffer to publish in place.
    if (this.#loose.size > 0) for (const part of writer.parts) if (part && this.#arenaIndex.has(part.buffer as ArrayBuffer)) return null;
    if (total === 0) return this.#sendBody(writer.body(0), [], timeout, tag);
    if (total <= STAGED_BYTES) {
      writer.copyTo(this.#staged, 0);
      return this.#sent([], () => this.#core.publishStaged(writer.body(0), this.#staged.bytes, total, tag, toNativeTimeout(timeout)));
    }
    const a = this.#allocate(total, true);
    writer.copyTo((this.#arenaSinks[a.arena] ??= new ByteSink(new Uint8Array(this.#arenaBuffer(a.arena)))), a.offset);
    return this.#sendBody(writer.body(a.offset, this.#arenaDescriptor(a.arena).handle), [a], timeout, tag);
  }

  /** Encodes and publishes; the id at once when the ring had space, else a promise of it. */
  #send(description: FrameDescription, used: Loose[], timeout: number, tag: bigint, layout?: object): number | Promise<number> {
    let body: Uint8Array;
    try {
      body = this.#encode(description, layout);
    } catch (error) {
      this.#unuse(used);
      throw error;
    }
    return this.#sendBody(body, used, timeout, tag);
  }

  /**
   * Encodes a description through a template (BodyTemplate; same bytes as
   * encodeFrame), so a stream of frames encodes its names, formats and
   * metadata once: with `layout` (the apache-arrow Schema it came from) that
   * layout's template, else the template of the last frame described to
   * publishFrame(), which a frame of another layout replaces.
   */
  #encode(description: FrameDescription, layout?: object): Uint8Array {
    const known = layout ? this.#templates.get(layout) : this.#lastLayout;
    const body = known?.fill(description, this.#scratch.take);
    if (body) return body;
    const [template, fresh] = BodyTemplate.encode(description, { holdArrays: layout !== undefined });
    if (layout) this.#templates.set(layout, template);
    else this.#lastLayout = template;
    return fresh;
  }

  /**
   * Publishes an encoded body that owns `used`: the id at once when the ring
   * had space (no promise on the hot path), else a promise of it.
   */
  #sendBody(body: Uint8Array, used: Loose[], timeout: number, tag: bigint): number | Promise<number> {
    const list = this.#allocationList(used);
    for (const a of used) this.#loose.delete(looseKey(a));
    return this.#sent(used, () => this.#core.publish(body, list, tag, toNativeTimeout(timeout)));
  }

  /**
   * A prepared frame published without an event: the same bytes every time,
   * of which the core keeps a checked copy, so it skips both the checks and
   * the allocation list. It holds nothing of ours to give back if it fails,
   * so it skips #sent() too: a hand-off's publish often runs on a CPU just
   * woken from sleep, where each JS function on the way costs about 1 µs
   * (publish call to the native publish 4.1 -> 2.4 µs p50 on the 2-core dev
   * box, eight alternated runs).
   */
  #sendPrepared(prepared: PreparedBody, tag: bigint, timeout: number): number | Promise<number> {
    let pending: number | Promise<number>;
    try {
      pending = this.#core.publishPrepared(prepared, tag, toNativeTimeout(timeout));
    } catch (error) {
      throw fromNative(error);
    }
    return typeof pending === 'number' ? this.#track(pending) : awaitNative(pending).then((id) => this.#track(id));
  }

  /** A native publish of a frame that owns `used`, tracked once in the ring; `used` is unsent again if it fails. */
  #sent(used: Loose[], publish: () => number | Promise<number>): number | Promise<number> {
    let pending: number | Promise<number>;
    try {
      pending = callNative(publish);
    } catch (error) {
      return this.#unsent(used, error);
    }
    if (typeof pending === 'number') return this.#track(pending);
    return awaitNative(pending).then((id) => this.#track(id), (error: unknown) => this.#unsent(used, error));
  }

  /** What publish() reads of `used`: arena, offset and length of each, read during the call (so one list serves every single-allocation frame). */
  #allocationList(used: Loose[]): Float64Array {
    if (used.length === 0) return NO_ALLOCATIONS;
    const list = used.length === 1 ? this.#oneAllocation : new Float64Array(3 * used.length);
    used.forEach((a, i) => ((list[3 * i] = a.arena), (list[3 * i + 1] = a.offset), (list[3 * i + 2] = a.length)));
    return list;
  }

  #track(id: number): number {
    this.#inFlight++;
    return id;
  }

  /** Not published: the allocations are ours (or the caller's) again. */
  #unsent(used: Loose[], error: unknown): never {
    for (const a of used) this.#loose.set(looseKey(a), a);
    this.#unuse(used);
    throw error;
  }

  /** Publishes a device frame; what it holds (memory, an event) is freed on release, or at once if it never went out. */
  #sendDevice(frame: FrameDescription | Uint8Array, owned: DeviceOwned, timeout: number, tag: bigint): number | Promise<number> {
    let sent: number | Promise<number>;
    try {
      sent = frame instanceof Uint8Array ? this.#sendBody(frame, [], timeout, tag) : this.#send(frame, [], timeout, tag);
    } catch (error) {
      this.#freeDevice(owned);
      throw error;
    }
    if (typeof sent === 'number') return this.#keepDevice(sent, owned);
    return sent.then(
      (id) => this.#keepDevice(id, owned),
      (error: unknown) => {
        this.#freeDevice(owned);
        throw error;
      },
    );
  }

  /** What a device frame holds is freed when it is released (host frames hold nothing). */
  #keepDevice(id: number, owned: DeviceOwned): number {
    if (owned.memory || owned.eventId >= 0) this.#deviceFrames.set(id, owned);
    return id;
  }

  /**
   * `count` frames of one body in one native call; ids in publication order.
   * If a frame waiting for space times out, the frames before it stay published
   * (and are tracked); the error is thrown once all have settled.
   */
  async #sendMany(body: Uint8Array, owned: DeviceOwned, count: number, tags: BigUint64Array | null, timeout: number): Promise<number[]> {
    this.#takeReleased();
    let results: [number, number, ...Promise<number>[]];
    try {
      results = callNative(() => this.#core.publishMany(body, count, tags, toNativeTimeout(timeout)));
    } catch (error) {
      this.#freeDevice(owned, count);
      throw error;
    }
    const holds = owned.eventId >= 0; // frames without an event hold nothing to free
    // Each frame is tracked the moment it is in the ring, not when the whole
    // batch is: its release may be reported while later frames still wait for
    // space, and device memory recorded after its release would never be freed.
    const track = (id: number) => (this.#inFlight++, holds && this.#deviceFrames.set(id, owned), id);
    const [first, atOnce, ...waiting] = results;
    const ids: number[] = [];
    for (let i = 0; i < atOnce; i++) ids.push(track(first + i));
    let failure: unknown;
    if (waiting.length)
      for (const r of await Promise.allSettled(waiting.map((p) => awaitNative(p).then(track))))
        if (r.status === 'fulfilled') ids.push(r.value);
        else failure ??= r.reason;
    if (holds && ids.length < count) this.#freeDevice(owned, count - ids.length);
    if (failure !== undefined) throw failure;
    if (ids.length < count && timeout === 0)
      throw new GpuringError('RING_FULL', `the ring took ${ids.length} of ${count} frames (ids ${ids.join(', ') || 'none'}); publish the rest when space comes free`);
    return ids;
  }

  /** Gives a frame's upload back for reuse (frees it once closed) and recycles its event, `frames` of the frames sharing it at a time. */
  #freeDevice(owned: DeviceOwned, frames = 1): void {
    if (owned.memory) (this.#closed ? owned.memory.free() : this.#uploads.giveBack(owned.memory));
    if (owned.shares && (owned.shares.left -= frames) > 0) return;
    if (owned.eventId >= 0) callNative(() => native().recycleEvent(owned.eventId));
  }

  /** Frees the allocations a failed publish made for itself; the caller's stay theirs. */
  #unuse(used: Loose[]): void {
    for (const a of used) {
      if (!a.internal || !this.#loose.delete(looseKey(a)) || this.#closed) continue;
      callNative(() => this.#core.free(a.arena, a.offset));
    }
  }

  #allocate(bytes: number, internal: boolean): Loose {
    const [arena, offset, length] = callNative(() => this.#core.allocate(bytes));
    const loose = { arena, offset, length, internal };
    this.#loose.set(looseKey(loose), loose);
    return loose;
  }

  #arenaBuffer(arena: number): ArrayBuffer {
    let ab = this.#arenas[arena];
    if (!ab) {
      ab = callNative(() => this.#core.arenaBuffer(arena));
      this.#arenas[arena] = ab;
      this.#arenaIndex.set(ab, arena);
    }
    return ab;
  }

  #arenaName(arena: number): string {
    return (this.#names[arena] ??= this.#core.arenaName(arena));
  }

  /** The descriptor of `bytes` if they already lie in an unpublished allocation of the caller (no copy). */
  #inPlace(bytes: Uint8Array, used: Loose[]): BufferDescriptor | undefined {
    const arena = this.#arenaIndex.get(bytes.buffer as ArrayBuffer);
    if (arena === undefined) return undefined;
    const a = [...this.#loose.values()].find((l) => !l.internal && l.arena === arena && bytes.byteOffset >= l.offset && bytes.byteOffset + bytes.length <= l.offset + l.length);
    if (!a) return undefined;
    if (!used.includes(a)) used.push(a);
    return this.#hostBuffer(arena, bytes.byteOffset, bytes.length);
  }

  /** Describes bytes in one of this producer's arenas without allocating handle bytes per buffer. */
  #hostBuffer(arena: number, offset: number, length: number): BufferDescriptor {
    return { ...this.#arenaDescriptor(arena), offset, length };
  }

  /** The descriptor every buffer in `arena` shares its handle and UUID arrays with (read only). */
  #arenaDescriptor(arena: number): BufferDescriptor {
    return (this.#arenaDescriptors[arena] ??= hostBuffer(this.#arenaName(arena), 0, 0));
  }

  /**
   * Copies a frame's remaining buffers into one allocation (one native call),
   * filling in their descriptors; into several, in order, where together they
   * exceed the largest allocation (an arena JS can be lent whole: 4 GiB under
   * Node.js 20). A single buffer larger than that is refused (UNSUPPORTED).
   */
  #copyIn(copies: PendingCopy[], used: Loose[]): void {
    const largest = this.#core.largestAllocation;
    for (let from = 0; from < copies.length; ) {
      let to = from;
      let total = 0;
      do total += align64(copies[to++]!.bytes.length);
      while (to < copies.length && total + align64(copies[to]!.bytes.length) <= largest);
      this.#copyInto(copies, from, to, total, used);
      from = to;
    }
  }

  /** #copyIn() of copies[from, to), which fit one allocation of `total` bytes. */
  #copyInto(copies: PendingCopy[], from: number, to: number, total: number, used: Loose[]): void {
    const a = this.#allocate(total, true);
    used.push(a);
    const arena = new Uint8Array(this.#arenaBuffer(a.arena));
    let at = a.offset;
    for (let i = from; i < to; i++) {
      const c = copies[i]!;
      arena.set(c.bytes, at);
      Object.assign(c.desc, this.#hostBuffer(a.arena, at, c.bytes.length));
      at += align64(c.bytes.length);
    }
  }
}

/** What a device frame holds until release: memory it uploaded, the event ordering it (shared by a batch's frames). */
interface DeviceOwned {
  memory?: DeviceBuffer;
  eventId: number;
  shares?: { left: number };
}

/** A buffer to be copied into the frame's allocation once all are known. */
interface PendingCopy {
  bytes: Uint8Array;
  desc: BufferDescriptor;
}

/** Memory ran out: /dev/shm or the last arena for host columns (NO_SPACE, OUT_OF_MEMORY), the device for an upload. */
const isMemoryShort = (error: unknown): boolean =>
  (error instanceof GpuringError && (error.code === 'NO_SPACE' || error.code === 'OUT_OF_MEMORY')) || isCudaOutOfMemory(error);

/** The error of a publish that waited for releases until its timeout: host memory NO_SPACE, device memory CUDA. */
function stillShort(short: GpuringError, unreleased: number): GpuringError {
  const code = short.code === 'CUDA' ? 'CUDA' : 'NO_SPACE';
  const cudaError = short.cudaError === undefined ? {} : { cudaError: short.cudaError };
  return new GpuringError(code, `${short.message}; ${unreleased} frames of this producer were still unreleased at the timeout`, cudaError);
}

/** on() and off() take 'release' and a function; anything else is a mistake to report, not to keep. */
function releaseListener(call: string, event: unknown, listener: unknown): void {
  if (event !== 'release') throw new GpuringError('INVALID_ARGUMENT', `${call}(): a Producer emits 'release' only, not ${String(event)}`);
  if (typeof listener !== 'function') throw new GpuringError('INVALID_ARGUMENT', `${call}('release') takes a function, not ${typeof listener}`);
}

const NO_ALLOCATIONS = new Float64Array(0);

/**
 * Flat frames whose columns take at most this many bytes are published in one
 * native call (publishStaged) instead of an allocate() and a publish(): a
 * second copy of the bytes, cheaper than the call it saves up to about here.
 */
const STAGED_BYTES = 8192;

/** Copies gathered column bytes one after another from `at`, each at a 64-byte boundary (as BatchWriter.body() places them). */
/** An allocation's key among the loose ones: arena indexes stay far below 2^12 and offsets below 2^40, so the number is exact. */
const looseKey = (a: { arena: number; offset: number }): number => a.arena * 2 ** 40 + a.offset;

function deferCopy(bytes: Uint8Array, copies: PendingCopy[]): BufferDescriptor {
  const desc = {} as BufferDescriptor; // filled in by #copyIn
  copies.push({ bytes, desc });
  return desc;
}
