/**
 * Uploading an apache-arrow batch to a CUDA device for publishing: every buffer
 * goes into one device allocation (256-byte aligned pieces), exported once, and
 * an interprocess event is recorded after the upload (if it is still under way)
 * so consumers order their reads after it. The allocation, taken from the
 * producer's UploadPool, belongs to the frame until it is released.
 */
import type { RecordBatch, Table } from 'apache-arrow';
import { describeBatch } from './arrow/table-writer.js';
import { forEachBuffer, isDeviceKind, type BufferDescriptor, type FrameDescription } from './codec/description.js';
import { HANDLE_BYTES } from './codec/layout.js';
import { DeviceBuffer, deviceUuidOf, exportDeviceMemory, exportedBuffer } from './device-buffer.js';
import { DeviceStream } from './device-stream.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';
import type { UploadPool } from './upload-pool.js';

const ALIGN = 256;

export interface DeviceFrame {
  description: FrameDescription;
  /** Owns the columns' device memory; back to the pool once the frame is released. */
  memory: DeviceBuffer;
  /** Pooled event, recycled once the frame is released; -1 for none. */
  eventId: number;
}

export function uploadBatch(source: RecordBatch | Table, device: number, pool: UploadPool): DeviceFrame {
  const uuid = deviceUuidOf(device);
  const pieces: { bytes: Uint8Array; desc: BufferDescriptor }[] = [];
  const description = describeBatch(source, {
    place(bytes) {
      const desc: BufferDescriptor = { kind: 'cuda-ipc', deviceOrdinal: device, deviceUuid: uuid, offset: 0, length: bytes.length, allocationId: 0n, handle: new Uint8Array(HANDLE_BYTES) };
      pieces.push({ bytes, desc });
      return desc;
    },
  });
  let at = 0;
  for (const p of pieces) (p.desc.offset = at), (at += Math.ceil(p.bytes.length / ALIGN) * ALIGN);
  const memory = pool.take(device, Math.max(at, ALIGN));
  try {
    for (const p of pieces) if (p.bytes.length) memory.upload(p.bytes, p.desc.offset);
    const exported = exportDeviceMemory(memory.ptr);
    for (const p of pieces) Object.assign(p.desc, exportedBuffer(exported, uuid, p.desc.offset + exported.offset, p.desc.length));
    return { description, memory, eventId: recordFrameEvent(description, device) };
  } catch (error) {
    pool.giveBack(memory);
    throw error;
  }
}

/**
 * The device on whose legacy default stream a hand-described frame's readers
 * are ordered: `option`, else that of its first device buffer; -1 when it needs
 * no event from us (no device buffers, or an event of its own).
 */
export function eventDevice(description: FrameDescription, option: number | undefined): number {
  if (description.syncKind !== 0) return -1;
  let first = -1;
  forEachBuffer(description, (b) => isDeviceKind(b.kind) && first < 0 && (first = b.deviceOrdinal));
  return first < 0 ? -1 : (option ?? first);
}

/**
 * The CUstream whose queued work a frame on `device` is ordered after: the
 * caller's `stream`, checked to be on that device; undefined for the legacy
 * default stream.
 */
export function orderingStream(stream: DeviceStream | bigint | undefined, device: number): bigint | undefined {
  if (stream === undefined) return undefined;
  if (device < 0) throw new GpuringError('INVALID_ARGUMENT', 'a stream orders device frames, and this one has no device buffer without an event of its own');
  if (stream instanceof DeviceStream && stream.device !== device)
    throw new GpuringError('INVALID_ARGUMENT', `the frame's buffers are on device ${device}, its stream on device ${stream.device}`);
  return DeviceStream.handleOf(stream);
}

/**
 * Orders a frame's readers after the work queued on `stream` (default: the
 * legacy default stream of `device`): records a pooled event there and puts it
 * in the description. When that stream is idle the buffers are complete
 * already and the frame goes without one (syncKind 0). Returns the event's
 * id, or -1 for none.
 */
export function recordFrameEvent(description: FrameDescription, device: number, stream?: bigint): number {
  const id = callNative(() => native().recordEvent(device, true, stream, eventHandle));
  if (id < 0) return -1;
  description.syncKind = 2;
  description.syncHandle = eventHandle.slice();
  return id;
}

/**
 * Where recordEvent() writes a handle: off V8's heap, where it stays. V8 keeps
 * a typed array of 64 bytes or less on its heap and moves it off when native
 * code reads it, which costs each call about as much as the call itself.
 */
const eventHandle = new Uint8Array(4 * HANDLE_BYTES).subarray(0, HANDLE_BYTES);
