import { Frame, type FrameSource, type Lease, recordLength } from './frame.js';
import { type Arena, ArenaWindows } from './arena-windows.js';
import { handleName } from './codec/description.js';
import { warmUpReceivePath } from './code-warm-up.js';
import { FrameLayouts } from './arrow/frame-layout.js';
import { LeakWatch } from './leak-watch.js';
import { neverDelivered, SpareFrame } from './spare-frame.js';
import { ConsumerFrames } from './consumer-frames.js';
import { type FrameErrorHandler, type FrameHandler, FrameListener } from './frame-listener.js';
import { callNative, fromNative, GpuringError } from './errors.js';
import { native, type NativeConsumerCore, type ReceivedRecord } from './native.js';
import { batchOptions, consumerOptions, nextOptions, onSlowPolicy, openFlags, parseOptions, parseSegmentName, syncBatchOptions, syncNextOptions, toNativeTimeout } from './options.js';

const MAX_CACHED_ARENAS = 256;
/** Where #release() queues the end of its job (see there). */
const SETTLED = Promise.resolve();
/** Frames handed out since the last leak-watch pass; a loop that never yields to the event loop passes here. */
const MAX_UNWATCHED = 1024;
/**
 * Milliseconds between a frame being handed out and the pass that watches it
 * for leaks if it is still unreleased: a frame released sooner costs no
 * FinalizationRegistry entry, and one timer serves every frame of the interval
 * (a timer or immediate per frame would cost a sleeping consumer's wake-up more
 * than the rest of its JS).
 */
const LEAK_WATCH_MS = 50;

/** Options of Consumer.open(): openTimeout, anyOwner, sweepInterval. */
export type ConsumerOptions = Partial<typeof consumerOptions._input>;
/** Options of next(). */
export type NextOptions = {
  /**
   * Milliseconds to wait for a frame (default: no limit): TIMEOUT after that,
   * unless a frame is ready when the consumer next runs (an event loop held up
   * past the deadline still gets the frame that waited).
   */
  timeout?: number;
  /** Aborts the wait with ABORTED; no frame is lost. */
  signal?: AbortSignal;
  /** Microseconds to busy-poll the ring before sleeping (default 0), blocking the event loop meanwhile. */
  spin?: number;
};
/** Options of nextSync(): next()'s but `signal` (nothing can run to abort a blocked thread). */
export type SyncNextOptions = Omit<NextOptions, 'signal'>;
/** Options of nextBatch(): next()'s, and `max`. */
export type BatchOptions = NextOptions & {
  /** Frames to take at most (default 1024: every frame a ring of the default 1024 slots can hold). */
  max?: number;
};
/** Options of nextBatchSync(): nextBatch()'s but `signal`. */
export type SyncBatchOptions = Omit<BatchOptions, 'signal'>;
type NextParsed = { timeout: number; signal?: AbortSignal | undefined; spin: number };

/**
 * Takes frames from a ring. Each frame goes to exactly one consumer.
 *
 * Ordering: frames are taken in publication order (per ring, across all
 * producers), except that a frame handed back (its consumer died before its
 * user received it, or an iteration stopped with frames still buffered) is
 * redelivered later. Waiting requests are served in the order they were made.
 *
 * Waking: a consumer that finds the ring empty sleeps on its doorbell, a socket
 * that Node's event loop polls (SPEC.md §6.1): a producer's publish wakes the
 * loop directly, with no thread in between; a busy stream costs no system call
 * at all. Producers ring at the start of a publish (a heads-up), so the
 * wake-up overlaps the publish; a consumer woken before its frame is READY
 * polls the ring for up to 20 µs on the event loop, then sleeps again and is
 * rung again. In a busy stream (its last frame came less than 20 µs ago) a
 * consumer on a work-queue ring also polls up to 20 µs before it sleeps, and
 * on while other consumers keep taking frames (until none was taken for
 * 20 µs, 200 µs at most), where it may run on 4 or more CPUs, so that the
 * producer need not ring it for every frame. Otherwise neither the event loop nor the libuv thread pool is
 * ever blocked (except by `next({ spin })` and `nextSync()`, on request). A pending `next()` or an active
 * `listen()` keeps the process alive; an idle consumer does not, and its leases are released when the
 * process exits even if `close()` was never called.
 */
