/**
 * Every failure gpuring reports is a {@link GpuringError} with a stable `code`.
 * The codes are the same in TypeScript, C (`gpr_code_name`) and Python, so a
 * program can branch on them whichever side raised them.
 */
export const ERROR_CODES = [
  'OK',
  'INVALID_ARGUMENT',
  'SEGMENT_EXISTS',
  'SEGMENT_NOT_FOUND',
  'SEGMENT_FOREIGN',
  'SEGMENT_VERSION',
  'SEGMENT_LAYOUT',
  'SEGMENT_TRUNCATED',
  'SEGMENT_NOT_READY',
  'PID_NAMESPACE',
  'NO_SPACE',
  'PARTICIPANTS_FULL',
  'RING_FULL',
  'RING_EMPTY',
  'TIMEOUT',
  'ABORTED',
  'CLOSED',
  'FRAME_INVALID',
  'FRAME_BOUNDS',
  'FRAME_STATE',
  'ARENA_INVALID',
  'OUT_OF_MEMORY',
  'SYSTEM',
  'UNSUPPORTED',
  'CUDA_UNAVAILABLE',
  'CUDA',
  'DEVICE_NOT_FOUND',
  'NOT_EXPORTABLE',
  'SEGMENT_OWNER',
  'DESCRIPTOR_UNAVAILABLE',
  'FRAMES_MISSED',
  'EVICTED',
  'BRIDGE_REFUSED',
  'BRIDGE_PROTOCOL',
  'UCX_UNAVAILABLE',
  'DETACHED',
  'NATIVE_LOAD',
] as const;

/** A value an application passed, as an error message names it: strings quoted, anything else (a bigint, a symbol) as String() gives it. */
export const shown = (value: unknown): string => (typeof value === 'string' ? JSON.stringify(value) : String(value));

/** One of ERROR_CODES. */
export type ErrorCode = (typeof ERROR_CODES)[number];

/** What every gpuring failure throws or rejects with: `code` says which, stably across languages. */
export class GpuringError extends Error {
  /** Always 'GpuringError'. */
  override readonly name = 'GpuringError';
  /** Stable, language-independent error code. */
  readonly code: ErrorCode;
  /** errno of the failing system call, where there was one. */
  readonly errno?: number;
  /** FRAMES_MISSED and EVICTED (broadcast rings): how many frames this consumer lost. */
  readonly missed?: number;
  /** CUDA: the driver's CUresult (2 is CUDA_ERROR_OUT_OF_MEMORY). */
  readonly cudaError?: number;

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; errno?: number; missed?: number; cudaError?: number }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    if (options?.errno !== undefined) this.errno = options.errno;
    if (options?.missed !== undefined) this.missed = options.missed;
    if (options?.cudaError !== undefined) this.cudaError = options.cudaError;
  }
}

function isCode(value: unknown): value is ErrorCode {
  return typeof value === 'string' && (ERROR_CODES as readonly string[]).includes(value);
}

/** Turns an error thrown by the addon (plain Error with `code`) into a GpuringError. */
export function fromNative(error: unknown): unknown {
  if (error instanceof GpuringError || !(error instanceof Error)) return error;
  const { code, errno, missed, cudaError } = error as Error & { code?: unknown; errno?: unknown; missed?: unknown; cudaError?: unknown };
  if (!isCode(code)) return error;
  return new GpuringError(code, error.message, {
    cause: error,
    ...(typeof errno === 'number' ? { errno } : {}),
    ...(typeof missed === 'number' ? { missed } : {}),
    ...(typeof cudaError === 'number' ? { cudaError } : {}),
  });
}

/** Runs a native call, converting what it throws. */
export function callNative<T>(fn: () => T): T {
  try {
    return fn();
  } catch (error) {
    throw fromNative(error);
  }
}

/** Awaits a native promise, converting its rejection. */
export async function awaitNative<T>(promise: Promise<T>): Promise<T> {
  try {
    return await promise;
  } catch (error) {
    throw fromNative(error);
  }
}

const CUDA_ERROR_OUT_OF_MEMORY = 2;

/** A CUDA call failed for want of device memory (CUDA_ERROR_OUT_OF_MEMORY). */
export const isCudaOutOfMemory = (error: unknown): boolean =>
  error instanceof GpuringError && error.code === 'CUDA' && error.cudaError === CUDA_ERROR_OUT_OF_MEMORY;
