/**
 * Frame: one record batch received from a ring.
 *
 * Ownership: from the moment `consumer.next()` resolves, this process holds a
 * lease on the frame; the producer will not reuse its memory until the lease
 * ends. The lease ends with `release()` (or `[Symbol.dispose]`, so `using`
 * works), when the consumer closes, or when this process dies. After release,
 * tables from `toTable()` still point at the producer's memory, which it may
 * overwrite at any time: copy what you keep (e.g. `tableFromIPC(tableToIPC(t))`)
 * before releasing.
 */
import type { Schema, Table } from 'apache-arrow';
import type { BufferDescriptor, FrameDescription } from './codec/description.js';
import { handleName } from './codec/description.js';
import { schemaOfFrame, tableFromFrame } from './arrow/table-reader.js';
import { GpuringError } from './errors.js';

/** What a Frame needs from its consumer: mapped arenas and the release call. */
export interface FrameSource {
  arena(name: string): ArrayBuffer;
  release(pos: number): void;
}

export class Frame implements Disposable {
  /** Producer-assigned id, unique per producer. */
  readonly id: number;
  /** Participant index of the producer. */
  readonly producer: number;
  /** The number the producer attached to the frame. */
  readonly tag: bigint;
  /** The decoded, validated frame body. */
  readonly description: FrameDescription;
  readonly #pos: number;
  readonly #source: FrameSource;
  #released = false;

  /** @internal */
  constructor(init: { id: number; producer: number; tag: bigint; pos: number; description: FrameDescription; source: FrameSource }) {
    this.id = init.id;
    this.producer = init.producer;
    this.tag = init.tag;
    this.description = init.description;
    this.#pos = init.pos;
    this.#source = init.source;
  }

  get numRows(): number {
    return this.description.rowCount;
  }

  get schema(): Schema {
    return schemaOfFrame(this.description);
  }

  get released(): boolean {
    return this.#released;
  }

  /** The frame as an apache-arrow Table whose buffers are the producer's memory (no copy). */
  toTable(): Table {
    if (this.#released) throw new GpuringError('FRAME_STATE', 'the frame was released; its memory belongs to the producer again');
    return tableFromFrame(this.description, (b) => this.#resolve(b));
  }

  /** Ends the lease. Calling it again does nothing. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#source.release(this.#pos);
  }

  [Symbol.dispose](): void {
    this.release();
  }

  #resolve(b: BufferDescriptor): Uint8Array {
    if (b.kind !== 'host') throw new GpuringError('UNSUPPORTED', `buffers of memory kind '${b.kind}' cannot be mapped by this build`);
    const arena = this.#source.arena(handleName(b.handle));
    if (b.offset + b.length > arena.byteLength)
      throw new GpuringError('FRAME_BOUNDS', `a buffer [${b.offset}, +${b.length}) lies outside its ${arena.byteLength}-byte arena`);
    return new Uint8Array(arena, b.offset, b.length);
  }
}
