import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

/**
 * A CUDA stream of this process, non-blocking, on the device's
 * primary context (the context PyTorch or CuPy in this process also use).
 *
 * Ordering: work gpuring queues on a stream (`frame.copyToDevice({ stream })`)
 * runs after everything queued on it before, and the call returns without
 * waiting for it. `frame.release({ stream })` ends the frame's lease only once
 * the stream has completed the work queued before the release, so reads queued
 * on the stream always see the producer's data. Wherever a DeviceStream is
 * taken, a CUstream made by another library (as a bigint; 0n for the legacy
 * default stream) is taken too.
 */
export class DeviceStream implements Disposable {
  /** The CUstream. */
  readonly ptr: bigint;
  /** Device ordinal in this process. */
  readonly device: number;
  #destroyed = false;

  private constructor(ptr: bigint, device: number) {
    this.ptr = ptr;
    this.device = device;
  }

  /** Creates a stream on device `device` (cuStreamCreate, non-blocking). */
  static create({ device = 0 }: { device?: number } = {}): DeviceStream {
    return new DeviceStream(callNative(() => native().streamCreate(device)), device);
  }

  /** Waits on the host until the work queued so far is complete. */
  synchronize(): void {
    this.#requireLive();
    callNative(() => native().streamSynchronize(this.device, this.ptr));
  }

  /** True once destroy() was called. */
  get destroyed(): boolean {
    return this.#destroyed;
  }

  /** Destroys the stream; work already queued on it still completes. */
  destroy(): void {
    if (this.#destroyed) return;
    this.#destroyed = true;
    callNative(() => native().streamDestroy(this.device, this.ptr));
  }

  /** destroy(), for `using`. */
  [Symbol.dispose](): void {
    this.destroy();
  }

  #requireLive(): void {
    if (this.#destroyed) throw new GpuringError('FRAME_STATE', 'the stream was destroyed');
  }

  /** The CUstream of `stream`, refusing a destroyed DeviceStream. */
  static handleOf(stream: DeviceStream | bigint): bigint {
    if (typeof stream === 'bigint') return stream;
    stream.#requireLive();
    return stream.ptr;
  }
}
