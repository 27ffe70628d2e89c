import { constants } from 'node:buffer';
import { HANDLE_BYTES } from './codec/layout.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

/** A frame buffer's address in this process (see Frame.mapDevice()). */
export interface DeviceView {
  /** Device address in this process, as CUdeviceptr. */
  ptr: bigint;
  /** Bytes of the buffer. */
  byteLength: number;
  /** Device ordinal in this process. */
  device: number;
}

/** Who published a frame: its ring and producer (index, generation), where pool memory is fetched from. */
export interface FrameOrigin {
  segment: string;
  producer: number;
  producerGen: number;
}

/** Where mapFrame() writes (see cuda_ipc.cc), reused by every frame of the process: an ArrayBuffer per call cost more than the mapping. */
interface MapScratch {
  bytes: Uint8Array;
  view: DataView;
}

function scratch(size: number): MapScratch {
  const bytes = new Uint8Array(Math.max(size, 4096));
  return { bytes, view: new DataView(bytes.buffer) };
}

let mapped = scratch(0);

/**
 * Homes for the handle of a frame's one legacy reference (the usual case),
 * carved from off-heap slabs and reused once the frame is released. A copy of
 * 64 bytes would live on V8's heap, and moving it off when ipcReleaseAll()
 * reads it cost as much as the mapping.
 */
const freeSlots: Uint8Array[] = [];

function handleSlot(handle: Uint8Array): Uint8Array {
  if (!freeSlots.length) {
    const slab = new Uint8Array(256 * HANDLE_BYTES);
    for (let at = 0; at < slab.length; at += HANDLE_BYTES) freeSlots.push(slab.subarray(at, at + HANDLE_BYTES));
  }
  const slot = freeSlots.pop()!;
  slot.set(handle);
  return slot;
}

/**
 * The device allocations one frame has mapped. Legacy-IPC mappings come
 * from the process-wide IpcHandleCache (one open per allocation per process,
 * keyed on handle and allocation id); pool allocations and VMM spans are
 * imported through the producer's descriptor channel once per process while
 * frames hold them, and freed when none does (PoolImports, VmmImports). This
 * holds the frame's references and drops them all at release.
 */
export class DeviceMappings {
  /** The 64-byte handles of the legacy references taken, one array per mapAll() call. */
  readonly #held: Uint8Array[] = [];
  /** The ids of the pool and VMM import references taken, one array per mapAll() call. */
  readonly #imported: BigUint64Array[] = [];

  /**
   * Maps every device buffer of a validated body in one native call (which
   * bounds-checks each against its allocation): per buffer in wire order, its
   * view, or null for host and absent buffers.
   */
  mapAll(body: Uint8Array, origin: FrameOrigin): (DeviceView | null)[] {
    const map = () => callNative(() => native().mapFrame(body, origin.segment, origin.producer, origin.producerGen, mapped.bytes));
    let written = map();
    if (written < 0) {
      mapped = scratch(-written);
      written = map();
    }
    const { bytes, view } = mapped;
    const count = view.getUint32(0, true);
    const end = 16 + 24 * count;
    const legacyEnd = end + 64 * view.getUint32(4, true);
    // Copied out of the scratch, which the next frame's mapping overwrites.
    if (legacyEnd - end === HANDLE_BYTES) this.#held.push(handleSlot(bytes.subarray(end, legacyEnd)));
    else if (legacyEnd > end) this.#held.push(bytes.slice(end, legacyEnd));
    const imported = view.getUint32(8, true);
    if (imported) this.#imported.push(new BigUint64Array(bytes.slice(legacyEnd, written).buffer));
    const out: (DeviceView | null)[] = [];
    for (let at = 16; at < end; at += 24)
      out.push(view.getUint32(at + 20, true) ? { ptr: view.getBigUint64(at, true), byteLength: Number(view.getBigUint64(at + 8, true)), device: view.getInt32(at + 16, true) } : null);
    return out;
  }

  /** The legacy handles of every reference held, 64 bytes each, for a release the native side completes. */
  handles(): Uint8Array {
    return Buffer.concat(this.#held);
  }

  /** Whether pool or VMM memory is mapped: its imports must be freed before the frame is released (SPEC.md §9b, §9d). */
  get holdsImports(): boolean {
    return this.#imported.length > 0;
  }

  /** Forgets the references without dropping them (the native side drops them). */
  forget(): void {
    for (const handles of this.#held) if (handles.length === HANDLE_BYTES) freeSlots.push(handles);
    this.#held.length = 0;
    this.#imported.length = 0;
  }

  releaseAll(): void {
    for (const handles of this.#held) native().ipcReleaseAll(handles);
    for (const ids of this.#imported) native().importReleaseAll(ids);
    this.forget();
  }
}

/**
 * Copies a device range to host memory, on the device after the producer's
 * `event` (if any), through pinned memory when large (see copyToHost in
 * native/cuda_ipc.cc). Complete on return.
 */
export function deviceToHost(view: DeviceView, event: Uint8Array | null): Uint8Array {
  // Checked before the copy: the bytes could not be handed back as one Uint8Array.
  if (view.byteLength > constants.MAX_LENGTH)
    throw new GpuringError('UNSUPPORTED', `a device buffer of ${view.byteLength} bytes is more than one Uint8Array holds in this Node.js (${constants.MAX_LENGTH} bytes, buffer.constants.MAX_LENGTH; Node.js 22 or later holds 2^53 - 1): copy the frame to the device (copyToDevice()) instead`);
  return new Uint8Array(callNative(() => native().copyToHost(view.device, view.ptr, view.byteLength, event)));
}
