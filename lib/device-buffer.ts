import { callNative, GpuringError } from './errors.js';
import type { BufferDescriptor } from './codec/description.js';
import { native, type CudaInfo, type DeviceExport } from './native.js';

/** The CUDA driver and devices of this machine; never throws. */
export function cudaInfo(): CudaInfo {
  return native().cudaInfo();
}

/**
 * Memory on a CUDA device, allocated with the device's primary
 * context (so it is the same memory PyTorch or CuPy in this process would see).
 * The buffer owns the allocation until `free()` (or dispose).
 */
export class DeviceBuffer implements Disposable {
  /** Device address, as CUdeviceptr. */
  readonly ptr: bigint;
  /** Bytes allocated. */
  readonly byteLength: number;
  /** Device ordinal in this process. */
  readonly device: number;
  #freed = false;

  private constructor(ptr: bigint, byteLength: number, device: number) {
    this.ptr = ptr;
    this.byteLength = byteLength;
    this.device = device;
  }

  /**
   * Allocates `byteLength` bytes on device `device`: with cuMemAlloc
   * (published as cuda-ipc), or with `pool: true` from gpuring's
   * stream-ordered pool on that device, which is exportable (cuda-pool,
   * SPEC.md §9b), or with `vmm: true` as memory of the virtual memory
   * management API, 20 MiB chunks mapped side by side as PyTorch's expandable
   * segments are (cuda-vmm, §9d). Pool memory is faster to allocate and, for
   * consumers, to open: after a one-time import of the pool, each allocation
   * costs them microseconds instead of a cuIpcOpenMemHandle. A consumer maps
   * VMM memory chunk by chunk, once per frame holding it.
   */
  static alloc(byteLength: number, { device = 0, pool = false, vmm = false }: { device?: number; pool?: boolean; vmm?: boolean } = {}): DeviceBuffer {
    if (!Number.isSafeInteger(byteLength) || byteLength <= 0) throw new GpuringError('INVALID_ARGUMENT', 'byteLength must be a positive integer');
    if (pool && vmm) throw new GpuringError('INVALID_ARGUMENT', 'a buffer is pool memory or VMM memory, not both');
    const n = native();
    const ptr = callNative(() => (pool ? n.deviceAllocPool(device, byteLength) : vmm ? n.deviceAllocVmm(device, byteLength) : n.deviceAlloc(device, byteLength)));
    return new DeviceBuffer(ptr, byteLength, device);
  }

  /** Copies host bytes to the device at byte `offset` (synchronous). */
  upload(source: ArrayBufferView, offset = 0): void {
    this.#check(offset, source.byteLength);
    const bytes = new Uint8Array(source.buffer, source.byteOffset, source.byteLength);
    callNative(() => native().deviceUpload(this.device, this.ptr + BigInt(offset), bytes));
  }

  /** Copies `length` bytes from byte `offset` to a new host buffer (synchronous). */
  download(offset = 0, length = this.byteLength - offset): Uint8Array {
    this.#check(offset, length);
    return new Uint8Array(callNative(() => native().deviceDownload(this.device, this.ptr + BigInt(offset), length)));
  }

  /** True once free() was called. */
  get freed(): boolean {
    return this.#freed;
  }

  /** Frees the allocation. Frames published from it must have been released first. */
  free(): void {
    if (this.#freed) return;
    this.#freed = true;
    callNative(() => native().deviceFree(this.device, this.ptr));
  }

  /** free(), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }

  #check(offset: number, length: number): void {
    if (this.#freed) throw new GpuringError('FRAME_STATE', 'the device buffer was freed');
    if (!Number.isSafeInteger(offset) || !Number.isSafeInteger(length) || offset < 0 || length < 0 || offset + length > this.byteLength)
      throw new GpuringError('INVALID_ARGUMENT', `range [${offset}, +${length}) is outside the ${this.byteLength}-byte buffer`);
  }
}

let uuids: Uint8Array[] | undefined;

/** This process's ordinal of the device with `uuid` (ordinals differ between processes). */
export function deviceOrdinalOf(uuid: Uint8Array): number {
  uuids ??= callNative(() => native().deviceUuids());
  const i = uuids.findIndex((u) => u.every((b, k) => b === uuid[k]));
  if (i < 0) {
    const hex = Buffer.from(uuid).toString('hex');
    throw new GpuringError('DEVICE_NOT_FOUND', `the frame's device (UUID ${hex}) is not visible in this process; check CUDA_VISIBLE_DEVICES`);
  }
  return i;
}

/** The UUID bytes of device `ordinal` in this process. */
export function deviceUuidOf(ordinal: number): Uint8Array {
  uuids ??= callNative(() => native().deviceUuids());
  const u = uuids[ordinal];
  if (!u) throw new GpuringError('DEVICE_NOT_FOUND', `no CUDA device ${ordinal} (${uuids.length} visible)`);
  return u;
}

/**
 * Makes `ptr` (any device pointer, also one inside a larger allocation such as
 * PyTorch's or RMM's pools) shareable: cudaMalloc memory as cuda-ipc, memory
 * of an exportable stream-ordered pool as cuda-pool, VMM memory of
 * `DeviceBuffer.alloc(n, { vmm: true })` as cuda-vmm (the whole allocation is
 * the span). Refuses, with NOT_EXPORTABLE, memory none of these covers
 * (managed, pinned host, the default pool of cudaMallocAsync, VMM memory of
 * other allocators).
 */
export function exportDeviceMemory(ptr: bigint): DeviceExport {
  callNative(() => native().exportDeviceMemory(ptr, exported));
  const word = (at: number) => exportedView.getBigUint64(at, true);
  return {
    kind: EXPORT_KINDS[exportedView.getUint32(64, true)]!,
    handle: exported.slice(0, 64),
    offset: Number(word(72)),
    base: word(80),
    allocationBytes: Number(word(88)),
    device: exportedView.getInt32(68, true),
    allocationId: word(96),
    poolId: word(104),
  };
}

/**
 * Where the native export writes (layout in native/cuda_ipc.cc): one array
 * for the process, off V8's heap, so that a producer describing its device
 * buffers for every frame allocates no Buffer per call.
 */
const exported = new Uint8Array(112);
const exportedView = new DataView(exported.buffer);
const EXPORT_KINDS: Record<number, DeviceExport['kind']> = { 2: 'cuda-ipc', 3: 'cuda-pool', 4: 'cuda-vmm' };

/**
 * A cuda-ipc buffer descriptor for `length` bytes at `ptr`, for publishFrame().
 * The caller keeps the memory alive and unchanged until the frame is released.
 */
export function deviceBufferDescriptor(ptr: bigint, length: number): BufferDescriptor {
  const e = exportDeviceMemory(ptr);
  return exportedBuffer(e, deviceUuidOf(e.device), e.offset, length);
}

/**
 * The descriptor of `length` bytes at `offset` in an exported allocation. One
 * object literal: spreading the export's fields into it cost a producer
 * describing per frame about 1 us per buffer on the H100 host.
 */
export function exportedBuffer(e: DeviceExport, deviceUuid: Uint8Array, offset: number, length: number): BufferDescriptor {
  const b: BufferDescriptor = { kind: e.kind, deviceOrdinal: e.device, deviceUuid, offset, length, allocationId: e.allocationId, handle: e.handle };
  if (e.kind === 'cuda-pool') b.poolId = e.poolId;
  return b;
}
