import type { Table } from 'apache-arrow';
import { tableFromFrame } from './arrow/table-reader.js';
import { bufferIndex, forEachBuffer, type BufferDescriptor, type FrameDescription } from './codec/description.js';
import { deviceUuidOf, exportDeviceMemory, exportedBuffer, type DeviceBuffer } from './device-buffer.js';
import { deviceToHost } from './device-mappings.js';
import { GpuringError } from './errors.js';

const ALIGN = 256;

/** Where each buffer goes in a copy (256-byte aligned), then the total bytes. */
export function copyLayout(buffers: BufferDescriptor[]): number[] {
  const at: number[] = [];
  let total = 0;
  for (const b of buffers) (at.push(total), (total += b.kind === 'absent' ? 0 : Math.ceil(b.length / ALIGN) * ALIGN));
  return [...at, total];
}

/**
 * A frame's columns copied into device memory this process
 * owns (Frame.copyToDevice), so the frame itself can be released at once.
 * `description` describes the copy as cuda-ipc buffers of `memory`: read it
 * with `toTable()`, hand `memory` to other code, or publish the copy to
 * another ring with `producer.publishFrame(copy.description)` (keep the copy
 * alive until that frame is released). `free()` returns the memory when the
 * copy allocated it (not a caller's `into` buffer).
 */
export class DeviceFrameCopy implements Disposable {
  /** One allocation (or the caller's buffer) holding every buffer of the copy. */
  readonly memory: DeviceBuffer;
  readonly #source: FrameDescription;
  readonly #at: number[];
  readonly #owned: boolean;
  #description: FrameDescription | undefined;

  /** @internal */
  constructor(source: FrameDescription, at: number[], memory: DeviceBuffer, owned: boolean) {
    this.#source = source;
    this.#at = at;
    this.memory = memory;
    this.#owned = owned;
  }

  /**
   * The copy as cuda-ipc buffers of `memory`. Built on first use: exporting
   * the memory (cuIpcGetMemHandle) is work a copy that is only read here
   * should not pay for.
   */
  get description(): FrameDescription {
    if (this.#description) return this.#description;
    const copy = structuredClone(this.#source);
    const exported = exportDeviceMemory(this.memory.ptr);
    const uuid = deviceUuidOf(this.memory.device);
    let i = 0;
    forEachBuffer(copy, (b) => {
      const at = this.#at[i++]!;
      if (b.kind === 'absent') return;
      Object.assign(b, exportedBuffer(exported, uuid, exported.offset + at, b.length));
    });
    copy.syncKind = 0;
    copy.syncHandle = new Uint8Array(this.#source.syncHandle.length);
    return (this.#description = copy);
  }

  /** The copy as an apache-arrow Table in host memory (one device-to-host copy). */
  toTable(): Table {
    if (this.memory.freed) throw new GpuringError('FRAME_STATE', 'the device copy was freed');
    const index = bufferIndex(this.#source);
    const { ptr, device } = this.memory;
    return tableFromFrame(this.#source, (b) => deviceToHost({ ptr: ptr + BigInt(this.#at[index.get(b)!]!), byteLength: b.length, device }, null));
  }

  /** Frees the memory the copy allocated (not a caller's `into` buffer); the description is then invalid. */
  free(): void {
    if (this.#owned) this.memory.free();
  }

  /** free(), for `using`. */
  [Symbol.dispose](): void {
    this.free();
  }
}