export class Consumer implements AsyncIterable<Frame> {
  /** The ring's name. */
  readonly name: string;
  readonly #core: NativeConsumerCore;
  readonly #arenas = new Map<string, Arena>();
  /** The core's arenasTakenBack when #arenas was last valid. */
  #arenasTakenBack = 0;
  readonly #layouts = new FrameLayouts();
  readonly #source: FrameSource;
  /** What the core turns each record a wait() gets into; it holds this only weakly. */
  readonly #receivedByCore: (record: ReceivedRecord) => Frame;
  /**
   * Frames collected while still leased would hold their slots forever: one such
   * frame stops the whole ring a lap later (slots come free in order). Their
   * leases are ended for them, with a warning: the bug is the missing release().
   * Registering costs more than the rest of a frame's hand-over, so frames are
   * watched from the next turn of the event loop: most are released by then
   * and never need it. Spare frames (SpareFrame) are the exception: no JS runs
   * when the core hands one over, so each is registered when made, before the
   * consumer sleeps. LeakWatch says why leases are registered by number.
   */
  readonly #unreleased = new LeakWatch((lost) => this.#rescue(lost));
  readonly #unwatched: Frame[] = [];
  #watchPass: NodeJS.Timeout | undefined;
  /** The chunk the native core writes single records into (ReceivedRecord), as a view. */
  #chunk: DataView;
  /** What a sleeping wait() resolves to when its record lands where expected. */
  readonly #spare: SpareFrame;
  #closed = false;
  /** The last `for await` loop's number (ConsumerFrames): the core ends its waits by it. */
  #iterations = 0;
  /** The listener frames go to, if any (listen()). */
  #listener: FrameListener | undefined;

