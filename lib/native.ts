/**
 * Loads the addon. Every place it may be is tried, and if none works the error
 * lists each attempt with its reason and says how to fix it.
 */
import { constants } from 'node:buffer';
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GpuringError } from './errors.js';
import type { Frame } from './frame.js';
import type { Spare } from './spare-frame.js';

export interface NativeSegmentHandle {
  inspect(): RingInspection;
  sweep(): SweepReport;
  close(): void;
}

/** What Ring.inspect() and `gpuring inspect --json` report: header, slot occupancy, participants. */
export interface RingInspection {
  /** The ring's name. */
  name: string;
  /** Format version of the segment, MAJOR.MINOR (SPEC.md). */
  version: string;
  /** The layout hash the segment was created with, hex. */
  layoutHash: string;
  /** Bytes of the segment. */
  totalBytes: number;
  /** Slots: frames the ring holds at once. */
  slotCount: number;
  /** Participants that may attach at once. */
  participantCapacity: number;
  /** 'each' frame to one consumer (a work queue), or 'all' subscribers get every frame (a broadcast ring). */
  delivery: 'each' | 'all';
  /** The process that created the segment. */
  creatorPid: number;
  /** When it was created, ms since 1970. */
  createdUnixMs: number;
  /** Slots in each state. */
  slots: Record<'empty' | 'writing' | 'ready' | 'claimed' | 'leased' | 'released', number>;
  /** Slots a consumer holds (claimed or leased), in slot order. */
  heldSlots: SlotInfo[];
  /**
   * The occupied slot with the lowest position, null when every slot is empty.
   * `blocksProducers`: the ring is full up to it, so no producer can publish
   * until its holder (the participant named; see its state) lets it go.
   */
  oldest: OldestSlot | null;
  /** Every participant entry in use, alive or dead. */
  participants: ParticipantInfo[];
  /** Slots repaired after dead participants, in all. */
  recovered: number;
  /** Frames handed back for another consumer after their consumer died, in all. */
  redelivered: number;
  /** Participants asleep on their doorbells, by what they wait for (the control block's counts). */
  doorbells: {
    /** Consumers asleep waiting for frames. */
    data: number;
    /** Producers asleep waiting for space or releases. */
    space: number;
  };
}

/** A ring's oldest occupied slot (RingInspection.oldest). */
export interface OldestSlot extends SlotInfo {
  /** Producers wait for this slot: the ring is full up to it. */
  blocksProducers: boolean;
}

/** An occupied slot of a ring (Ring.inspect()). */
export interface SlotInfo {
  /** Its index, 0 to slotCount - 1. */
  slot: number;
  /** The frame's position in the ring (48-bit, counting from 0). */
  position: number;
  /** What the frame in it is doing (SPEC.md §5.1); damaged: a state no participant writes. */
  state: 'writing' | 'ready' | 'claimed' | 'leased' | 'released' | 'damaged';
  /** The participant index the slot word names: the producer while writing, ready or released, the consumer while claimed or leased. */
  participant: number | null;
}

/** A producer or consumer in a ring's participant table (Ring.inspect()). */
export interface ParticipantInfo {
  /** Entry in the participant table. */
  index: number;
  /** Grows at every attach to the entry, so that an earlier occupant's arenas are never taken for this one's. */
  generation: number;
  /** active; dead (gone, with frames still naming it); attaching or freeing (in transition); damaged. */
  state: 'active' | 'dead' | 'attaching' | 'freeing' | 'damaged';
  /** What this participant sleeps on its doorbell for (SPEC.md §6.1): nothing while awake. */
  asleep: ('data' | 'space')[];
  /** Its process (pid and start time) still runs. */
  alive: boolean;
  /** Process id. */
  pid: number;
  /** What it attached as. */
  /** `bridge`: a `gpuring bridge` end, forwarding frames to or from another machine (SPEC.md §14). */
  roles: ('producer' | 'consumer' | 'bridge')[];
  /** When it attached, ms since 1970. */
  attachedUnixMs: number;
  /** Shared-memory arenas it created (producers). */
  arenas: number;
  /** Frames this participant holds (claimed or leased; a broadcast subscriber: taken, not released). */
  leases: number;
  /** Frames this participant published so far. */
  published: number;
  /** Frames it took (claims that became leases). */
  leased: number;
  /** Frames it released. */
  released: number;
  /** Broadcast rings: where this subscriber stands. */
  subscriber?: SubscriberInfo;
}

