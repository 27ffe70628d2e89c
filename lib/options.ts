/**
 * Options of every public entry point, validated with zod. Objects are strict:
 * a misspelt key is an error that names it, not a silently ignored setting.
 */
import { z } from 'zod';
import { DeviceStream } from './device-stream.js';
import { GpuringError, shown } from './errors.js';

const segmentName = z
  .string()
  .regex(/^[A-Za-z0-9_-]{1,32}$/, 'segment names are 1 to 32 of A-Z a-z 0-9 _ -');

const milliseconds = z.number().nonnegative();

export const createOptions = z
  .object({
    /** Ring slots: frames queued or leased at once. Power of two, 2 to 1,048,576. */
    slots: z.number().int().min(2).max(1 << 20).refine((n) => (n & (n - 1)) === 0, 'must be a power of two').default(1024),
    /** Processes that may attach at once. */
    participants: z.number().int().min(1).max(8190).default(64),
    /** File mode of the segment and of producers' arenas. */
    mode: z.number().int().min(0o400).max(0o777).default(0o600),
    /**
     * When the name is taken: 'fail' with SEGMENT_EXISTS, or 'open' the ring
     * that is there as it is (its own slots, participants and mode), so that a
     * producer can be started again without removing the ring first.
     */
    ifExists: z.enum(['fail', 'open']).default('fail'),
    /**
     * Who receives a frame: 'each' frame goes to one consumer (a work queue),
     * or 'all' subscribers receive every frame (a broadcast ring, at most 64
     * participants; see Consumer.open's `onSlow`).
     */
    delivery: z.enum(['each', 'all']).default('each'),
  })
  .strict()
  .refine((o) => o.delivery === 'each' || o.participants <= 64, { message: 'a broadcast ring (delivery: all) holds at most 64 participants', path: ['participants'] });

export const waitOptions = z
  .object({
    /** Milliseconds to wait (default: no limit); the wait then fails, saying what it waited for. */
    timeout: milliseconds.default(Infinity),
    /** Stops the wait with ABORTED. */
    signal: z.instanceof(AbortSignal).optional(),
  })
  .strict();

/**
 * Join a ring another user created. Refused by default (SEGMENT_OWNER): whoever
 * creates the name first chooses the modes of the segment and of the joiners'
 * arenas, and could read or rewrite every frame.
 */
const anyOwner = z.boolean().default(false);

/**
 * Milliseconds to wait for a segment another process is still initializing. A
 * ring that does not exist yet fails at once with SEGMENT_NOT_FOUND: wait for
 * it with Ring.waitFor().
 */
const openTimeout = milliseconds.default(1000);

export const openOptions = z
  .object({
    openTimeout,
    anyOwner,
  })
  .strict();

/** The native open flags (GPR_OPEN_*) for parsed options. */
export const openFlags = (o: { anyOwner: boolean }) => (o.anyOwner ? 1 : 0);

const sweepInterval = z.number().int().min(1).max(2 ** 31).default(250);

export const producerOptions = z
  .object({
    /**
     * Size of each shared-memory arena that holds this producer's buffers (a
     * larger buffer gets an arena of its own size). Unset: the first arena is
     * 1 MiB and each next one doubles, up to 64 MiB, so that a producer of
     * small frames does not reserve (and zero) 64 MiB before its first one.
     * When /dev/shm cannot hold an arena of this size but can hold the
     * allocation, the arena is made just large enough for the allocation.
     * Cut to `buffer.constants.MAX_LENGTH` (4 GiB before Node.js 22): each
     * arena is lent to JS as one ArrayBuffer, and no allocation may need more.
     */
    arenaBytes: z.number().int().min(1 << 16).max(2 ** 40).optional(),
    openTimeout,
    anyOwner,
    /**
     * Milliseconds a producer waiting for space (or for releases, in drain())
     * sleeps at most before it sweeps for dead consumers (whose leases would
     * hold the ring up). Releases wake it at once whatever this is.
     */
    sweepInterval,
  })
  .strict();

