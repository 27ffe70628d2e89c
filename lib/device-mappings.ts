/**
 * DeviceMappings: the device allocations one frame has mapped. Mappings come
 * from the process-wide IpcHandleCache (one open per allocation per process,
 * keyed on handle and allocation id); this holds the frame's references and
 * drops them all at release.
 */
import type { BufferDescriptor } from './codec/description.js';
import { deviceOrdinalOf } from './device-buffer.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

export interface Mapped {
  handle: Uint8Array;
  /** Ordinal in this process of the device holding the allocation. */
  device: number;
  base: bigint;
  bytes: number;
}

/** A frame buffer's address in this process (see Frame.mapDevice()). */
export interface DeviceView {
  ptr: bigint;
  byteLength: number;
  /** Device ordinal in this process. */
  device: number;
}

export class DeviceMappings {
  readonly #mapped = new Map<string, Mapped>();
  /** Handles of references mapAll() took, 64 bytes each, one array per call. */
  readonly #bulk: Uint8Array[] = [];

  /**
   * Maps every device buffer of a validated body in one native call: per
   * buffer in wire order, its view, or null for host and absent buffers.
   */
  mapAll(body: Uint8Array): (DeviceView | null)[] {
    const { views, handles } = callNative(() => native().mapFrame(body));
    this.#bulk.push(handles);
    const data = new DataView(views);
    const out: (DeviceView | null)[] = [];
    for (let at = 0; at < views.byteLength; at += 24)
      out.push(data.getUint32(at + 20, true) ? { ptr: data.getBigUint64(at, true), byteLength: Number(data.getBigUint64(at + 8, true)), device: data.getInt32(at + 16, true) } : null);
    return out;
  }

  /** The mapping of `b`'s allocation, bounds-checked for `b`. */
  acquire(b: BufferDescriptor): Mapped {
    const key = `${Buffer.from(b.handle).toString('hex')}:${b.allocationId}`;
    let m = this.#mapped.get(key);
    if (!m) {
      const device = deviceOrdinalOf(b.deviceUuid);
      const { base, bytes } = callNative(() => native().ipcAcquire(b.handle, b.allocationId, device));
      m = { handle: b.handle, device, base, bytes };
      this.#mapped.set(key, m);
    }
    if (b.offset + b.length > m.bytes) throw new GpuringError('FRAME_BOUNDS', `a device buffer [${b.offset}, +${b.length}) lies outside its ${m.bytes}-byte allocation`);
    return m;
  }

  /** Copies `b` to host memory, ordered on the device after `event` (if any). */
  toHost(b: BufferDescriptor, event: Uint8Array | null): Uint8Array {
    const m = this.acquire(b);
    return new Uint8Array(callNative(() => native().copyToHost(m.device, m.base + BigInt(b.offset), b.length, event)));
  }

  /** The handles of every mapping held, 64 bytes each, for a release the native side completes. */
  handles(): Uint8Array {
    return Buffer.concat([...[...this.#mapped.values()].map((m) => m.handle), ...this.#bulk]);
  }

  /** Forgets the references without dropping them (the native side drops them). */
  forget(): void {
    this.#mapped.clear();
    this.#bulk.length = 0;
  }

  releaseAll(): void {
    for (const m of this.#mapped.values()) native().ipcRelease(m.handle);
    for (const handles of this.#bulk) native().ipcReleaseAll(handles);
    this.forget();
  }
}