/** A broadcast ring's subscriber (SPEC.md §5.4). */
export interface SubscriberInfo {
  /** What producers do when it falls a ring behind. */
  onSlow: 'block' | 'drop-oldest' | 'evict' | 'damaged';
  /** The next position it reads. */
  cursor: number;
  /** Evicted, and not yet told so. */
  evicted: boolean;
  /** Frames it took and has not released. */
  held: number;
  /** Frames published to it that it has not taken yet. */
  unread: number;
  /** Frames dropped for it by its policy, in all. */
  missed: number;
}

/** What one sweep for dead participants repaired. */
export interface SweepReport {
  /** Participants newly found dead. */
  foundDead: number;
  /** Participant entries freed (their arenas unlinked). */
  freed: number;
  /** Unpublished claims of dead producers skipped. */
  skipped: number;
  /** Frames dead consumers had claimed, handed to other consumers. */
  redelivered: number;
  /** Leases of dead consumers released for them. */
  released: number;
  /** Released frames of dead producers recycled. */
  recycled: number;
  /**
   * Damage repaired (SPEC.md §7 step 2): slot words no participant could have
   * written, nobody will move, or laps from the rest, reset to empty; and hints
   * laps from the slots, put back.
   */
  corrupt: number;
}

/** A body held by the native core (NativeProducerCore.prepare()): opaque to JS. */
export type PreparedBody = { readonly __preparedBody: never };

export interface NativeProducerCore {
  readonly index: number;
  readonly generation: number;
  /** The ring's count of consumers asleep on a DATA doorbell (shared memory; 1 when it cannot be read, 0 always where headsUp() gives none: fewer than 4 CPUs): headsUp() is worth a call only when it is not 0. */
  readonly sleepers: Uint32Array;
  /** How many released frame ids takeReleased() would give now (the core's own cell): a publish takes them only when there are some. */
  readonly releasedCount: Float64Array;
  /** The most bytes allocate() takes: its arena must be one JS can be lent whole (buffer.constants.MAX_LENGTH). */
  readonly largestAllocation: number;
  allocate(bytes: number): [number, number, number];
  free(arena: number, offset: number): void;
  arenaBuffer(arena: number): ArrayBuffer;
  arenaName(arena: number): string;
  publish(body: Uint8Array, allocations: Float64Array, tag: bigint, timeoutMs: number): number | Promise<number>;
  /** A checked private copy of a body that owns no allocation, for publishPrepared(); freed when collected. */
  prepare(body: Uint8Array): PreparedBody;
  /** publish() of a prepare()d body, which is not checked again. */
  publishPrepared(prepared: PreparedBody, tag: bigint, timeoutMs: number): number | Promise<number>;
  /**
   * `count` frames of one body: the first `atOnce` went into the ring at once,
   * with ids firstId, firstId + 1, ...; each later one waits for space. Fewer
   * than `count` in all with timeout 0 when the ring filled.
   */
  publishMany(body: Uint8Array, count: number, tags: BigUint64Array | null, timeoutMs: number): [firstId: number, atOnce: number, ...waiting: Promise<number>[]];
  /** A flat frame whose host buffers give offsets into the first `bytes` of `staged`: both copied into one allocation, the buffers placed there. */
  publishStaged(body: Uint8Array, staged: Uint8Array, bytes: number, tag: bigint, timeoutMs: number): number | Promise<number>;
  onRelease(callback: ((frameIds: Float64Array) => void) | null): void;
  stats(): ProducerStats;
  /** The broadcast ring's subscribers now; -1 on a work-queue ring. */
  subscribers(): number;
  keepAlive(on: boolean): void;
  /** Whether JS waits for releases as they happen (drain, listeners): the core then watches every release. */
  promptReleases(on: boolean): void;
  takeReleased(): Float64Array;
  /**
   * Rings a sleeping consumer now, ahead of a publish; the next publish call passes on whom it rang (SPEC.md §6.1, heads-up).
   * `asked`: the application's Producer.headsUp(), which rings on any machine; otherwise only with 4 or more CPUs.
   * Returns whether a sleeper was reached (by this call or one pending from less than 1 ms before).
   */
  headsUp(asked: boolean): boolean;
  close(): void;
}