export const consumerOptions = z
  .object({
    openTimeout,
    anyOwner,
    /**
     * Milliseconds a consumer waiting in next() sleeps at most before it sweeps
     * for dead participants (whose unfinished claims would hold the ring up).
     * Frames wake it at once whatever this is.
     */
    sweepInterval,
    /**
     * Broadcast rings: what producers do when this consumer falls a whole ring
     * behind. 'block': wait for it (the ring stays full); 'drop-oldest': drop
     * the oldest frame it has not taken; 'evict': drop every frame it has not
     * taken at once. A consumer that lost frames learns it once: next()
     * rejects with FRAMES_MISSED or EVICTED (`error.missed` says how many)
     * before it resolves with any frame published after them, and the next
     * call goes on with the frames published since.
     * Frames it has taken are never taken back.
     */
    onSlow: z.enum(['block', 'drop-oldest', 'evict']).default('block'),
    /**
     * Broadcast rings: 'newest' receives the frames published from now on;
     * 'oldest' also those still in the ring (some subscriber has yet to release
     * them), in order, before the new ones, frames being published as it joins
     * included: opening waits up to 10 ms in all for those publishes to end (a
     * publish held up longer, its producer descheduled or dead there, may reach
     * it by neither way). Frames every subscriber had released before it joined
     * are not among them, so its frames of one producer can skip some between
     * the old ones.
     */
    start: z.enum(['newest', 'oldest']).default('newest'),
  })
  .strict();

/** The native on_slow number (gpr_on_slow) of a parsed `onSlow`. */
export const onSlowPolicy = (o: { onSlow: 'block' | 'drop-oldest' | 'evict' }) => ['block', 'drop-oldest', 'evict'].indexOf(o.onSlow);

/** A CUDA stream: a DeviceStream, or a CUstream of another library as a bigint (0n: the legacy default stream). */
const stream = z.union([z.bigint().min(0n), z.custom<DeviceStream>((v) => v instanceof DeviceStream, 'a DeviceStream or a CUstream as a bigint')]).optional();

export const publishOptions = z
  .object({
    /** How long to wait for space when the ring is full: 0 fails at once with RING_FULL. */
    timeout: z.number().nonnegative().default(Infinity),
    /** A number for the application, carried with the frame. */
    tag: z.bigint().min(0n).max(2n ** 64n - 1n).default(0n),
    /** Upload the columns to this CUDA device and publish them as cuda-ipc buffers. */
    device: z.number().int().min(0).optional(),
    /** Device frames: the stream whose queued work readers are ordered after (default: the legacy default stream). */
    stream,
  })
  .strict();

/** PreparedFrame.publish(): the device was fixed at prepare(). */
export const preparedPublishOptions = publishOptions.omit({ device: true });

export const publishManyOptions = z
  .object({
    timeout: z.number().nonnegative().default(Infinity),
    /** The number each frame carries, by position. */
    tags: z.instanceof(BigUint64Array).optional(),
    stream,
  })
  .strict();

/** FrameLoan.publish(): host memory written in place, so no device or stream; `rows` defaults to the loan's. */
export const loanPublishOptions = publishOptions.pick({ timeout: true, tag: true }).extend({ rows: z.number().int().min(0).optional() }).strict();

export const prepareOptions = z.object({ device: z.number().int().min(0).optional() }).strict();

/** Options of Producer.loan(): character bytes per utf8/binary column, by name. */
export const loanOptions = z.object({ bytes: z.record(z.string(), z.number().int().nonnegative()).optional() }).strict();

export const nextOptions = z
  .object({
    /** Milliseconds to wait for a frame; TIMEOUT after that. Default: forever. */
    timeout: z.number().nonnegative().default(Infinity),
    signal: z.instanceof(AbortSignal).optional(),
    /**
     * Microseconds to busy-poll on this thread before waiting. The event loop
     * is blocked meanwhile; in exchange a frame published during the spin is
     * received without a thread wake-up (the latency-critical path).
     */
    spin: z.number().nonnegative().max(1_000_000).default(0),
  })
  .strict();

/** nextSync(): next()'s but the signal, which cannot reach a blocked thread. */
export const syncNextOptions = nextOptions.omit({ signal: true }).strict();

export const batchOptions = nextOptions
  .extend({
    /** The most frames one call returns. */
    max: z.number().int().min(1).max(1 << 20).default(1024),
  })
  .strict();

/** nextBatchSync(): nextBatch()'s but the signal. */
export const syncBatchOptions = batchOptions.omit({ signal: true }).strict();

/**
 * Hot calls with the common options (`{ tag }`, `{ timeout }`) skip zod, which
 * costs microseconds per call: a hand check that accepts exactly what the
 * schema accepts for those keys, or gives up (undefined) and lets zod decide
 * and explain.
 */
