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
 * 16-24 KB now, pauses 1.9-2.6 ms against 0.7-0.9 ms). A small integer is no
 * object, so a dead cell keeps nothing alive: the cell holds the lease's
 * number (a small integer: far fewer leases are watched at once than 2^30),
 * and the lease itself sits in an array only until it ends.
 */
import type { Frame, Lease } from './frame.js';

export class LeakWatch {
  readonly #registry = new FinalizationRegistry<number>((id) => this.#collected(id));
  /** Leases by number; a number is reused once its lease ended (free), so neither array grows past the most watched at once. */
  readonly #leases: (Lease | undefined)[] = [];
  readonly #free: number[] = [];
  readonly #rescue: (lease: Lease) => void;

  /** `rescue` ends the lease of a frame collected while watched. */
  constructor(rescue: (lease: Lease) => void) {
    this.#rescue = rescue;
  }

  /** Watches `frame`, whose lease is `lease`, until settle(). */
  watch(frame: Frame, lease: Lease): void {
    const id = this.#free.pop() ?? this.#leases.length;
    this.#leases[id] = lease;
    lease.watchId = id;
    this.#registry.register(frame, id, frame);
  }

  /** The frame's lease ended: stops watching it, if watched. */
  settle(frame: Frame, lease: Lease): void {
    if (lease.watchId < 0) return;
    this.#registry.unregister(frame);
    this.#forget(lease.watchId);
    lease.watchId = -1;
  }

  #collected(id: number): void {
    const lease = this.#leases[id];
    if (!lease) return;
    this.#forget(id);
    this.#rescue(lease);
  }

  #forget(id: number): void {
    this.#leases[id] = undefined;
    this.#free.push(id);
  }
}
