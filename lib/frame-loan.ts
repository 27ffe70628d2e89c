import type { Schema } from 'apache-arrow';
import type { ColumnPlan } from './arrow/batch-writer.js';
import type { ValuesArray } from './arrow/table-reader.js';
import { align64 } from './codec/layout.js';
import { GpuringError, shown } from './errors.js';
import { loanPublishOptions, parseOptions } from './options.js';

/** One column of a loan, as typed arrays over arena memory. */
export interface LoanColumn {
  /** The schema field's name. */
  readonly name: string;
  /** Nullable fields: bit i (LSB first) set when row i is valid; all set at first. Else null. */
  readonly validity: Uint8Array | null;
  /** Fixed-width: the type's typed array (`rows` values); bool: the bits; utf8/binary: the character bytes. */
  readonly values: ArrayBufferView;
  /** utf8/binary: `rows + 1` offsets into `values`, all 0 at first (offsets[0] must stay 0); else null. */
  readonly offsets: Int32Array | BigInt64Array | null;
}

/** A buffer's place in the loan's allocation and its capacity in bytes. */
interface Region {
  at: number;
  bytes: number;
}

interface ColumnRegions {
  plan: ColumnPlan;
  validity: Region | null;
  /** Fixed and bool: the values; varbin: the offsets, then `data` the characters. */
  values: Region;
  data: Region | null;
}

/** What the producer does for a loan: publish its filled buffers, or free them. */
export interface LoanSink {
  publish(rows: number, nulls: number[], buffers: ({ at: number; length: number } | null)[], tag: bigint, timeout: number): Promise<number>;
  free(): void;
}

/** Options of Producer.loan(). */
export type LoanOptions = {
  /** Character bytes to lend each utf8/binary column, by name (default 0). */
  bytes?: Record<string, number>;
};

/** Options of FrameLoan.publish(). */
export type LoanPublishOptions = {
  /** Rows to publish, at most the loan's (default: all of them). */
  rows?: number;
  /** A number for the application, carried with the frame (default 0). */
  tag?: bigint;
  /** How long to wait for space when the ring is full: 0 fails at once with RING_FULL. */
  timeout?: number;
};

/** Where each column's buffers go in a loan of `rows` rows, and the bytes it needs in all. */
export function loanLayout(schema: Schema, plans: readonly ColumnPlan[], rows: number, bytes: Record<string, number>): [ColumnRegions[], number] {
  let total = 0;
  const take = (n: number): Region => {
    const r = { at: total, bytes: n };
    total += align64(n);
    return r;
  };
  const columns = plans.map((plan, i) => {
    const field = schema.fields[i]!;
    const validity = field.nullable ? take(Math.ceil(rows / 8)) : null;
    if (plan.layout === 'fixed') return { plan, validity, values: take((rows * plan.bits) / 8), data: null };
    if (plan.layout === 'bool') return { plan, validity, values: take(Math.ceil(rows / 8)), data: null };
    const chars = bytes[field.name] ?? 0;
    if (!Number.isSafeInteger(chars) || chars < 0) throw new GpuringError('INVALID_ARGUMENT', `loan(): bytes for '${field.name}' must be a whole number >= 0, not ${chars}`);
    return { plan, validity, values: take((rows + 1) * plan.offsetBytes), data: take(chars) };
  });
  for (const name of Object.keys(bytes))
    if (!schema.fields.some((f, i) => f.name === name && plans[i]!.layout === 'varbin')) throw new GpuringError('INVALID_ARGUMENT', `loan(): bytes given for '${name}', which is no utf8/binary column`);
  return [columns, total];
}

/**
 * Arena memory for one frame of a flat schema, lent to the caller
 * to fill in place, then published without a copy (iceoryx2's loan, Aeron's
 * tryClaim/commit). `producer.loan(schema, rows)` makes one: no apache-arrow
 * object is built and no byte is copied between filling and the consumer.
 *
 * Ownership: from loan() until publish() resolves, the memory is the caller's
 * (unpublished; invisible to consumers). publish() hands it to the frame: the
 * producer reuses it once every consumer released the frame, so the views
 * must not be written after publish() is called. abandon() (or `using`) gives
 * unpublished memory back. A publish that fails (RING_FULL with a timeout,
 * invalid offsets) leaves the loan as it was: fix it, publish again.
 *
 * Layout: per column, in schema order, as Arrow lays it out for `rows` rows:
 * a validity bitmap for nullable fields (all rows valid to begin with; clear
 * bit i for a null at row i), then fixed-width values as the type's typed
 * array, bool values as bits, or utf8/binary offsets (`rows + 1`, the first 0)
 * (all 0: empty strings) and `bytes` of characters. Values and characters
 * start as whatever the arena held.
 */
export class FrameLoan implements Disposable {
  /** Rows lent: publish() sends these or fewer. */
  readonly rows: number;
  /** The schema's columns, in order, as typed arrays over the lent memory. */
  readonly columns: readonly LoanColumn[];
  readonly #regions: ColumnRegions[];
  readonly #sink: LoanSink;
  #state: 'open' | 'publishing' | 'done' = 'open';