  private constructor(name: string, core: NativeConsumerCore, received: (record: ReceivedRecord) => Frame) {
    this.name = name;
    this.#core = core;
    this.#receivedByCore = received;
    this.#source = {
      segment: name,
      arena: (arenaName) => this.#arena(arenaName),
      release: (pos) => this.#release(pos),
      handBack: (pos) => callNative(() => this.#core.handBack(pos)),
      fastTable: (body, frame) => this.#layouts.table(body, frame, this.#arenaOfHandle),
      settle: (frame, lease) => this.#unreleased.settle(frame, lease),
      releaseAfter: (pos, device, stream, mappings) => callNative(() => this.#core.releaseAfter(pos, device, stream, mappings)),
    };
    this.#spare = new SpareFrame(core.recordCursor, this.#source, this.#unreleased, (cells) => core.spareCells(cells));
    this.#chunk = new DataView(core.recordChunk);
    this.#spare.chunkReceived(this.#chunk);
  }

  /** Joins ring `name` as a consumer; like Producer.open(), compiles the decoder on a sample frame held in memory. */
  static open(name: string, options?: ConsumerOptions): Consumer {
    const n = parseSegmentName(name);
    const o = parseOptions(consumerOptions, options, 'consumer options');
    // The core settles a wait() with the Frame (or the GpuringError) itself, so
    // that a sleeping next() resumes its caller one microtask after the wake-up.
    const received = (record: ReceivedRecord): Frame => consumer.#received(record);
    const core = callNative(() => new (native().ConsumerCore)(n, o.openTimeout, o.sweepInterval, openFlags(o), received, fromNative, onSlowPolicy(o), o.start === 'oldest'));
    const consumer: Consumer = new Consumer(n, core, received);
    warmUpReceivePath();
    return consumer;
  }

  /** This consumer's participant index in the ring. */
  get index(): number {
    return this.#core.index;
  }

  /** True once close() was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /**
   * When this consumer last woke from sleep (its doorbell rang, or a timeout
   * or sweep tick passed): CLOCK_MONOTONIC in nanoseconds, as `process.hrtime.bigint()`
   * reads it, in any process; 0n before the first. For latency breakdowns: a
   * frame's hand-off is publish -> wake-up -> next() resolving.
   */
  get lastWake(): bigint {
    return this.#core.wokenAt();
  }

  /** A frame if one is waiting, else null. Never waits. */
  tryNext(): Frame | null {
    this.#requireOpen();
    const record = callNative(() => this.#core.tryNext());
    return record === null ? null : this.#received(record);
  }

  /**
   * The next frame. Rejects with TIMEOUT after `timeout` ms, ABORTED when
   * `signal` aborts, CLOSED when the consumer closes, FRAME_INVALID /
   * FRAME_BOUNDS / ARENA_INVALID when the frame is malformed (it is then
   * dropped, and the next call goes on with the following frame); DETACHED
   * when this consumer lost its entry in the ring (SPEC.md §4): every later
   * call fails the same way, so close() it and open a new one.
   * With `spin: µs` it first busy-polls for up to that long on this thread
   * (the event loop is blocked meanwhile), then waits as usual.
   */
  next(options?: NextOptions): Promise<Frame> {
    // Not async: each async layer between the core's promise and the caller
    // would cost the wake-up a microtask or three.
    try {
      return this.#next(parseOptions(nextOptions, options, 'next() options'));
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * next(), with the calling thread blocked until the frame comes: it sleeps on
   * the consumer's doorbell word in shared memory itself (a futex, SPEC.md
   * §6.1), so a producer's ring wakes it in one hop with nothing of the event
   * loop's in between (no callback, promise or microtask), and as soon as a
   * byte down the doorbell's pipe would: the quickest way for a sleeping
   * consumer to get a frame. Producers of wire format 2.2 and older ring the
   * socket instead; the thread then finds their frames at its 50 ms looks.
   * Throws what next() rejects with: TIMEOUT after `timeout` ms (default:
   * never), and the rest alike; UNSUPPORTED while a next() of this consumer
   * waits (it would be overtaken).
   *
   * Meant for a worker thread that does nothing but consume: nothing else
   * runs on the thread meanwhile (timers, I/O, messages, promise callbacks,
   * JS signal handlers). `worker.terminate()` and `process.exit()` still end
   * it: a blocked thread looks every 50 ms whether Node is stopping it, and
   * then returns without a frame (no JS runs after). Frames are the same as
   * next()'s: leased until released. The space their releases owe producers
   * (SPEC.md §6, Coalescing) is sent at the next call, not at the end of the
   * job, when a thread never yields.
   */
  nextSync(options?: SyncNextOptions): Frame {
    const o = parseOptions(syncNextOptions, options, 'nextSync() options');
    this.#requireOpen();
    const spare = this.#spare.forWait(true);
    const timeout = toNativeTimeout(o.timeout);
    // Called here, not through callNative(): each JS frame between the native
    // return and the caller is one more step on caches the sleep emptied
    // (about 1 µs of the 6 µs that return took with caches evicted, 2-core VM).
    let record: ReturnType<NativeConsumerCore['nextSync']>;
    try {
      record = spare ? this.#core.nextSync(timeout, o.spin, spare[1], spare[2]) : this.#core.nextSync(timeout, o.spin);
    } catch (error) {
      throw fromNative(error);
    }
    return record === true ? this.#spare.takeHeld() : this.#received(record);
  }

  /** Throws synchronously; with a signal, an async wait that cancels on abort. */
  #next(o: NextParsed): Promise<Frame> {
    this.#requireOpen();
    if (o.signal) return this.#nextAbortable(o, o.signal);
    const ready = this.#ready(o);
    if (ready) return Promise.resolve(ready);
    return this.#wait(o)[1] as Promise<Frame>;
  }

  /** A native wait (request id, promise), offered the spare Frame (SpareFrame); `iteration`: see ConsumerFrames. */
  #wait(o: NextParsed, iteration = 0): [number, Promise<unknown>] {
    const spare = this.#spare.forWait();
    const timeout = toNativeTimeout(o.timeout);
    if (!spare) return callNative(() => this.#core.wait(timeout, iteration));
    // A loop's wait settles with this result when its frame lands in the spare: made now, not after the wake-up.
    const result = iteration ? { value: spare[0], done: false } : undefined;
    return callNative(() => this.#core.wait(timeout, iteration, ...spare, result));
  }

  async #nextAbortable(o: NextParsed, signal: AbortSignal): Promise<Frame> {
    if (signal.aborted) throw new GpuringError('ABORTED', 'the wait for a frame was aborted', { cause: signal.reason });
    const ready = this.#ready(o);
    if (ready) return ready;
    const [request, promise] = this.#wait(o);
    const abort = () => this.#core.cancel(request);
    signal.addEventListener('abort', abort, { once: true });
    try {
      return (await promise) as Frame;
    } finally {
      signal.removeEventListener('abort', abort);
    }
  }

  /** A frame ready now, after spinning up to `o.spin` µs for one; else null. */
  #ready(o: NextParsed): Frame | null {
    const record = callNative(() => this.#core.tryNext(Math.min(o.spin, o.timeout * 1000)));
    return record === null ? null : this.#received(record);
  }

  /**
   * Every frame ready now (at least one: waits for the first as `next()` does),
   * up to `max` (default 1024), in order, from one native call per wake-up.
   * Each frame is leased and must be released. A malformed frame met after
   * good ones is dropped and reported by the next call.
   */
  async nextBatch(options?: BatchOptions): Promise<Frame[]> {
    const o = parseOptions(batchOptions, options, 'nextBatch() options');
    this.#requireOpen();
    const ready = this.#takeReady(o.max);
    if (ready.length) return ready;
    return this.#batchFrom(await this.#next(o), o.max);
  }

  /** nextBatch(), with the calling thread blocked until the first frame comes, as in nextSync(). */
  nextBatchSync(options?: SyncBatchOptions): Frame[] {
    const o = parseOptions(syncBatchOptions, options, 'nextBatchSync() options');
    this.#requireOpen();
    const ready = this.#takeReady(o.max);
    if (ready.length) return ready;
    return this.#batchFrom(this.nextSync({ timeout: o.timeout, spin: o.spin }), o.max);
  }

  /** `first`, and the frames ready after it, `max` in all. */
  #batchFrom(first: Frame, max: number): Frame[] {
    if (max === 1 || this.#closed) return [first];
    return [first, ...this.#takeReady(max - 1, true)];
  }

  /**
   * Frames ready now, up to `max`, from one native call and one buffer. `after`:
   * the caller holds frames of this batch already, so an error (frames missed,
   * a damaged frame) waits for the next call rather than cost it them.
   */
  #takeReady(max: number, after = false): Frame[] {
    this.#watchIfDue();
    const ready = callNative(() => this.#core.tryNextMany(max, after));
    if (!ready) return [];
    const [records, used] = ready;
    const view = new DataView(records);
    const frames: Frame[] = [];
    for (let at = 0; at < used; at += recordLength(view, at))
      frames.push(this.#frame(view, at));
    return frames;
  }

  /**
   * Frames until the consumer closes, in the consumer's order. Release each
   * frame when done with it. A sleeping loop gets the frame that woke it at
   * once; the frames ready behind it are then taken in one native call, when
   * the loop asks for the next. Those not yet yielded when the loop stops
   * (`break`, `return`, a throw) go back to the ring for any consumer, never
   * lost and never seen twice. The loop ends when the consumer closes; any
   * other error (DETACHED, FRAMES_MISSED, a damaged frame) is thrown out of it.
   */
  [Symbol.asyncIterator](): AsyncIterableIterator<Frame> {
    const o = parseOptions(batchOptions, undefined, 'iteration options');
    const iteration = (this.#iterations = (this.#iterations % 0xffffffff) + 1);
    return new ConsumerFrames(
      {
        closed: () => this.#closed,
        takeReady: (max) => this.#takeReady(max),
        wait: () => this.#wait(o, iteration)[1] as Promise<IteratorResult<Frame>>,
        stopWaits: () => {
          if (!this.#closed) this.#core.cancelIteration(iteration);
        },
      },
      o.max,
    );
  }

  /**
   * Hands every frame to `onFrame` as it comes, in the consumer's order, until
   * the returned FrameListener is stopped or the consumer closes. The handler
   * is called from the event loop's wake-up itself, with no promise or
   * microtask in between: the quickest way for a consumer asleep on the event
   * loop to run code on a frame. Each frame is leased to the handler as
   * next()'s are: release it, now or later.
   *
   * - The first call comes from a later turn of the event loop, never from
   *   within listen(). A wake-up hands over every frame ready then (up to
   *   1024; then timers and I/O run, and the next turn goes on), one call
   *   each, in order.
   * - While listening, next(), nextSync(), tryNext(), nextBatch() and `for
   *   await` throw (or reject with) UNSUPPORTED: they would overtake the
   *   listener's frames. listen() throws UNSUPPORTED while a next() waits or
   *   another listener is active.
   * - What taking a frame failed with goes to `onError`: FRAME_INVALID,
   *   FRAME_BOUNDS or ARENA_INVALID (the malformed frame is dropped),
   *   FRAMES_MISSED and EVICTED (a broadcast subscriber fell behind); frames
   *   keep coming after each. DETACHED (this consumer lost its entry, SPEC.md
   *   §4) ends the listening first. Without `onError` the error is thrown
   *   from the event loop as an uncaught exception, as an 'error' event
   *   without a listener is.
   * - A throw from `onFrame` is an uncaught exception too, as a throwing event
   *   listener's is; the listener goes on with the next frame.
   * - A listener keeps the process alive, as a listening server does,
   *   until stopped; close() ends it.
   */
  listen(onFrame: FrameHandler, onError?: FrameErrorHandler): FrameListener {
    this.#requireOpen();
    const listener = new FrameListener(() => {
      if (!this.#closed) this.#core.unlisten();
    });
    const deliver = (record: ReceivedRecord | undefined, error?: unknown): void => {
      if (record !== undefined) return onFrame(this.#received(record));
      const failure = fromNative(error) as GpuringError;
      if (failure.code === 'DETACHED') listener.stop();
      if (!onError) throw failure;
      onError(failure);
    };
    callNative(() => this.#core.listen(deliver, () => this.#spare.forWait(), onFrame));
    this.#listener = listener;
    return listener;
  }

  /**
   * Leaves the ring: frames still leased are released, waits reject with
   * CLOSED. After DETACHED it succeeds too, touching nothing of the entry.
   * The arenas this consumer mapped are let go at once: tables and column
   * views of its frames read zeros from then on.
   */
  close(): void {
    if (this.#closed) return;
    this.#listener?.stop();
    this.#closed = true;
    this.#core.close();
    this.#arenas.clear();
    if (this.#watchPass) clearTimeout(this.#watchPass);
    this.#unwatched.length = 0;
  }

  /** close(), for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }

  #requireOpen(): void {
    if (this.#closed) throw new GpuringError('CLOSED', 'the consumer is closed');
  }

  /**
   * One mapping per arena, reused across frames. Producers come and go, so the
   * cache is bounded; a Table keeps its own mapping alive after eviction. The
   * core lets go of the arenas of producers that left (they then read zeros),
   * and the cache starts afresh: a name may come back with a new file. An
   * arena too large to lend whole is read through windows (ArenaWindows).
   */
  #arena(name: string): Arena {
    if (this.#core.arenasTakenBack[0] !== this.#arenasTakenBack) {
      this.#arenasTakenBack = this.#core.arenasTakenBack[0]!;
      this.#arenas.clear();
    }
    let arena = this.#arenas.get(name);
    if (!arena) {
      if (this.#arenas.size >= MAX_CACHED_ARENAS) this.#arenas.clear();
      const opened = callNative(() => this.#core.openArena(name));
      arena = typeof opened === 'number' ? new ArenaWindows(opened, native().lendLimit(), (start, length) => callNative(() => this.#core.openArenaWindow(name, start, length))) : opened;
      this.#arenas.set(name, arena);
    }
    return arena;
  }

  /** #arena() by a buffer's 64-byte handle (FrameLayout's ArenaResolver), made once rather than per toTable(). */
  readonly #arenaOfHandle = (handle: Uint8Array): Arena => this.#arena(handleName(handle));

  /** A record the native core wrote into its chunk: at an offset in the one we hold, or first in a new one. */
  #received(record: ReceivedRecord): Frame {
    this.#watchIfDue();
    if (typeof record === 'number') return this.#frame(this.#chunk, record);
    if (!(record instanceof ArrayBuffer)) {
      this.#spare.handedOver(record as Frame); // a spare, made before the wait (SpareFrame)
      return record as Frame;
    }
    this.#chunk = new DataView(record);
    this.#spare.chunkReceived(this.#chunk);
    return this.#frame(this.#chunk, 0);
  }

  /** The record at `at` of `records` (see ReceivedRecord); the native core validated its body. */
  #frame(records: DataView, at: number): Frame {
    const frame = new Frame(records, at, this.#source);
    this.#unwatched.push(frame);
    this.#watchPass ??= setTimeout(() => this.#watch(), LEAK_WATCH_MS).unref();
    return frame;
  }

  /**
   * Runs the leak-watch pass early when many frames went out since the last
   * (a loop that never yields to the event loop). Called before a call hands
   * out frames, never while it makes them: a pass then would find every frame
   * of the batch in the making leased and register each.
   */
  #watchIfDue(): void {
    if (this.#unwatched.length >= MAX_UNWATCHED) this.#watch();
  }

  /** Registers the frames handed out since the last pass that are still leased. */
  #watch(): void {
    if (this.#watchPass) (clearTimeout(this.#watchPass), (this.#watchPass = undefined));
    for (const frame of this.#unwatched) {
      const lease = frame.heldLease();
      if (lease) this.#unreleased.watch(frame, lease);
    }
    this.#unwatched.length = 0;
  }

  /**
   * Ends a lease. A producer waiting for space is woken once for the releases
   * of this job, when it ends (SPEC.md §6, Coalescing), not at the first of a
   * batch: woken there, it found one free slot, filled it and slept again.
   * The end of the job is a microtask on a settled promise, not queueMicrotask(),
   * which makes an AsyncResource per call: a consumer taking one frame per job
   * (asleep between frames) made 320 B of garbage per frame there, of about 3.8 KB
   * in all (dev box, sampled heap profile).
   */
  #release(pos: number): void {
    if (callNative(() => this.#core.release(pos)) && !this.#notifyQueued) {
      // One at a time: a thread looping on nextSync() never lets a microtask
      // run, and one queued per frame would pile up until it yields (nextSync()
      // sends what is owed itself, before it takes the next frame or sleeps).
      this.#notifyQueued = true;
      SETTLED.then(this.#notifySpace);
    }
  }

  #notifyQueued = false;
  readonly #notifySpace = (): void => {
    this.#notifyQueued = false;
    if (this.#core.spaceOwed[0] !== 0 && !this.#closed) this.#core.notifySpace();
  };

  #rescue(lease: Lease): void {
    // Closing released every lease already; a spare frame's record may never have come.
    if (this.#closed || neverDelivered(lease)) return;
    const { pos, devices } = lease;
    try {
      devices?.releaseAll();
      this.#release(pos);
    } catch {
      return; // no longer ours (the consumer detached meanwhile)
    }
    process.emitWarning(
      `gpuring: a Frame of ring '${this.name}' was garbage-collected without release(); its lease was ended for it. ` +
        'Release every frame (or take it with `using`): until then it held its slot, and tables made from it may now see the producer reuse their memory.',
      { code: 'GPURING_FRAME_LEAKED' },
    );
  }
}