/** A producer's own counts (Producer.stats()). */
export interface ProducerStats {
  /** Frames published and not yet released and reclaimed. */
  inFlight: number;
  /** publish() calls waiting for space in the ring. */
  waiting: number;
  /** allocate() results no frame has used yet. */
  unpublishedAllocations: number;
  /** Arenas this producer has created. */
  arenas: number;
  /** Free bytes left in them. */
  arenaFreeBytes: number;
}

/**
 * A received frame as the native consumer hands it over: a 32-byte record
 * (pos f64, frame id f64, producer u32, producer generation u32, tag u64, all
 * little-endian) followed by a private, already validated copy of the body,
 * 8-aligned. Records are written one after another into chunks: the result is
 * the record's offset in the chunk last handed over, or a new chunk that
 * starts with the record.
 */
export type ReceivedRecord = number | ArrayBuffer | SpareFrameObject;
/** A Frame JS offered the core with wait() (lib/spare-frame.ts), handed back as the record's Frame. */
export type SpareFrameObject = object;

export interface NativeConsumerCore {
  readonly index: number;
  readonly generation: number;
  tryNext(spinMicros?: number): ReceivedRecord | null;
  /**
   * Every frame ready now, up to `max`, as records back to back in one buffer
   * (`used` bytes of it); never waits. With `after` (frames of the batch went
   * to the caller already) an error is held for the next call, not thrown.
   */
  tryNextMany(max: number, after?: boolean): [records: ArrayBuffer, used: number] | null;
  /**
   * The next record, the calling thread blocked until it comes (asleep on the doorbell); throws TIMEOUT after
   * timeoutMs (-1: never). `true`: the record landed where JS made its spare Frame (`at`), whose pos went into
   * cell `cell` (lib/spare-frame.ts).
   */
  nextSync(timeoutMs: number, spinMicros: number, at?: number, cell?: number): ReceivedRecord | true;
  /**
   * A request id and its promise: the record, or received(record) (see the
   * constructor); or `spare`, a Frame over offset `at` of the chunk last handed
   * over, when the record is written there (see recordCursor), with its pos
   * written to element `cell` of the array given to spareCells(). tryNext()
   * hands the spare over alike. A non-zero `iteration` makes it the wait of a
   * `for await` loop (lib/consumer-frames.ts): the promise settles as an
   * iterator result instead, `{ value, done: false }`, or `{ done: true }`
   * where it would reject with CLOSED or ABORTED; `spareResult`, made by JS
   * as `{ value: spare, done: false }`, is what it settles with when the
   * record lands in the spare.
   */
  wait(timeoutMs: number, iteration: number, spare?: object, at?: number, cell?: number, spareResult?: object): [number, Promise<unknown>];
  /**
   * From the next turn of the event loop on, each frame goes to
   * `deliver(record)` as the wake-up takes it, and what taking one threw to
   * `deliver(undefined, error)`, until unlisten() or close(). Throws
   * UNSUPPORTED while a wait() is pending; while listening, every other way
   * of taking frames throws UNSUPPORTED. `spare()` is called as the listener
   * goes to sleep: the Frame it makes (as wait() is offered one) is what the
   * next record becomes if it lands there; such a record, a Frame already,
   * goes to `handler` itself rather than through `deliver`.
   */
  listen(deliver: (record: ReceivedRecord | undefined, error?: unknown) => void, spare?: () => Spare | undefined, handler?: (frame: Frame) => void): void;
  /** No frame goes to the listener after this; those not yet taken stay in the ring. */
  unlisten(): void;
  /** Where spares' pos go from now on (lib/spare-frame.ts); a spare whose cell lies beyond it is not handed over. */
  spareCells(cells: Float64Array): void;
  cancel(request: number): void;
  /** Ends every wait of that `for await` loop: each resolves `{ done: true }`. */
  cancelIteration(iteration: number): void;
  /** CLOCK_MONOTONIC ns of the last wake-up of the event loop for this consumer (doorbell or timer); 0n before the first. */
  wokenAt(): bigint;
  /** Ends the lease; true when a space notification is now owed (work-queue rings): call notifySpace() once this job's releases are done. */
  release(pos: number): boolean;
  /** Sends the space notification owed for releases since the last (a waiting producer wakes once per batch of releases). */
  notifySpace(): void;
  /** [0] is non-zero while a space notification is owed (shared with the native core). */
  readonly spaceOwed: Uint32Array;
  /** Counts the times the core let go of arenas no frame can refer to any more: openArena() buffers cached before then may read zeros. */
  readonly arenasTakenBack: Uint32Array;
  /** Where the next record goes (shared with the native core): [0] its chunk's serial, [1] the offset in it. */
  readonly recordCursor: Float64Array;
  /** The chunk single records go to first (later ones come as a ReceivedRecord). */
  readonly recordChunk: ArrayBuffer;
  /** Gives a leased frame its user never saw back to the ring, for redelivery. */
  handBack(pos: number): void;
  releaseAfter(pos: number, device: number, stream: bigint, mappings: Uint8Array): void;
  /** Arena `name` lent whole, or its size when it is larger than lendLimit() (then read it through openArenaWindow()). */
  openArena(name: string): ArrayBuffer | number;
  /** The bytes [start, start + length) of arena `name` as their own buffer; `start` a multiple of the page size. */
  openArenaWindow(name: string, start: number, length: number): ArrayBuffer;
  close(): void;
}

