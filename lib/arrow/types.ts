/**
 * apache-arrow data types <-> Arrow C data interface format strings: the types
 * gpuring carries (see SPEC.md, "Types").
 */
import {
  Binary, Bool, DataType, DateDay, DateMillisecond, Decimal, Dictionary, DurationMicrosecond, DurationMillisecond,
  DurationNanosecond, DurationSecond, Field, FixedSizeBinary, FixedSizeList, Float16, Float32, Float64, Int16, Int32,
  Int64, Int8, LargeBinary, LargeList, LargeUtf8, List, Struct, TimeMicrosecond, TimeMillisecond, TimeNanosecond,
  TimeSecond, Timestamp, TimeUnit, Type, Uint16, Uint32, Uint64, Uint8, Utf8,
} from 'apache-arrow';
import type { Int } from 'apache-arrow';
import { GpuringError } from '../errors.js';

const UNIT = ['s', 'm', 'u', 'n'] as const;

function intFormat(t: Int): string {
  const i = [8, 16, 32, 64].indexOf(t.bitWidth);
  return 'csil'[i]![t.isSigned ? 'toLowerCase' : 'toUpperCase']();
}

/** The format string of an apache-arrow type (its value type, for dictionaries). */
export function formatOf(type: DataType): string {
  const t = type as unknown as {
    precision: number; scale: number; bitWidth: number; byteWidth: number; listSize: number; unit: number; timezone: string | null;
  };
  switch (type.typeId) {
    case Type.Int: return intFormat(type as unknown as Int);
    case Type.Float: return ['e', 'f', 'g'][t.precision]!;
    case Type.Bool: return 'b';
    case Type.Utf8: return 'u';
    case Type.LargeUtf8: return 'U';
    case Type.Binary: return 'z';
    case Type.LargeBinary: return 'Z';
    case Type.FixedSizeBinary: return `w:${t.byteWidth}`;
    case Type.Decimal: return `d:${t.precision},${t.scale}${t.bitWidth === 128 ? '' : `,${t.bitWidth}`}`;
    case Type.Date: return t.unit === 0 ? 'tdD' : 'tdm';
    case Type.Time: return `tt${UNIT[t.unit]}`;
    case Type.Timestamp: return `ts${UNIT[t.unit]}:${t.timezone ?? ''}`;
    case Type.Duration: return `tD${UNIT[t.unit]}`;
    case Type.List: return '+l';
    case Type.LargeList: return '+L';
    case Type.FixedSizeList: return `+w:${t.listSize}`;
    case Type.Struct: return '+s';
    case Type.Dictionary: return intFormat((type as Dictionary).indices);
    default:
      throw new GpuringError('INVALID_ARGUMENT', `gpuring does not carry Arrow type ${type} (type id ${type.typeId})`);
  }
}

const INTS: Record<string, () => DataType> = {
  c: () => new Int8(), C: () => new Uint8(), s: () => new Int16(), S: () => new Uint16(),
  i: () => new Int32(), I: () => new Uint32(), l: () => new Int64(), L: () => new Uint64(),
};

const SIMPLE: Record<string, () => DataType> = {
  ...INTS,
  e: () => new Float16(), f: () => new Float32(), g: () => new Float64(), b: () => new Bool(),
  u: () => new Utf8(), U: () => new LargeUtf8(), z: () => new Binary(), Z: () => new LargeBinary(),
  tdD: () => new DateDay(), tdm: () => new DateMillisecond(),
  tts: () => new TimeSecond(), ttm: () => new TimeMillisecond(), ttu: () => new TimeMicrosecond(), ttn: () => new TimeNanosecond(),
  tDs: () => new DurationSecond(), tDm: () => new DurationMillisecond(), tDu: () => new DurationMicrosecond(), tDn: () => new DurationNanosecond(),
};

/** The apache-arrow type of a (validated) format string with its child fields. */
export function typeOfFormat(format: string, children: Field[]): DataType {
  const simple = SIMPLE[format];
  if (simple) return simple();
  if (format.startsWith('w:')) return new FixedSizeBinary(Number(format.slice(2)));
  if (format.startsWith('d:')) {
    const [precision, scale, width] = format.slice(2).split(',').map(Number);
    return new Decimal(scale!, precision!, width ?? 128);
  }
  if (format.startsWith('ts')) {
    const zone = format.slice(4);
    return new Timestamp(UNIT.indexOf(format[2] as (typeof UNIT)[number]) as TimeUnit, zone === '' ? null : zone);
  }
  if (format === '+l') return new List(children[0]!);
  if (format === '+L') return new LargeList(children[0]!);
  if (format.startsWith('+w:')) return new FixedSizeList(Number(format.slice(3)), children[0]!);
  if (format === '+s') return new Struct(children);
  throw new GpuringError('FRAME_INVALID', `format '${format}' has no apache-arrow type`);
}

/** Index type of a dictionary-encoded column, from its format string. */
export function indexTypeOfFormat(format: string): Int {
  return INTS[format]!() as Int;
}

/** The fields of a nested type's children (a list's one, a struct's each); none for other types. */
export function childFields(type: DataType): Field[] {
  return (type as DataType & { children?: Field[] }).children ?? [];
}
