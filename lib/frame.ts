import type { Schema, Table } from 'apache-arrow';
import { type Arena, arenaView } from './arena-windows.js';
import type { BufferDescriptor, FrameDescription } from './codec/description.js';
import { bufferIndex, forEachBuffer, handleName, isDeviceKind } from './codec/description.js';
import { decodeValidatedFrame } from './codec/decode.js';
import { columnView, type ColumnView } from './column-view.js';
import { HANDLE_BYTES, Header } from './codec/layout.js';
import { utf8 } from './codec/utf8.js';
import { schemaOfFrame, tableFromFrame } from './arrow/table-reader.js';
import { DeviceBuffer, deviceOrdinalOf } from './device-buffer.js';
import { copyLayout, DeviceFrameCopy } from './device-frame-copy.js';
import { DeviceMappings, deviceToHost, type DeviceView } from './device-mappings.js';
import { DeviceStream } from './device-stream.js';
import { callNative, GpuringError } from './errors.js';
import { native } from './native.js';

/**
 * A frame's lease as its consumer tracks it: what to end for the user if the
 * Frame is collected while still leased. Never refers to the Frame itself.
 */
export interface Lease {
  readonly pos: number;
  /** Device allocations the frame mapped, made on first use (host frames map none). */
  devices?: DeviceMappings;
  /** Its number in the consumer's LeakWatch while watched for collection, else -1 (frames released at once never are). */
  watchId: number;
}

/** What a Frame needs from its consumer: mapped arenas and the release call. */
export interface FrameSource {
  arena(name: string): Arena;
  release(pos: number): void;
  /** Returns a frame its user never saw to the ring, for redelivery. */
  handBack(pos: number): void;
  /** The frame's lease ended (any of the ways above): it needs no rescue if collected. */
  settle(frame: Frame, lease: Lease): void;
  /** The frame as a Table straight from its body when its layout allows (FrameLayout), else null; `frame` gives the description the first time. */
  fastTable(body: Uint8Array, frame: Frame): Table | null;
  /** The ring's name, which with the frame's producer names where pool memory comes from. */
  readonly segment: string;
  /** Ends the lease once `stream` completes the work queued so far; drops `mappings` (64-byte handles) then. */
  releaseAfter(pos: number, device: number, stream: bigint, mappings: Uint8Array): void;
}

/** Bytes before the body in a record the native core hands over (see ReceivedRecord). */
export const RECORD_BYTES = 32;

/** Bytes of the body of the record at `at`. */
const bodyLength = (records: DataView, at: number): number => records.getUint32(at + RECORD_BYTES + Header.bodyLength, true);

/** Bytes the record at `at` takes in its block, body and padding included. */
export function recordLength(records: DataView, at: number): number {
  return RECORD_BYTES + Math.ceil(bodyLength(records, at) / 8) * 8;
}

/**
 * One record batch received from a ring.
 *
 * Ownership: from the moment `consumer.next()` resolves, this process holds a
 * lease on the frame; the producer will not reuse its memory until the lease
 * ends. The lease ends with `release()` (or `[Symbol.dispose]`, so `using`
 * works), when the consumer closes, or when this process dies. After release,
 * tables from `toTable()` still point at the producer's memory, which it may
 * overwrite at any time: copy what you keep (e.g. `tableFromIPC(tableToIPC(t))`)
 * before releasing. A Frame object kept after release holds a little host
 * memory: its description, in a record block shared with frames taken around
 * the same time (64 KiB), freed when the last of them is collected.
 *
 * Device frames (cuda-ipc buffers): `toTable()` copies each buffer to the host,
 * on the device after the producer's event (no host wait for the producer's
 * GPU work). Each allocation is mapped once per process and the frame holds a
 * reference to its mappings until release.
 *
 * Asynchronous consumers: GPU work that reads the frame's buffers and is still
 * queued when the lease ends would read memory the producer is reusing. Queue
 * it on a stream and release with `release({ stream })`: the lease then ends
 * when the stream has completed that work, not when release() returns.
 */
