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
 *
 * Device frames (cuda-ipc buffers): `toTable()` copies each buffer to the host,
 * on the device after the producer's event (no host wait for the producer's
 * GPU work). Each allocation is mapped once per process and the frame holds a
 * reference to its mappings until release.
 */
import type { Schema, Table } from 'apache-arrow';
import type { BufferDescriptor, FrameDescription } from './codec/description.js';
import { handleName } from './codec/description.js';
import { schemaOfFrame, tableFromFrame } from './arrow/table-reader.js';
import { deviceOrdinalOf } from './device-buffer.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

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
  /** Device allocations this frame mapped (IpcHandleCache references), by handle. */
  readonly #mapped = new Map<string, { handle: Uint8Array; device: number; base: bigint; bytes: number }>();

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

  /**
   * Copies a device buffer to host memory, ordered after the producer's event
   * on the device. The allocation is mapped once per process (IpcHandleCache)
   * and referenced by this frame until it is released.
   */
  #copyFromDevice(b: BufferDescriptor): Uint8Array {
    const key = `${Buffer.from(b.handle).toString('hex')}:${b.allocationId}`;
    let m = this.#mapped.get(key);
    if (!m) {
      const device = deviceOrdinalOf(b.deviceUuid);
      const { base, bytes } = callNative(() => native().ipcAcquire(b.handle, b.allocationId, device));
      m = { handle: b.handle, device, base, bytes };
      this.#mapped.set(key, m);
    }
    if (b.offset + b.length > m.bytes) throw new GpuringError('FRAME_BOUNDS', `a device buffer [${b.offset}, +${b.length}) lies outside its ${m.bytes}-byte allocation`);
    const event = this.description.syncKind === 2 ? this.description.syncHandle : null;
    const mm = m;
    return new Uint8Array(callNative(() => native().copyToHost(mm.device, mm.base + BigInt(b.offset), b.length, event)));
  }

  /** Ends the lease. Calling it again does nothing. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    for (const handle of this.#mapped.values()) native().ipcRelease(handle.handle);
    this.#mapped.clear();
    this.#source.release(this.#pos);
  }

  [Symbol.dispose](): void {
    this.release();
  }

  #resolve(b: BufferDescriptor): Uint8Array {
    if (b.kind === 'cuda-ipc') return this.#copyFromDevice(b);
    const arena = this.#source.arena(handleName(b.handle));
    if (b.offset + b.length > arena.byteLength)
      throw new GpuringError('FRAME_BOUNDS', `a buffer [${b.offset}, +${b.length}) lies outside its ${arena.byteLength}-byte arena`);
    return new Uint8Array(arena, b.offset, b.length);
  }
}