type Quick = (value: unknown) => Record<string, unknown> | undefined;
const isTimeout = (v: unknown) => typeof v === 'number' && v >= 0;
const isSpin = (v: unknown) => typeof v === 'number' && v >= 0 && v <= 1_000_000;
const isDevice = (v: unknown) => Number.isInteger(v) && (v as number) >= 0;
const TAG_LIMIT = 2n ** 64n;
const isTag = (v: unknown) => typeof v === 'bigint' && v >= 0n && v < TAG_LIMIT;
const isStream = (v: unknown) => v instanceof DeviceStream || (typeof v === 'bigint' && v >= 0n);
function quickParser(checks: Record<string, (v: unknown) => boolean>, defaults: Record<string, unknown>): Quick {
  return (value) => {
    if (typeof value !== 'object' || value === null || Object.getPrototypeOf(value) !== Object.prototype) return undefined;
    const out: Record<string, unknown> = { ...defaults };
    for (const k in value) {
      const v = (value as Record<string, unknown>)[k];
      if (v === undefined) continue;
      if (!checks[k]?.(v)) return undefined;
      out[k] = v;
    }
    return out;
  };
}

/** What a prepared publish without device buffers takes: its timeout (ms) and tag. */
export type HostPublish = { readonly timeout: number; readonly tag: bigint };
const HOST_PUBLISH_DEFAULTS: HostPublish = { timeout: Infinity, tag: 0n };

/**
 * PreparedFrame.publish()'s options for a frame without device buffers, read
 * by hand in one function: undefined where parseOptions() must judge them (a
 * key but tag and timeout with a value, a bad value). Not through quickParser:
 * that publish is the spinning hand-off's first step, often on a CPU just
 * woken, where each builtin a call reaches (the spread, the Map, a closure per
 * key) costs microseconds (2-core VM, frames 2 ms apart: 22-31 µs from the
 * heads-up call to the native publish became 11-19 µs).
 */
export function hostPublishOptions(value: unknown): HostPublish | undefined {
  if (value === undefined) return HOST_PUBLISH_DEFAULTS;
  if (typeof value !== 'object' || value === null) return undefined;
  let timeout = Infinity;
  let tag = 0n;
  for (const key in value) {
    const v = (value as Record<string, unknown>)[key];
    if (v === undefined && (key === 'tag' || key === 'timeout' || key === 'stream')) continue;
    if (key === 'tag' && isTag(v)) tag = v as bigint;
    else if (key === 'timeout' && isTimeout(v)) timeout = v as number;
    else return undefined;
  }
  return { timeout, tag };
}

const quickParsers = new Map<z.ZodType, Quick>([
  [publishOptions, quickParser({ timeout: isTimeout, tag: isTag, device: isDevice, stream: isStream }, { timeout: Infinity, tag: 0n })],
  [preparedPublishOptions, quickParser({ timeout: isTimeout, tag: isTag, stream: isStream }, { timeout: Infinity, tag: 0n })],
  [loanPublishOptions, quickParser({ timeout: isTimeout, tag: isTag }, { timeout: Infinity, tag: 0n })],
  [nextOptions, quickParser({ timeout: isTimeout, spin: isSpin }, { timeout: Infinity, spin: 0 })],
  [syncNextOptions, quickParser({ timeout: isTimeout, spin: isSpin }, { timeout: Infinity, spin: 0 })],
]);

/** Each schema's defaults, parsed once: hot calls (publish, next) mostly pass no options. */
const defaults = new WeakMap<z.ZodType, unknown>();

/**
 * Parses options, turning a zod failure into INVALID_ARGUMENT that names each
 * bad key. The result is shared between calls without options: read it only.
 */
export function parseOptions<S extends z.ZodType>(schema: S, value: unknown, what: string): z.output<S> {
  if (value === undefined && defaults.has(schema)) return defaults.get(schema) as z.output<S>;
  const quick = quickParsers.get(schema)?.(value);
  if (quick) return quick as z.output<S>;
  const result = schema.safeParse(value ?? {});
  if (value === undefined && result.success) defaults.set(schema, result.data);
  if (result.success) return result.data;
  const problems = result.error.issues
    .map((issue) => {
      const where = issue.path.length ? issue.path.join('.') : what;
      return issue.code === 'unrecognized_keys' ? `unknown option(s) ${issue.keys.map((k) => `'${k}'`).join(', ')}` : `${where}: ${issue.message}`;
    })
    .join('; ');
  throw new GpuringError('INVALID_ARGUMENT', `invalid ${what}: ${problems}`);
}

/** Where segment `name` lies (SPEC.md §2). */
export const segmentPath = (name: string) => `/dev/shm/gpuring.${name}`;

export function parseSegmentName(name: unknown): string {
  const result = segmentName.safeParse(name);
  if (!result.success) throw new GpuringError('INVALID_ARGUMENT', `invalid segment name ${shown(name)}: ${result.error.issues[0]?.message}`);
  return result.data;
}

/** Infinity (wait forever) as the addon expects it. */
export function toNativeTimeout(ms: number): number {
  return Number.isFinite(ms) ? ms : -1;
}
