import { callNative, GpuringError } from './errors.js';
import { native, type PinnedHostStats } from './native.js';

/**
 * The page-locked host memory that `frame.toTable()` copies device columns
 * into, shared by the whole process. DMA into pinned memory runs at the link's
 * full rate; a block comes back to the pool when V8 collects its table, and
 * the next result of a similar size (within a quarter of the block) reuses
 * it. A result of a size not seen before pins a fresh block piece by piece as
 * it copies, at about a third to a half of the link's rate: reserve() pins it
 * ahead of time instead, for a consumer whose first large result must be
 * fast. The pool holds at most a quarter of physical memory (16 GiB at most);
 * pinned memory cannot be swapped.
 */
export class PinnedHostPool {
  private constructor() {}

  /**
   * Pins a block for results of about `bytes` now (on `device`'s context;
   * pinned memory serves every device) and keeps it idle for the next such
   * result. Returns false, pinning nothing, when the pool's bound would be
   * passed or the memory cannot be mapped. Needs CUDA (CUDA_UNAVAILABLE
   * otherwise). Each call pins another block.
   */
  static reserve(bytes: number, { device = 0 }: { device?: number } = {}): boolean {
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new GpuringError('INVALID_ARGUMENT', 'bytes must be a positive integer');
    return callNative(() => native().reservePinnedHost(device, bytes));
  }

  /** Bytes pinned, of those idle (ready for reuse), and the bound. */
  static stats(): PinnedHostStats {
    return native().pinnedHostStats();
  }
}