/** Device memory made shareable: its allocation's IPC handle and the pointer's offset in it. */
export interface DeviceExport {
  /** cuda-ipc for cudaMalloc memory, cuda-pool for memory of an exportable stream-ordered pool, cuda-vmm for gpuring's VMM memory. */
  kind: 'cuda-ipc' | 'cuda-pool' | 'cuda-vmm';
  /** 64 bytes: the allocation's CUipcMemHandle (cuda-ipc), CUmemPoolPtrExportData (cuda-pool), or the span's bytes u64 and chunk count u32 (cuda-vmm). */
  handle: Uint8Array;
  /** Bytes from the allocation's base to the pointer. */
  offset: number;
  /** The allocation's base address. */
  base: bigint;
  /** Bytes of the whole allocation. */
  allocationBytes: number;
  /** Device ordinal in this process. */
  device: number;
  /** CU_POINTER_ATTRIBUTE_BUFFER_ID, unique per allocation for the process's lifetime; cuda-vmm: the span number, never reused by the process. */
  allocationId: bigint;
  /** cuda-pool: this process's number for the pool (0n for cuda-ipc). */
  poolId: bigint;
}

/** toTable()'s pinned host blocks (PinnedHostPool). */
export interface PinnedHostStats {
  /** Bytes of page-locked host memory the pool holds, in use or idle. */
  pinnedBytes: number;
  /** Of those, bytes in blocks no table uses now, ready for reuse. */
  idleBytes: number;
  /** The most the pool pins: a quarter of physical memory, at most 16 GiB. */
  limitBytes: number;
}

/** The consumer-side mapping cache (one open per allocation per process). */
export interface IpcStats {
  entries: number;
  referenced: number;
  mappedBytes: number;
  opens: number;
  closes: number;
  hits: number;
}

/** Interprocess events of this process (pooled by producers) and of others (opened by consumers). */
export interface EventStats {
  /** Events this process made for its frames. */
  pooled: number;
  /** Of those, the ones free for the next frame. */
  idle: number;
  /** Other processes' events held open, at most OpenedEvents::kPerDevice per device. */
  opened: number;
}

