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
import { forEachBuffer, handleName } from './codec/description.js';
import { schemaOfFrame, tableFromFrame } from './arrow/table-reader.js';
import { DeviceBuffer, deviceOrdinalOf, deviceUuidOf, exportDeviceMemory } from './device-buffer.js';
import { DeviceFrameCopy } from './device-frame-copy.js';
import { DeviceMappings } from './device-mappings.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

/** A device buffer of a frame, mapped in this process. */
export interface DeviceView {
  ptr: bigint;
  byteLength: number;
  /** Device ordinal in this process. */
  device: number;
}

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
  /** Device allocations this frame mapped (references into the IpcHandleCache). */
  readonly #devices = new DeviceMappings();

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
    this.#requireLeased();
    return tableFromFrame(this.description, (b) => this.#resolve(b));
  }

  #requireLeased(): void {
    if (this.#released) throw new GpuringError('FRAME_STATE', 'the frame was released; its memory belongs to the producer again');
  }

  /**
   * The frame's device buffers in place: for each buffer in wire order (as
   * forEachBuffer visits them), its address in this process, or null for host
   * and absent buffers. No copy. Valid until release; order GPU work that reads
   * them after the producer's (see synchronize()).
   */
  mapDevice(): (DeviceView | null)[] {
    this.#requireLeased();
    const views: (DeviceView | null)[] = [];
    forEachBuffer(this.description, (b) => {
      if (b.kind !== 'cuda-ipc') return void views.push(null);
      const m = this.#devices.acquire(b);
      views.push({ ptr: m.base + BigInt(b.offset), byteLength: b.length, device: m.device });
    });
    return views;
  }

  /**
   * Waits on the host until the producer's GPU work that fills the frame's
   * device buffers is complete. Not needed before toTable() or copyToDevice()
   * (they order themselves on the device); for code that hands the buffers'
   * addresses to other libraries. Returns at once for host frames.
   */
  synchronize(): void {
    this.#requireLeased();
    if (this.description.syncKind !== 2) return;
    let device = 0;
    forEachBuffer(this.description, (b) => b.kind === 'cuda-ipc' && (device = deviceOrdinalOf(b.deviceUuid)));
    callNative(() => native().synchronizeEvent(device, this.description.syncHandle));
  }

  /**
   * Copies every buffer of the frame into one new allocation on `device` (by
   * default the device of the frame's first device buffer, else 0): device
   * buffers device-to-device after the producer's event, host buffers
   * uploaded. The copy is this process's; release the frame whenever you like.
   */
  copyToDevice({ device }: { device?: number } = {}): DeviceFrameCopy {
    this.#requireLeased();
    const copy = structuredClone(this.description);
    const originals: BufferDescriptor[] = [];
    const copies: BufferDescriptor[] = [];
    forEachBuffer(this.description, (b) => originals.push(b));
    forEachBuffer(copy, (b) => copies.push(b));
    const first = originals.find((b) => b.kind === 'cuda-ipc');
    const target = device ?? (first ? deviceOrdinalOf(first.deviceUuid) : 0);
    const at: number[] = [];
    let total = 0;
    for (const b of originals) (at.push(total), (total += b.kind === 'absent' ? 0 : Math.ceil(b.length / 256) * 256));
    const memory = DeviceBuffer.alloc(Math.max(total, 256), { device: target });
    try {
      const event = this.description.syncKind === 2 ? this.description.syncHandle : null;
      originals.forEach((b, i) => {
        if (b.kind === 'cuda-ipc') {
          const m = this.#devices.acquire(b);
          callNative(() => native().copyDeviceToDevice(target, memory.ptr + BigInt(at[i]!), m.base + BigInt(b.offset), b.length, event));
        } else if (b.kind === 'host') memory.upload(this.#resolve(b), at[i]);
      });
      const exported = exportDeviceMemory(memory.ptr);
      const uuid = deviceUuidOf(target);
      copies.forEach((b, i) => {
        if (b.kind === 'absent') return;
        Object.assign(b, { kind: 'cuda-ipc', deviceOrdinal: target, deviceUuid: uuid, offset: exported.offset + at[i]!, allocationId: exported.allocationId, handle: exported.handle });
      });
      copy.syncKind = 0;
      copy.syncHandle = new Uint8Array(this.description.syncHandle.length);
      return new DeviceFrameCopy(copy, memory);
    } catch (error) {
      memory.free();
      throw error;
    }
  }

  /** Ends the lease. Calling it again does nothing. */
  release(): void {
    if (this.#released) return;
    this.#released = true;
    this.#devices.releaseAll();
    this.#source.release(this.#pos);
  }

  [Symbol.dispose](): void {
    this.release();
  }

  #resolve(b: BufferDescriptor): Uint8Array {
    if (b.kind === 'cuda-ipc') return this.#devices.toHost(b, this.description.syncKind === 2 ? this.description.syncHandle : null);
    const arena = this.#source.arena(handleName(b.handle));
    if (b.offset + b.length > arena.byteLength)
      throw new GpuringError('FRAME_BOUNDS', `a buffer [${b.offset}, +${b.length}) lies outside its ${arena.byteLength}-byte arena`);
    return new Uint8Array(arena, b.offset, b.length);
  }
}
