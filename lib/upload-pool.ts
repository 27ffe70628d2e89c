/**
 * UploadPool: the device allocations that publish(table, { device }) uploads
 * into, kept for the next upload once their frame is released.
 *
 * Why not free each one: consumers cache their mapping of an allocation
 * (SPEC.md §9a). A new allocation per frame makes every consumer open a new
 * mapping per frame (cuIpcOpenMemHandle), and the freed allocations stay
 * allocated on the device, held by those idle mappings, until the consumers'
 * caches evict them. Reused allocations keep their handle and buffer id, so a
 * consumer maps each once.
 *
 * Sizes are rounded up to one of eight steps per power of two (at most 12.5%
 * more). Idle allocations are kept within IDLE_BYTES, and at least
 * IDLE_AT_LEAST of each size whatever their bytes, so a stream of large frames
 * reuses its memory too. Not thread-safe: one per Producer, on its event loop.
 */
import { DeviceBuffer } from './device-buffer.js';
import { isCudaOutOfMemory } from './errors.js';

const SMALLEST = 64 << 10;
const IDLE_BYTES = 256 << 20;
const IDLE_AT_LEAST = 2;

export class UploadPool {
  /** Idle allocations by device and size: `${device}:${bytes}`. */
  readonly #idle = new Map<string, DeviceBuffer[]>();
  #idleBytes = 0;

  /**
   * An allocation of at least `bytes` on `device`: an idle one of its size, or
   * a new one. When the device is out of memory, idle allocations of other
   * sizes are freed and it tries once more; then the CUDA error stands.
   */
  take(device: number, bytes: number): DeviceBuffer {
    const size = sizeFor(bytes);
    const idle = this.#idle.get(`${device}:${size}`)?.pop();
    if (idle) {
      this.#idleBytes -= size;
      return idle;
    }
    try {
      return DeviceBuffer.alloc(size, { device });
    } catch (error) {
      if (!isCudaOutOfMemory(error) || this.#idleBytes === 0) throw error;
      this.freeIdle();
      return DeviceBuffer.alloc(size, { device });
    }
  }

  /** An allocation whose frame was released (or never published): kept idle, or freed past the bounds. */
  giveBack(buffer: DeviceBuffer): void {
    const key = `${buffer.device}:${buffer.byteLength}`;
    const idle = this.#idle.get(key) ?? this.#idle.set(key, []).get(key)!;
    if (idle.length < IDLE_AT_LEAST || this.#idleBytes + buffer.byteLength <= IDLE_BYTES) {
      idle.push(buffer);
      this.#idleBytes += buffer.byteLength;
    } else buffer.free();
  }

  /** Frees every idle allocation (at close, or when the device ran out of memory). */
  freeIdle(): void {
    for (const idle of this.#idle.values()) for (const buffer of idle.splice(0)) buffer.free();
    this.#idleBytes = 0;
  }
}

/** `bytes` rounded up to SMALLEST or to one of eight steps between two powers of two. */
function sizeFor(bytes: number): number {
  if (bytes <= SMALLEST) return SMALLEST;
  const step = 2 ** (Math.floor(Math.log2(bytes)) - 3);
  return Math.ceil(bytes / step) * step;
}