/** What the CUDA driver reports (see lib/cuda.ts). */
export interface CudaInfo {
  /** libcuda.so.1 loaded and cuInit succeeded. */
  available: boolean;
  /** Why CUDA is not available. */
  error?: string;
  /** As cuDriverGetVersion reports it (12040 is 12.4). */
  driverVersion?: number;
  /** The devices visible to this process, by ordinal. */
  devices: DeviceInfo[];
}

/** One CUDA device as cudaInfo() reports it. */
export interface DeviceInfo {
  /** Device ordinal in this process (after CUDA_VISIBLE_DEVICES). */
  ordinal: number;
  /** The product name. */
  name: string;
  /** As nvidia-smi prints it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx. */
  uuid: string;
  /** The UUID's 16 bytes, as frames carry it. */
  uuidBytes: Uint8Array;
  /** Device memory in all. */
  totalBytes: number;
  /** Device memory free when cudaInfo() ran. */
  freeBytes: number;
  /** Whether this device's memory can be exported with CUDA IPC here, and if not why. */
  ipc: {
    /** cuIpcGetMemHandle works on this device's memory. */
    ok: boolean;
    /** Why it does not. */
    reason?: string;
  };
  /** peerAccess[j]: this device can access device j's memory directly. */
  peerAccess: boolean[];
}

export interface NativeAddon {
  SegmentHandle: {
    new (name: string, create: boolean, slotCount: number, participantCapacity: number, mode: number, openTimeoutMs: number, openFlags?: number, delivery?: number): NativeSegmentHandle;
    unlink(name: string): void;
  };
  ProducerCore: new (name: string, arenaBytes: number, openTimeoutMs: number, openFlags: number, sweepIntervalMs: number) => NativeProducerCore;
  /**
   * With `received` and `failed`, a wait() promise resolves to received(record)
   * and rejects with failed(error); the core holds both weakly.
   */
  ConsumerCore: new (
    name: string,
    openTimeoutMs: number,
    sweepIntervalMs: number,
    openFlags: number,
    received?: (record: ReceivedRecord) => unknown,
    failed?: (error: unknown) => unknown,
    /** Broadcast rings: gpr_on_slow (0 block, 1 drop-oldest, 2 evict). */
    onSlow?: number,
    /** Broadcast rings: also take the frames still in the ring. */
    fromOldest?: boolean,
  ) => NativeConsumerCore;
  /** Producer and consumer states of this process not yet freed: closed ones go with their objects (the leak tests). */
  liveParticipants(): number;
  cudaInfo(): CudaInfo;
  deviceAlloc(ordinal: number, bytes: number): bigint;
  deviceFree(ordinal: number, ptr: bigint): void;
  deviceUpload(ordinal: number, ptr: bigint, bytes: Uint8Array): void;
  deviceDownload(ordinal: number, ptr: bigint, bytes: number): ArrayBuffer;
  deviceUuids(): Uint8Array[];
  rawCopySeconds(kind: 'dtoh' | 'htod' | 'dtod', device: number, bytes: number, iterations: number): number;
  allocOtherMemory(kind: 'pinned' | 'managed' | 'pool' | 'vmm', bytes: number): bigint;
  /** Writes the export into `out` (112 bytes; read by exportDeviceMemory() in device-buffer.ts). */
  exportDeviceMemory(ptr: bigint, out: Uint8Array): void;
  ipcReleaseAll(handles: Uint8Array): void;
  /**
   * Writes into `out`: count u32 | legacy u32 | imported u32 | 0 u32 | count views of 24 bytes | legacy 64-byte handles |
   * imported u64 ids (see cuda_ipc.cc); returns the bytes written, or minus the size `out` needs (nothing mapped).
   */
  mapFrame(body: Uint8Array, segment: string, producer: number, producerGen: number, out: Uint8Array): number;
  importReleaseAll(ids: BigUint64Array): void;
  /** Pools imported now and ever; allocation imports held now, made and freed ever. */
  poolStats(): { pools: number; poolsImported: number; imports: number; imported: number; freed: number };
  deviceAllocPool(device: number, bytes: number): bigint;
  deviceAllocVmm(device: number, bytes: number): bigint;
  ipcStats(): IpcStats;
  eventStats(): EventStats;
  pinnedHostStats(): PinnedHostStats;
  reservePinnedHost(device: number, bytes: number): boolean;
  ipcSetLimits(entries: number, bytes: number): void;
  /** The event's id with its 64-byte IPC handle written into `handle`; -1 (nothing written) when `onlyIfBusy` and the stream is idle. */
  recordEvent(device: number, onlyIfBusy: boolean, stream: bigint | undefined, handle: Uint8Array): number;
  recycleEvent(id: number): void;
  /**
   * `event` in the calls below: the producer's event to order after, its 64-byte
   * handle, optionally followed by the key bytes it is kept open under (a Frame
   * adds its producer's entry and generation; see Frame's #event()).
   */
  copyToHost(device: number, ptr: bigint, bytes: number, event: Uint8Array | null): ArrayBuffer;
  copyDeviceToDevice(device: number, dsts: BigUint64Array, srcs: BigUint64Array, lengths: Float64Array, event: Uint8Array | null, stream?: bigint): void;
  streamCreate(device: number): bigint;
  streamSynchronize(device: number, stream: bigint): void;
  streamDestroy(device: number, stream: bigint): void;
  synchronizeEvent(device: number, event: Uint8Array): void;
  deviceMemsetAsync(device: number, ptr: bigint, value: number, bytes: number, times: number, stream?: bigint, stallMs?: number): void;
  /** The most bytes one ArrayBuffer over shared memory may hold here (buffer.constants.MAX_LENGTH): larger mappings are refused with UNSUPPORTED. */
  setLendLimit(bytes: number): void;
  lendLimit(): number;
  errorCodes: string[];
  layoutHash: string;
  versionMajor: number;
  versionMinor: number;
}