export class Frame implements Disposable {
  // A frame is made on every wake-up of a sleeping consumer, where each object
  // and field touched costs cache misses: everything is read from the record
  // (or made) on first use.
  readonly #records: DataView;
  readonly #at: number;
  readonly #source: FrameSource;
  #body: Uint8Array | undefined;
  #lease: Lease | undefined;
  #released = false;
  #description: FrameDescription | undefined;
  #views: (DeviceView | null)[] | undefined;
  #index: Map<BufferDescriptor, number> | undefined;
  #eventKey: Uint8Array | undefined;

  /** @internal The frame whose record is at `at` of `records` (see RECORD_BYTES); `lease` if it is watched from the start. */
  constructor(records: DataView, at: number, source: FrameSource, lease?: Lease) {
    this.#records = records;
    this.#at = at;
    this.#source = source;
    this.#lease = lease;
  }

  /** Producer-assigned id, unique per producer. */
  get id(): number {
    return this.#records.getFloat64(this.#at + 8, true);
  }

  /** Participant index of the producer. */
  get producer(): number {
    return this.#records.getUint32(this.#at + 16, true);
  }

  /** The number the producer attached to the frame. */
  get tag(): bigint {
    return this.#records.getBigUint64(this.#at + 24, true);
  }

  get #pos(): number {
    return this.#records.getFloat64(this.#at, true);
  }

  get #bytes(): Uint8Array {
    const r = this.#records;
    return (this.#body ??= new Uint8Array(r.buffer, r.byteOffset + this.#at + RECORD_BYTES, bodyLength(r, this.#at)));
  }

  #leased(): Lease {
    return (this.#lease ??= { pos: this.#pos, watchId: -1 });
  }

  /** @internal The lease while it lasts, for the consumer's leak watch; null once released. */
  heldLease(): Lease | null {
    return this.#released ? null : this.#leased();
  }

  /** Device allocations this frame mapped (references into the IpcHandleCache). */
  get #devices(): DeviceMappings {
    return (this.#leased().devices ??= new DeviceMappings());
  }

  /**
   * The frame body as columns and buffer descriptors. The body was validated
   * when the frame was received; it is turned into objects on first use, so a
   * frame that is only passed along or counted costs no decoding.
   */
  get description(): FrameDescription {
    return (this.#description ??= decodeValidatedFrame(this.#bytes));
  }

  /** Rows in the frame. */
  get numRows(): number {
    return Number(this.#records.getBigUint64(this.#at + RECORD_BYTES + Header.rowCount, true));
  }

  /** The apache-arrow Schema of the frame (no buffer is touched). */
  get schema(): Schema {
    return schemaOfFrame(this.description);
  }

  /** True once the lease ended (release(), the consumer closing). */
  get released(): boolean {
    return this.#released;
  }

  /** The frame as an apache-arrow Table whose buffers are the producer's memory (no copy). */
  toTable(): Table {
    this.#requireLeased();
    return this.#source.fastTable(this.#bytes, this) ?? tableFromFrame(this.description, (b) => this.#resolve(b));
  }

  /**
   * The columns as typed arrays over the frame's memory (ColumnView), without
   * building apache-arrow objects: host buffers in place, device buffers copied
   * to the host (use mapDevice() to keep them on the device). Var-size offsets
   * are checked as for toTable(). Valid until release, like toTable()'s views.
   * Dictionary-encoded columns give their indices.
   */
  columns(): ColumnView[] {
    this.#requireLeased();
    return this.description.columns.map((c) => columnView(c, (b) => this.#resolve(b)));
  }

  /** One column by name or position; undefined when there is none. */
  column(which: string | number): ColumnView | undefined {
    this.#requireLeased();
    const columns = this.description.columns;
    const c = typeof which === 'number' ? columns[which] : columns.find((col) => col.name === which);
    return c && columnView(c, (b) => this.#resolve(b));
  }

  #requireLeased(): void {
    if (this.#released) throw new GpuringError('FRAME_STATE', 'the frame was released; its memory belongs to the producer again');
  }

  /**
   * The frame's device buffers in place: for each buffer in wire order (as
   * forEachBuffer visits them), its address in this process, or null for host
   * and absent buffers. No copy. Valid until release; order GPU work that reads
   * them after the producer's (see synchronize()).
   */
  mapDevice(): (DeviceView | null)[] {
    this.#requireLeased();
    return [...this.#deviceViews()];
  }

  /** Every device buffer mapped, once per frame; per buffer in wire order. */
  #deviceViews(): (DeviceView | null)[] {
    const r = this.#records;
    const origin = { segment: this.#source.segment, producer: this.producer, producerGen: r.getUint32(this.#at + 20, true) };
    return (this.#views ??= this.#devices.mapAll(this.#bytes, origin));
  }

  /**
   * Waits on the host until the producer's GPU work that fills the frame's
   * device buffers is complete. Not needed before toTable() or copyToDevice()
   * (they order themselves on the device); for code that hands the buffers'
   * addresses to other libraries. Returns at once for host frames.
   */
  synchronize(): void {
    this.#requireLeased();
    const event = this.#event();
    if (event) callNative(() => native().synchronizeEvent(this.#firstDevice(), event));
  }

  /**
   * Copies every buffer of the frame into device memory this process owns:
   * device buffers device-to-device after the producer's event, host buffers
   * uploaded. By default into one new allocation on `device` (default: the
   * device of the frame's first device buffer, else 0), freed by the copy's
   * `free()`; with `into`, into that buffer instead (it must be on the target
   * device and hold `copyBytes()`; it stays the caller's). Complete on return:
   * release the frame whenever you like.
   *
   * With `stream` (on the target device), the device-to-device copies are only
   * queued there and the call returns at once; the copy is complete when the
   * stream gets to it. Release the frame with `release({ stream })` so that
   * the lease outlasts the queued copies.
   */
  copyToDevice({ device, into, stream }: { device?: number; into?: DeviceBuffer; stream?: DeviceStream | bigint } = {}): DeviceFrameCopy {
    this.#requireLeased();
    const originals = this.#buffers();
    const target = device ?? into?.device ?? (stream instanceof DeviceStream ? stream.device : this.#firstDevice(originals));
    const queue = stream === undefined ? undefined : DeviceStream.handleOf(stream);
    if (stream instanceof DeviceStream && stream.device !== target)
      throw new GpuringError('INVALID_ARGUMENT', `copyToDevice({ stream }) needs a stream on the target device ${target}, not device ${stream.device}`);
    const at = copyLayout(originals);
    const total = at.pop()!;
    if (into && (into.device !== target || into.byteLength < total || into.freed))
      throw new GpuringError('INVALID_ARGUMENT', `copyToDevice({ into }) needs a live buffer of at least ${total} bytes on device ${target}`);
    const memory = into ?? DeviceBuffer.alloc(Math.max(total, 256), { device: target });
    try {
      const views = this.#deviceViews();
      const dsts: bigint[] = [];
      const srcs: bigint[] = [];
      const lengths: number[] = [];
      originals.forEach((b, i) => {
        const view = views[i];
        if (view) {
          dsts.push(memory.ptr + BigInt(at[i]!));
          srcs.push(view.ptr);
          lengths.push(b.length);
        } else if (b.kind === 'host') memory.upload(this.#resolve(b), at[i]);
      });
      // One native call and one wait for every device buffer of the frame.
      if (lengths.length)
        callNative(() => native().copyDeviceToDevice(target, BigUint64Array.from(dsts), BigUint64Array.from(srcs), Float64Array.from(lengths), this.#event(), queue));
      return new DeviceFrameCopy(this.description, at, memory, !into);
    } catch (error) {
      if (!into) memory.free();
      throw error;
    }
  }

  /** Bytes `copyToDevice({ into })` needs: every buffer, each 256-byte aligned. */
  copyBytes(): number {
    return copyLayout(this.#buffers()).pop()!;
  }

  /** This process's ordinal of the device of the frame's first device buffer, else 0. */
  #firstDevice(buffers = this.#buffers()): number {
    const first = buffers.find((b) => isDeviceKind(b.kind));
    return first ? deviceOrdinalOf(first.deviceUuid) : 0;
  }

  /** Every buffer of the frame, in wire order. */
  #buffers(): BufferDescriptor[] {
    const buffers: BufferDescriptor[] = [];
    forEachBuffer(this.description, (b) => buffers.push(b));
    return buffers;
  }

  /**
   * Ends the lease. Calling it again does nothing. The slot is free for the
   * producer at once; a producer asleep waiting for space is woken when the
   * current JavaScript job ends (or this consumer next takes a frame), once
   * for all the releases of that job (SPEC.md §6, Coalescing).
   *
   * With `stream` (a DeviceStream, or a CUstream of another library as a
   * bigint, 0n for the legacy default stream), returns at once but the lease
   * ends only when the stream has completed the work queued on it before this
   * call: the producer cannot reuse the memory under reads still in flight.
   * No host thread waits for it (the driver runs the release when the stream
   * gets there). `consumer.close()` waits for such releases still pending.
   * The frame's own methods must not be used after either kind of release.
   */
  release({ stream }: { stream?: DeviceStream | bigint } = {}): void {
    if (this.#released) return;
    if (stream === undefined) {
      this.#released = true;
      this.#settle()?.devices?.releaseAll();
      this.#source.release(this.#pos);
      return;
    }
    const device = stream instanceof DeviceStream ? stream.device : this.#firstDevice();
    const handle = DeviceStream.handleOf(stream);
    if (this.#lease?.devices?.holdsImports) {
      // Pool and VMM imports are freed before the release (SPEC.md §9b, §9d),
      // which a driver callback may not do: wait for the stream here instead.
      callNative(() => native().streamSynchronize(device, handle));
      return this.release();
    }
    this.#source.releaseAfter(this.#pos, device, handle, this.#devices.handles());
    this.#released = true;
    this.#settle()?.devices?.forget();
  }

  /** Tells the consumer the lease ended; the lease, if one was made (a frame released at once has none). */
  #settle(): Lease | undefined {
    if (this.#lease) this.#source.settle(this, this.#lease);
    return this.#lease;
  }

  /** release(), for `using`. */
  [Symbol.dispose](): void {
    this.release();
  }

  /** @internal A frame taken in a batch but never given to the user goes back to the ring. */
  handBack(): void {
    if (this.#released) return;
    this.#released = true;
    this.#settle();
    this.#source.handBack(this.#pos);
  }

  /**
   * The producer's event, when the frame carries one: its 64-byte handle, then
   * the producer's entry and generation (u32 each), then the ring's name
   * (UTF-8). The native core keeps the events it opens under all those bytes:
   * a handle names its event only while that producer lives, a later process
   * may be given the same bytes, and the producers of two rings may share an
   * entry and a generation.
   */
  #event(): Uint8Array | null {
    if (this.description.syncKind !== 2) return null;
    if (!this.#eventKey) {
      const ring = utf8(this.#source.segment);
      this.#eventKey = new Uint8Array(HANDLE_BYTES + 8 + ring.byteLength);
      this.#eventKey.set(this.description.syncHandle);
      this.#eventKey.set(new Uint8Array(this.#records.buffer, this.#records.byteOffset + this.#at + 16, 8), HANDLE_BYTES);
      this.#eventKey.set(ring, HANDLE_BYTES + 8);
    }
    return this.#eventKey;
  }

  #resolve(b: BufferDescriptor): Uint8Array {
    if (isDeviceKind(b.kind)) return deviceToHost(this.#deviceViews()[(this.#index ??= bufferIndex(this.description)).get(b)!]!, this.#event());
    return arenaView(this.#source.arena(handleName(b.handle)), b.offset, b.length);
  }
}
