/**
 * How a consumer reads host buffers out of producers' arenas, including an
 * arena larger than one ArrayBuffer can hold in this Node
 * (`buffer.constants.MAX_LENGTH`: 4 GiB before Node.js 22). A Python or C
 * producer may make one that large, and Node refuses to lend it as one buffer.
 * Such an arena is lent in windows instead, each its own mapping of part of
 * the file: a buffer's bytes come from a window that holds them whole.
 *
 * Windows start at multiples of a granule, a quarter of the largest window,
 * so that every buffer up to three quarters of the limit lies whole in the
 * window of the granule it starts in, and the frames of a stream reuse a few
 * windows rather than mapping one per buffer. A larger buffer gets a window of
 * its own, which fails with UNSUPPORTED where it is over the limit itself (no
 * Uint8Array of this Node could view it anyway). Windows are lent like whole
 * arenas (unmapped when collected, taken back when the consumer closes or the
 * producer's arenas go), so a view outlives the cache that made it.
 */
import { GpuringError } from './errors.js';
import type { ByteRange } from './arrow/table-reader.js';

/** Every window starts at a multiple of this: the largest page size Linux uses (arm64, ppc64). */
const WINDOW_ALIGN = 1 << 16;
/** A granule above this gains nothing: windows of one arena then overlap by at most 3 GiB. */
const MAX_GRANULE = 2 ** 30;
/** Windows kept per arena; each maps up to the lend limit of address space, not memory. */
const MAX_CACHED_WINDOWS = 8;
const EMPTY = new ArrayBuffer(0);

/** Opens the bytes [start, start + length) of one arena as their own buffer (ConsumerCore.openArenaWindow). */
export type WindowOpener = (start: number, length: number) => ArrayBuffer;

/** An arena too large to lend whole, read through windows (see above). */
export class ArenaWindows {
  readonly #open: WindowOpener;
  readonly #window: number;
  readonly #granule: number;
  /** By granule number. */
  readonly #windows = new Map<number, ArrayBuffer>();

  /** `byteLength`: the arena's size; `limit`: the most bytes one lent buffer may hold here. */
  constructor(
    readonly byteLength: number,
    limit: number,
    open: WindowOpener,
  ) {
    this.#open = open;
    this.#window = Math.max(WINDOW_ALIGN, Math.floor(limit / WINDOW_ALIGN) * WINDOW_ALIGN);
    this.#granule = Math.min(MAX_GRANULE, Math.max(WINDOW_ALIGN, Math.floor(this.#window / 4 / WINDOW_ALIGN) * WINDOW_ALIGN));
  }

  /** The bytes [offset, offset + length), which lie inside the arena, written into `into`. */
  bytes(offset: number, length: number, into: ByteRange): ByteRange {
    const k = Math.floor(offset / this.#granule);
    const start = k * this.#granule;
    const end = Math.min(this.byteLength, start + this.#window);
    if (offset + length <= end) return inWindow(this.#cached(k, start, end - start), offset - start, length, into);
    const own = Math.floor(offset / WINDOW_ALIGN) * WINDOW_ALIGN;
    return inWindow(this.#open(own, offset + length - own), offset - own, length, into);
  }

  #cached(k: number, start: number, length: number): ArrayBuffer {
    let window = this.#windows.get(k);
    if (!window) {
      if (this.#windows.size >= MAX_CACHED_WINDOWS) this.#windows.clear();
      window = this.#open(start, length);
      this.#windows.set(k, window);
    }
    return window;
  }
}

/** A producer's arena as a consumer reads it: lent whole, or in windows. */
export type Arena = ArrayBuffer | ArenaWindows;

/**
 * The bytes [offset, offset + length) of `arena`, written into `into` (no view
 * made: FrameLayout reuses one object). FRAME_BOUNDS when they lie outside it:
 * a frame's description is untrusted input.
 */
export function arenaBytes(arena: Arena, offset: number, length: number, into: ByteRange): ByteRange {
  if (offset + length > arena.byteLength) throw new GpuringError('FRAME_BOUNDS', `a buffer [${offset}, +${length}) lies outside its ${arena.byteLength}-byte arena`);
  if (arena instanceof ArrayBuffer) return inWindow(arena, offset, length, into);
  if (length === 0) return inWindow(EMPTY, 0, 0, into);
  return arena.bytes(offset, length, into);
}

/** arenaBytes() as a view. */
export function arenaView(arena: Arena, offset: number, length: number): Uint8Array {
  const bytes = arenaBytes(arena, offset, length, { buffer: EMPTY, byteOffset: 0, length: 0 });
  return new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.length);
}

function inWindow(buffer: ArrayBuffer, byteOffset: number, length: number, into: ByteRange): ByteRange {
  into.buffer = buffer;
  into.byteOffset = byteOffset;
  into.length = length;
  return into;
}