const packageRoot = join(dirname(fileURLToPath(import.meta.url)), '..');

/**
 * Loads GPURING_ADDON if set, else what node-gyp-build finds: a local build
 * (build/Release, build/Debug) before the prebuilt addon the package ships
 * (prebuilds/<platform>-<arch>/). Every failure goes into one message.
 */
function load(): NativeAddon {
  const require = createRequire(import.meta.url);
  const failures: string[] = [];
  const attempt = (path: string): NativeAddon | undefined => {
    try {
      return require(path) as NativeAddon;
    } catch (error) {
      failures.push(`  ${path}: ${(error as Error).message}`);
      return undefined;
    }
  };
  const override = process.env.GPURING_ADDON;
  if (override && !existsSync(override)) failures.push(`  ${override} (GPURING_ADDON): no such file`);
  const chosen = override && existsSync(override) ? attempt(override) : undefined;
  if (chosen) return configured(chosen);
  let found: string | undefined;
  try {
    found = (require('node-gyp-build') as { path(dir: string): string }).path(packageRoot);
  } catch {
    failures.push(`  ${join(packageRoot, 'build')}/{Release,Debug}, ${join(packageRoot, 'prebuilds', `${process.platform}-${process.arch}`)}: no addon built or prebuilt for this platform`);
  }
  const loaded = found && attempt(found);
  if (loaded) return configured(loaded);
  const platform = process.platform === 'linux' ? '' : `\ngpuring runs on Linux only; this is ${process.platform}.`;
  throw new GpuringError(
    'NATIVE_LOAD',
    `gpuring's native addon could not be loaded. Tried:\n${failures.join('\n')}${platform}\n` +
      'Fix: build it with `npm rebuild gpuring` (or `npm run build:native` in a checkout); ' +
      'that needs cmake (3.20+) and a C++17 compiler, and no network.',
  );
}

/** Tells the addon what this Node allows: Node runs an outside buffer's finalizer at once when it refuses its size, which the addon must never ask for. */
function configured(loaded: NativeAddon): NativeAddon {
  loaded.setLendLimit(constants.MAX_LENGTH);
  return loaded;
}

let addon: NativeAddon | undefined;

/** The addon, loaded on first use so that importing gpuring never throws. */
export function native(): NativeAddon {
  addon ??= load();
  return addon;
}