  /** @internal Producer.loan() makes these; `memory` is the allocation's bytes. */
  constructor(schema: Schema, rows: number, regions: ColumnRegions[], memory: Uint8Array, sink: LoanSink) {
    this.rows = rows;
    this.#regions = regions;
    this.#sink = sink;
    const view = (r: Region) => memory.subarray(r.at, r.at + r.bytes);
    this.columns = regions.map((c, i) => {
      const field = schema.fields[i]!;
      const validity = c.validity && view(c.validity).fill(0xff);
      if (c.plan.layout !== 'varbin') {
        const Values = (c.plan.layout === 'bool' ? Uint8Array : field.type.ArrayType) as ValuesArray;
        const values = new Values(memory.buffer, memory.byteOffset + c.values.at, c.values.bytes / Values.BYTES_PER_ELEMENT);
        return { name: field.name, validity, values, offsets: null };
      }
      const at = memory.byteOffset + c.values.at;
      const offsets = c.plan.offsetBytes === 4 ? new Int32Array(memory.buffer, at, rows + 1).fill(0) : new BigInt64Array(memory.buffer, at, rows + 1).fill(0n);
      return { name: field.name, validity, values: view(c.data!), offsets };
    });
  }

  /** A column by name or position. */
  column(which: string | number): LoanColumn {
    const c = typeof which === 'number' ? this.columns[which] : this.columns.find((col) => col.name === which);
    if (!c) throw new GpuringError('INVALID_ARGUMENT', `the loan has no column ${shown(which)}`);
    return c;
  }

  /**
   * Publishes the first `rows` rows (default all) as one frame; resolves to
   * its id. Null counts come from the validity bitmaps; utf8/binary columns
   * send offsets[rows] character bytes, checked against what was lent.
   */
  async publish(options?: LoanPublishOptions): Promise<number> {
    const { rows = this.rows, tag, timeout } = parseOptions(loanPublishOptions, options, 'publish() options');
    if (this.#state !== 'open') throw new GpuringError('FRAME_STATE', `the loan was already ${this.#state === 'done' ? 'published or abandoned' : 'handed to publish()'}`);
    if (!Number.isSafeInteger(rows) || rows < 0 || rows > this.rows) throw new GpuringError('INVALID_ARGUMENT', `publish(): rows must be 0 to ${this.rows}, not ${rows}`);
    const nulls: number[] = [];
    const buffers: ({ at: number; length: number } | null)[] = [];
    this.#regions.forEach((c, i) => this.#describe(c, this.columns[i]!, rows, nulls, buffers));
    this.#state = 'publishing';
    try {
      const id = await this.#sink.publish(rows, nulls, buffers, tag, timeout);
      this.#state = 'done';
      return id;
    } catch (error) {
      this.#state = 'open';
      throw error;
    }
  }

  /** Gives the memory back unpublished. Does nothing after publish() or a first abandon(). */
  abandon(): void {
    if (this.#state !== 'open') return;
    this.#state = 'done';
    this.#sink.free();
  }

  /** abandon() if not yet published, for `using`. */
  [Symbol.dispose](): void {
    this.abandon();
  }

  /** Column `c`'s null count and buffers for `rows` rows, as a gathered batch would have them (absent when empty or without nulls). */
  #describe(c: ColumnRegions, view: LoanColumn, rows: number, nulls: number[], buffers: ({ at: number; length: number } | null)[]): void {
    const present = (r: Region, length: number) => (rows > 0 ? { at: r.at, length } : null);
    const missing = view.validity ? rows - countSet(view.validity, rows) : 0;
    nulls.push(missing);
    buffers.push(missing > 0 ? { at: c.validity!.at, length: Math.ceil(rows / 8) } : null);
    if (c.plan.layout === 'fixed') buffers.push(present(c.values, (rows * c.plan.bits) / 8));
    else if (c.plan.layout === 'bool') buffers.push(present(c.values, Math.ceil(rows / 8)));
    else {
      const first = Number(view.offsets![0]);
      const end = Number(view.offsets![rows]);
      if (first !== 0 || end < 0 || end > c.data!.bytes)
        throw new GpuringError('INVALID_ARGUMENT', `publish(): column '${view.name}' has offsets from ${first} to ${end}, outside the ${c.data!.bytes} bytes lent (offsets[0] must be 0)`);
      buffers.push(present(c.values, (rows + 1) * c.plan.offsetBytes), present(c.data!, end));
    }
  }
}

/** Set bits among the first `n` of a bitmap. */
function countSet(bits: Uint8Array, n: number): number {
  let count = 0;
  for (let i = 0; i < n >> 3; i++) count += POPCOUNT[bits[i]!]!;
  if (n & 7) count += POPCOUNT[bits[n >> 3]! & ((1 << (n & 7)) - 1)]!;
  return count;
}

const POPCOUNT = Uint8Array.from({ length: 256 }, (_, b) => b.toString(2).replace(/0/g, '').length);
