/**
 * DeviceFrameCopy: a frame's columns copied into device memory this process
 * owns (Frame.copyToDevice), so the frame itself can be released at once.
 * `description` describes the copy as cuda-ipc buffers of `memory`: read it
 * with `toTable()`, hand `memory` to other code, or publish the copy to
 * another ring with `producer.publishFrame(copy.description)` (keep the copy
 * alive until that frame is released). `free()` returns the memory.
 */
import type { Table } from 'apache-arrow';
import { tableFromFrame } from './arrow/table-reader.js';
import type { FrameDescription } from './codec/description.js';
import type { DeviceBuffer } from './device-buffer.js';
import { DeviceMappings } from './device-mappings.js';
import { GpuringError } from './errors.js';

export class DeviceFrameCopy implements Disposable {
  readonly description: FrameDescription;
  /** One allocation holding every buffer of the copy. */
  readonly memory: DeviceBuffer;

  /** @internal */
  constructor(description: FrameDescription, memory: DeviceBuffer) {
    this.description = description;
    this.memory = memory;
  }

  /** The copy as an apache-arrow Table in host memory (one device-to-host copy). */
  toTable(): Table {
    if (this.memory.freed) throw new GpuringError('FRAME_STATE', 'the device copy was freed');
    const mappings = new DeviceMappings();
    try {
      return tableFromFrame(this.description, (b) => mappings.toHost(b, null));
    } finally {
      mappings.releaseAll();
    }
  }

  free(): void {
    this.memory.free();
  }

  [Symbol.dispose](): void {
    this.free();
  }
}
