/**
 * LeakWatch: ends for the user the lease of a Frame garbage-collected while
 * still leased (a missing release()), through a FinalizationRegistry.
 *
 * Why leases are held by number: V8 allocates a registry's cells in old space
 * and a cell keeps its held value alive until a full collection, even once
 * unregistered. A lease held there (a young object) therefore survived every
 * scavenge and was promoted: with one registered per sleeping wait (SpareFrame),
 * a consumer's scavenges copied ten times more and paused about twice as long
 * (dev box, frames 50 µs apart: 520-580 KB survived per scavenge against
 * 48-65 KB, pauses 1.9-2.6 ms against 0.85-1.06 ms). A small integer is no
 * object, so a dead cell keeps nothing alive: the cell holds the lease's
 * number, and the lease itself sits in a Map only until it ends.
 */
import type { Frame, Lease } from './frame.js';

/** Numbers stay below 2^30, V8's small-integer range, so that none is a heap object. */
const NUMBERS = 2 ** 30;

export class LeakWatch {
  readonly #registry = new FinalizationRegistry<number>((id) => this.#collected(id));
  readonly #leases = new Map<number, Lease>();
  readonly #rescue: (lease: Lease) => void;
  #next = 0;

  /** `rescue` ends the lease of a frame collected while watched. */
  constructor(rescue: (lease: Lease) => void) {
    this.#rescue = rescue;
  }

  /** Watches `frame`, whose lease is `lease`, until settle(). */
  watch(frame: Frame, lease: Lease): void {
    let id = this.#next;
    while (this.#leases.has(id)) id = (id + 1) % NUMBERS; // a lease that outlived 2^30 others
    this.#next = (id + 1) % NUMBERS;
    lease.watchId = id;
    this.#leases.set(id, lease);
    this.#registry.register(frame, id, frame);
  }

  /** The frame's lease ended: stops watching it, if watched. */
  settle(frame: Frame, lease: Lease): void {
    if (lease.watchId < 0) return;
    this.#leases.delete(lease.watchId);
    lease.watchId = -1;
    this.#registry.unregister(frame);
  }

  #collected(id: number): void {
    const lease = this.#leases.get(id);
    if (!lease) return;
    this.#leases.delete(id);
    this.#rescue(lease);
  }
}
