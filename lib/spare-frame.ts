/**
 * SpareFrame: the Frame a sleeping next() resolves to, made before the
 * consumer sleeps.
 *
 * Why: after milliseconds of sleep every step of a wake-up runs on cold
 * caches, and calling from the native core into JS to make the Frame was the
 * largest step between the wake-up and next() resolving. The core writes each
 * record it hands over singly at the next offset of its current chunk, which it
 * shares (ConsumerCore.recordCursor); so JS makes the Frame over that offset
 * ahead of time and passes it to wait(). The core hands that Frame over (to a
 * wait, or to tryNext()) when the record lands exactly there (same chunk,
 * same offset), and otherwise (a new chunk) has JS make one as before. One
 * record never gets two Frames: only the core decides.
 *
 * Ownership: the core holds the spare strongly while a request waits and
 * weakly otherwise; JS only weakly. So a Frame the core handed over is its
 * user's alone (collected when they drop it), and a spare nobody used may be
 * collected between waits. Except for a blocked wait (nextSync()): a WeakRef
 * keeps its target alive until the running job ends, which a thread looping
 * on nextSync() never lets happen, so every spare it made would stay (about
 * 0.3 KB a frame, until the loop yields). There JS holds the spare strongly
 * and the core none: the call returns `true` when the record landed in the
 * spare (takeHeld()), which spares the wake-up a reference to read and drop.
 * No JS runs when the core hands a spare over, so
 * its lease is watched for collection from the start rather than from the next
 * turn of the event loop, as other frames' are; its pos lives in a cell the
 * core writes when it hands the Frame over (-1 until then), so a spare
 * collected unused releases nothing, whatever record later lands where it was.
 * The cells are one array shared with the core (SpareCells), indexed by the
 * lease's number in the LeakWatch: no typed array per spare, and a hand-over
 * writes a number instead of calling into V8 for one.
 */
import type { DeviceMappings } from './device-mappings.js';
import { Frame, type FrameSource, type Lease } from './frame.js';
import type { LeakWatch } from './leak-watch.js';

/** The spares' pos cells, shared with the native core: element i belongs to the lease watched as number i. */
class SpareCells {
  #cells = new Float64Array(0);
  readonly #share: (cells: Float64Array) => void;

  constructor(share: (cells: Float64Array) => void) {
    this.#share = share;
  }

  /** Cell `id` set to -1 (not handed over), the cells grown (and shared again) first if too few. */
  clear(id: number): void {
    if (id >= this.#cells.length) {
      // An ArrayBuffer of its own: the core keeps a pointer to its memory, which V8 never moves.
      const grown = new Float64Array(new ArrayBuffer(8 * Math.max(16, 2 * this.#cells.length, id + 1)));
      grown.set(this.#cells);
      this.#cells = grown;
      this.#share(grown);
    }
    this.#cells[id] = -1;
  }

  pos(id: number): number {
    return id < 0 ? -1 : this.#cells[id]!;
  }
}

class SpareLease implements Lease {
  watchId = -1;
  devices?: DeviceMappings;
  readonly #cells: SpareCells;

  constructor(cells: SpareCells) {
    this.#cells = cells;
  }

  /** The frame's pos while its lease is watched: written by the core when it hands the Frame over; -1 until then. */
  get pos(): number {
    return this.#cells.pos(this.watchId);
  }
}

/** Whether a watched lease's frame never got its record (a spare Frame the core did not hand over): nothing to release. */
export const neverDelivered = (lease: Lease): boolean => lease.pos < 0;

/** What wait() is offered: the Frame, its offset in the chunk, its pos cell. */
export type Spare = [frame: Frame, at: number, cell: number];

export class SpareFrame {
  readonly #cursor: Float64Array;
  readonly #source: FrameSource;
  readonly #watch: LeakWatch;
  readonly #cells: SpareCells;
  /** The chunk JS holds (the last one the core handed over), and its serial. */
  #chunk: DataView | undefined;
  #serial = -1;
  /** The last spare made, at #at, unless it was collected: weakly, or (for a blocked wait, not yet handed over) strongly. */
  #last: WeakRef<Frame> | undefined;
  #held: Frame | undefined;
  #lastLease: SpareLease | undefined;
  #at = -1;

  /** `shareCells` gives the core the array of pos cells (ConsumerCore.spareCells). */
  constructor(cursor: Float64Array, source: FrameSource, watch: LeakWatch, shareCells: (cells: Float64Array) => void) {
    this.#cursor = cursor;
    this.#source = source;
    this.#watch = watch;
    this.#cells = new SpareCells(shareCells);
  }

  /** The core handed over a new chunk (records it gives as offsets are in it from now on). */
  chunkReceived(chunk: DataView): void {
    this.#chunk = chunk;
    this.#serial = this.#cursor[0]!;
    this.#last = this.#held = undefined;
  }

  /**
   * The spare for a wait (`blocked`: a nextSync()): the last one if still
   * where the next record goes, else a new one; undefined where JS holds no
   * chunk the core writes to.
   */
  forWait(blocked = false): Spare | undefined {
    const chunk = this.#chunk;
    const at = this.#cursor[1]!;
    if (!chunk || this.#cursor[0] !== this.#serial || at >= chunk.byteLength) return undefined;
    // A record written at #at moves the cursor past it: a spare still at the
    // cursor was never handed over (its lease is watched, its cell -1).
    const last = this.#at === at ? (this.#held ?? this.#last?.deref()) : undefined;
    if (last) return this.#keep(last, at, this.#lastLease!, blocked);
    const lease = new SpareLease(this.#cells);
    const frame = new Frame(chunk, at, this.#source, lease);
    this.#watch.watch(frame, lease);
    this.#cells.clear(lease.watchId);
    return this.#keep(frame, at, lease, blocked);
  }

  /** The core handed `frame`, a spare, over: if it is the one held for a blocked wait, it is its user's now. */
  handedOver(frame: Frame): void {
    if (frame === this.#held) this.#held = undefined;
  }

  /** A blocked wait's record landed in the spare JS holds for it (nextSync() returned `true`): that Frame, its user's now. */
  takeHeld(): Frame {
    const frame = this.#held!;
    this.#held = undefined;
    return frame;
  }

  #keep(frame: Frame, at: number, lease: SpareLease, strongly: boolean): Spare {
    this.#held = strongly ? frame : undefined;
    if (!strongly && this.#last?.deref() !== frame) this.#last = new WeakRef(frame);
    this.#lastLease = lease;
    this.#at = at;
    return [frame, at, lease.watchId];
  }
}
