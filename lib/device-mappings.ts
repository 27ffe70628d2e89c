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

export class DeviceMappings {
  readonly #mapped = new Map<string, Mapped>();

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
    return Buffer.concat([...this.#mapped.values()].map((m) => m.handle));
  }

  /** Forgets the references without dropping them (the native side drops them). */
  forget(): void {
    this.#mapped.clear();
  }

  releaseAll(): void {
    for (const m of this.#mapped.values()) native().ipcRelease(m.handle);
    this.#mapped.clear();
  }
}
