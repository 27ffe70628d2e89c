/**
 * Describes an apache-arrow RecordBatch as a frame, placing each buffer in a
 * host arena through a BufferPlacer (one copy, or none when the buffer already
 * lies in an unpublished arena allocation). Columns are normalized to offset 0:
 * apache-arrow re-bases values at a slice's start, the wire format does not.
 */
import { Data, DataType, Dictionary, Field, makeData, RecordBatch, Struct, Table, Type, vectorFromArray } from 'apache-arrow';
import { GpuringError } from '../errors.js';
import { absentBuffer, type BufferDescriptor, type ColumnDescriptor, type FrameDescription } from '../codec/description.js';
import { parseFormat, type FormatInfo } from '../codec/format.js';
import { HANDLE_BYTES } from '../codec/layout.js';
import { sliceBits } from './bits.js';
import { childFields, formatOf } from './types.js';

export interface BufferPlacer {
  /** Puts `bytes` where consumers can map them and describes where. */
  place(bytes: Uint8Array): BufferDescriptor;
}

/** Absent buffers are all alike; describing a batch shares one (nothing writes to descriptors). */
const ABSENT = absentBuffer();

/** Zero-row columns built by apache-arrow may have no buffer at all. */
export function byteView(values: ArrayBufferView | undefined, byteLength: number): Uint8Array {
  if (!values) return new Uint8Array(0);
  return new Uint8Array(values.buffer, values.byteOffset, Math.min(values.byteLength, byteLength));
}

/** Format strings and layouts by type object: a stream's batches share their schema's types (BatchWriter uses them too). */
const layouts = new WeakMap<DataType, { format: string; f: FormatInfo }>();

export function layoutOf(type: DataType): { format: string; f: FormatInfo } {
  let layout = layouts.get(type);
  if (!layout) {
    const format = formatOf(type);
    layout = { format, f: parseFormat(format)! };
    layouts.set(type, layout);
  }
  return layout;
}

class Writer {
  readonly dictionaries: ColumnDescriptor[] = [];
  constructor(readonly placer: BufferPlacer) {}

  place(bytes: Uint8Array, needed: boolean): BufferDescriptor {
    return needed ? this.placer.place(bytes) : ABSENT;
  }

  validity(data: Data): BufferDescriptor {
    if (data.nullCount === 0 || !data.nullBitmap || data.nullBitmap.length === 0) return ABSENT;
    return this.placer.place(sliceBits(data.nullBitmap, data.offset, data.length));
  }

  offsets(data: Data, width: number): Uint8Array {
    return byteView(data.valueOffsets as ArrayBufferView, (data.length + 1) * width);
  }

  column(field: Field, data: Data): ColumnDescriptor {
    const type = data.type as DataType;
    const { format, f } = layoutOf(type);
    const n = data.length;
    const buffers = [this.validity(data)];
    let children: ColumnDescriptor[] = [];
    let dictionary = -1;
    if (f.layout === 'bool') {
      buffers.push(this.place(sliceBits(data.values as Uint8Array, data.offset, n), n > 0));
    } else if (f.layout === 'fixed') {
      buffers.push(this.place(byteView(data.values as ArrayBufferView, (n * f.bitWidth) / 8), n > 0));
      if (type.typeId === Type.Dictionary) dictionary = this.dictionary(type as Dictionary, data);
    } else if (f.layout === 'varbin') {
      const offsets = data.valueOffsets as Int32Array | BigInt64Array;
      const end = n ? Number(offsets[n]!) : 0;
      buffers.push(this.place(this.offsets(data, f.offsetBytes), n > 0));
      buffers.push(this.place(byteView(data.values as Uint8Array, end), n > 0));
    } else if (f.layout === 'list') {
      buffers.push(this.place(this.offsets(data, f.offsetBytes), n > 0));
      children = [this.column(childFields(type)[0]!, data.children[0]!)];
    } else {
      const fields = childFields(type);
      children = data.children.map((child, i) => this.column(fields[i]!, child));
    }
    return {
      name: field.name,
      format,
      nullable: field.nullable,
      dictionaryOrdered: type.typeId === Type.Dictionary && (type as Dictionary).isOrdered,
      mapKeysSorted: false,
      metadata: field.metadata.size ? [...field.metadata] : null,
      dictionary,
      length: n,
      nullCount: buffers[0]!.kind === 'absent' ? 0 : data.nullCount,
      offset: 0,
      buffers,
      children,
    };
  }

  dictionary(type: Dictionary, data: Data): number {
    const values = data.dictionary?.data ?? [];
    if (values.length > 1) throw new GpuringError('INVALID_ARGUMENT', 'a dictionary made of several chunks cannot be published; rebuild the column with one dictionary');
    const valueData = values[0] ?? makeData({ type: type.dictionary } as never);
    const index = this.dictionaries.length;
    this.dictionaries.push(undefined as never); // reserve: nested dictionaries come after
    this.dictionaries[index] = this.column(new Field('', type.dictionary, true), valueData as Data);
    return index;
  }
}

/** Describes one record batch (or a table of at most one batch) as a frame. */
export function describeBatch(source: RecordBatch | Table, placer: BufferPlacer): FrameDescription {
  const batch = toBatch(source);
  const writer = new Writer(placer);
  const fields = batch.schema.fields;
  const columns = fields.map((field, i) => writer.column(field, batch.data.children[i]!));
  return {
    rowCount: batch.numRows,
    metadata: batch.schema.metadata.size ? [...batch.schema.metadata] : null,
    columns,
    dictionaries: writer.dictionaries,
    syncKind: 0,
    syncHandle: new Uint8Array(HANDLE_BYTES),
  };
}

export function toBatch(source: RecordBatch | Table): RecordBatch {
  if (source instanceof RecordBatch) return source;
  if (!(source instanceof Table)) throw new GpuringError('INVALID_ARGUMENT', 'publish() takes an apache-arrow Table or RecordBatch');
  if (source.batches.length === 1) return source.batches[0]!;
  if (source.batches.length > 1)
    throw new GpuringError('INVALID_ARGUMENT', `the table has ${source.batches.length} record batches and a frame is one; publish each: for (const b of table.batches) await producer.publish(b)`);
  const fields = source.schema.fields;
  // Built, not made: makeData() gives a list, struct or dictionary of no rows no child or dictionary.
  const children = fields.map((f) => vectorFromArray([], f.type).data[0]!);
  return new RecordBatch(source.schema, makeData({ type: new Struct(fields), length: 0, nullCount: 0, children }));
}
