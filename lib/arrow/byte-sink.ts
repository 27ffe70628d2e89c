/**
 * A byte array that typed arrays of any element type are copied into without
 * making a Uint8Array view of each source. Copying a column's values the
 * obvious way, `bytes.set(new Uint8Array(src.buffer, src.byteOffset, n), at)`,
 * allocates a view per buffer, which V8 makes slowly: gathering and copying an
 * 8-column frame for publish(table) took 0.72 µs that way and 0.55 µs this
 * way (dev box micro-benchmark). A typed array set() from an array of its own
 * type is a memmove, so the sink keeps one view of its bytes per element type
 * and sets the source through it.
 */
type TypedArray = Int8Array | Uint8Array | Uint8ClampedArray | Int16Array | Uint16Array | Int32Array | Uint32Array | Float32Array | Float64Array | BigInt64Array | BigUint64Array;
type TypedArrayType = { new (buffer: ArrayBufferLike, byteOffset: number, length: number): TypedArray; BYTES_PER_ELEMENT: number };

/** The element types copied through a view of their own: the built-in ones (a subclass' constructor could do anything). */
const BUILT_IN: ReadonlySet<unknown> = new Set<TypedArrayType>([
  Int8Array, Uint8Array, Uint8ClampedArray, Int16Array, Uint16Array, Int32Array, Uint32Array,
  Float32Array, Float64Array, BigInt64Array, BigUint64Array,
]);

/** A view of a sink's whole buffer with one element type, and that type's width in bytes less one (alignment mask). */
type View = { view: TypedArray; width: number; mask: number };

export class ByteSink {
  readonly bytes: Uint8Array;
  /** bytes' place in its buffer and length, read once: typed-array getters cost several ns each, and a copy is ~20 ns. */
  readonly #offset: number;
  readonly #length: number;
  /** Per element type, its view, or null for a type copied through a Uint8Array view per copy. */
  readonly #views = new Map<unknown, View | null>();

  constructor(bytes: Uint8Array) {
    this.bytes = bytes;
    this.#offset = bytes.byteOffset;
    this.#length = bytes.length;
  }

  /** Copies the first `length` bytes of `src` to byte `at` of this sink's bytes (RangeError past their end). */
  copy(src: ArrayBufferView, length: number, at: number): void {
    if (!(at >= 0 && at + length <= this.#length)) throw new RangeError(`ByteSink.copy(): ${length} bytes at ${at} do not fit in ${this.#length}`);
    const to = this.#offset + at;
    const v = length === src.byteLength ? this.#viewOf(src.constructor) : null;
    // `&` sees the low 32 bits of any integer below 2^53: enough for an alignment check.
    if (v && (to & v.mask) === 0) v.view.set(src as never, to / v.width);
    else this.bytes.set(new Uint8Array(src.buffer, src.byteOffset, length), at);
  }

  #viewOf(type: unknown): View | null {
    let v = this.#views.get(type);
    if (v === undefined) {
      const t = type as TypedArrayType;
      const { buffer } = this.bytes;
      const width = t.BYTES_PER_ELEMENT;
      v = BUILT_IN.has(t) ? { view: new t(buffer, 0, Math.floor(buffer.byteLength / width)), width, mask: width - 1 } : null;
      this.#views.set(type, v);
    }
    return v;
  }
}
