/**
 * Builds an apache-arrow Table over a frame's buffers without copying them.
 * The wire format follows the Arrow C data interface (a node's offset applies
 * to all its buffers and to struct / fixed-size-list children); apache-arrow JS
 * keeps offset for the validity bits only and re-bases values, offsets and
 * children, so this translates with sub-views and child slices.
 */
import { Data, DataType, Dictionary, Field, makeData, makeVector, RecordBatch, Schema, Struct, Table, Type } from 'apache-arrow';
import type { BufferDescriptor, ColumnDescriptor, FrameDescription } from '../codec/description.js';
import { parseFormat } from '../codec/format.js';
import { aligned, checkedOffsets } from '../codec/value-offsets.js';
import { indexTypeOfFormat, typeOfFormat } from './types.js';

/** Resolves a buffer descriptor to its bytes (exactly descriptor.length of them). */
export type BufferResolver = (buffer: BufferDescriptor) => Uint8Array;

class Reader {
  readonly dictionaryTypes = new Map<number, DataType>();
  constructor(readonly frame: FrameDescription, readonly resolve: BufferResolver) {}

  fieldOf(c: ColumnDescriptor): Field {
    const children = c.children.map((child) => this.fieldOf(child));
    const type = c.dictionary < 0 ? typeOfFormat(c.format, children) : this.dictionaryType(c);
    const metadata = c.metadata ? new Map(c.metadata) : null;
    return new Field(c.name, type, c.nullable, metadata);
  }

  dictionaryType(c: ColumnDescriptor): Dictionary {
    const values = this.fieldOf(this.frame.dictionaries[c.dictionary]!).type;
    return new Dictionary(values, indexTypeOfFormat(c.format) as never, c.dictionary, c.dictionaryOrdered);
  }

  buffer(c: ColumnDescriptor, i: number): Uint8Array {
    const b = c.buffers[i]!;
    return b.kind === 'absent' ? new Uint8Array(0) : this.resolve(b);
  }

  /** Value offsets of a var-size node, checked against `limit` (every one of the slice). */
  offsets(c: ColumnDescriptor, width: number, limit: number): Int32Array | BigInt64Array {
    return checkedOffsets(c, this.buffer(c, 1), width, limit);
  }

  data(c: ColumnDescriptor, type: DataType): Data {
    const f = parseFormat(c.format)!;
    const nullBitmap = c.buffers[0]!.kind === 'absent' ? undefined : this.buffer(c, 0);
    const common = { offset: c.offset, length: c.length, nullCount: c.nullCount < 0 ? undefined : c.nullCount, nullBitmap };
    switch (f.layout) {
      case 'bool':
        return makeData({ type, ...common, data: this.buffer(c, 1) } as never);
      case 'fixed': {
        const width = f.bitWidth / 8;
        const values = this.buffer(c, 1).subarray(c.offset * width, (c.offset + c.length) * width);
        const element = type.typeId === Type.Dictionary ? (type as Dictionary).indices.ArrayType.BYTES_PER_ELEMENT : (type.ArrayType as { BYTES_PER_ELEMENT: number }).BYTES_PER_ELEMENT;
        const props = { type, ...common, data: aligned(values, element) };
        if (type.typeId !== Type.Dictionary) return makeData(props as never);
        return makeData({ ...props, dictionary: makeVector(this.data(this.frame.dictionaries[c.dictionary]!, (type as Dictionary).dictionary)) } as never);
      }
      case 'varbin': {
        const chars = this.buffer(c, 2);
        return makeData({ type, ...common, valueOffsets: this.offsets(c, f.offsetBytes, chars.length), data: chars } as never);
      }
      case 'list': {
        const child = c.children[0]!;
        const childData = this.data(child, (type as DataType & { children: Field[] }).children[0]!.type);
        return makeData({ type, ...common, valueOffsets: this.offsets(c, f.offsetBytes, child.length), child: childData } as never);
      }
      case 'fixed-list': {
        const child = c.children[0]!;
        const childData = this.data(child, (type as DataType & { children: Field[] }).children[0]!.type);
        return makeData({ type, ...common, child: childData.slice(c.offset * f.listSize, c.length * f.listSize) } as never);
      }
      case 'struct': {
        const fields = (type as Struct).children;
        const children = c.children.map((child, i) => this.data(child, fields[i]!.type).slice(c.offset, c.length));
        return makeData({ type, ...common, children } as never);
      }
    }
  }
}

export function tableFromFrame(frame: FrameDescription, resolve: BufferResolver): Table {
  const reader = new Reader(frame, resolve);
  const fields = frame.columns.map((c) => reader.fieldOf(c));
  const schema = new Schema(fields, frame.metadata ? new Map(frame.metadata) : undefined);
  const children = frame.columns.map((c, i) => reader.data(c, fields[i]!.type));
  const batch = new RecordBatch(schema, makeData({ type: new Struct(fields), length: frame.rowCount, nullCount: 0, children }));
  return new Table([batch]);
}

/** The apache-arrow schema of a frame (no buffer is touched). */
export function schemaOfFrame(frame: FrameDescription): Schema {
  const reader = new Reader(frame, () => new Uint8Array(0));
  return new Schema(frame.columns.map((c) => reader.fieldOf(c)), frame.metadata ? new Map(frame.metadata) : undefined);
}
