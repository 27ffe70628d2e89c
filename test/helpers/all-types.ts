/**
 * One column of every type gpuring must carry, with nulls, filled
 * deterministically so that any process can rebuild the same table.
 */
import * as A from 'apache-arrow';

const field = (name: string, type: A.DataType, nullable = true) => new A.Field(name, type, nullable);

export function allTypesTable(rows: number): A.Table {
  const idx = Array.from({ length: rows }, (_, i) => i);
  const maybe = <T>(f: (i: number) => T) => idx.map((i) => (i % 5 === 2 ? null : f(i)));
  const u = A.TimeUnit;
  const columns: Record<string, A.Vector> = {
    int8: A.vectorFromArray(maybe((i) => (i % 250) - 125), new A.Int8()),
    int16: A.vectorFromArray(maybe((i) => i * 31 - 3000), new A.Int16()),
    int32: A.vectorFromArray(maybe((i) => i * 100_003 - 7), new A.Int32()),
    int64: A.vectorFromArray(maybe((i) => BigInt(i) * -(2n ** 40n)), new A.Int64()),
    uint8: A.vectorFromArray(maybe((i) => i % 256), new A.Uint8()),
    uint16: A.vectorFromArray(maybe((i) => (i * 7) % 65536), new A.Uint16()),
    uint32: A.vectorFromArray(maybe((i) => i * 4_000_000), new A.Uint32()),
    uint64: A.vectorFromArray(maybe((i) => 2n ** 63n + BigInt(i)), new A.Uint64()),
    float16: A.vectorFromArray(maybe((i) => i / 4 - 2), new A.Float16()),
    float32: A.vectorFromArray(maybe((i) => i * 1.5), new A.Float32()),
    float64: A.vectorFromArray(maybe((i) => i / 3), new A.Float64()),
    bool: A.vectorFromArray(maybe((i) => i % 3 === 0), new A.Bool()),
    date32: A.vectorFromArray(maybe((i) => new Date(86_400_000 * (i + 10))), new A.DateDay()),
    date64: A.vectorFromArray(maybe((i) => new Date(1_600_000_000_000 + i)), new A.DateMillisecond()),
    time32s: A.vectorFromArray(maybe((i) => i), new A.TimeSecond()),
    time32ms: A.vectorFromArray(maybe((i) => i * 1000), new A.TimeMillisecond()),
    time64us: A.vectorFromArray(maybe((i) => BigInt(i) * 1000n), new A.TimeMicrosecond()),
    time64ns: A.vectorFromArray(maybe((i) => BigInt(i) * 1_000_000n), new A.TimeNanosecond()),
    timestamp_s: A.vectorFromArray(maybe((i) => 1_700_000_000_000 + i * 1000), new A.Timestamp(u.SECOND)),
    timestamp_ms_utc: A.vectorFromArray(maybe((i) => 1_700_000_000_000 + i), new A.Timestamp(u.MILLISECOND, 'UTC')),
    timestamp_us_paris: A.vectorFromArray(maybe((i) => 1_700_000_000_000 + i * 7), new A.Timestamp(u.MICROSECOND, 'Europe/Paris')),
    timestamp_ns: A.vectorFromArray(maybe((i) => 1_700_000_000_000 + i), new A.Timestamp(u.NANOSECOND, 'America/New_York')),
    duration_s: A.vectorFromArray(maybe((i) => BigInt(i)), new A.DurationSecond()),
    duration_ms: A.vectorFromArray(maybe((i) => BigInt(i) * 3n), new A.DurationMillisecond()),
    duration_us: A.vectorFromArray(maybe((i) => BigInt(i) * 5n), new A.DurationMicrosecond()),
    duration_ns: A.vectorFromArray(maybe((i) => BigInt(i) * 7n), new A.DurationNanosecond()),
    decimal128: A.vectorFromArray(maybe((i) => new Uint32Array([i * 12345, i, 0, i % 2 ? 0 : 0xffffffff])), new A.Decimal(4, 30, 128)),
    utf8: A.vectorFromArray(maybe((i) => `value ${i} ${'é'.repeat(i % 4)}`), new A.Utf8()),
    large_utf8: A.vectorFromArray(maybe((i) => 'x'.repeat(i % 9)), new A.LargeUtf8()),
    binary: A.vectorFromArray(maybe((i) => Uint8Array.from({ length: i % 6 }, (_, k) => k * i)), new A.Binary()),
    large_binary: A.vectorFromArray(maybe((i) => Uint8Array.from({ length: i % 3 }, (_, k) => k + i)), new A.LargeBinary()),
    fixed_size_binary: A.vectorFromArray(maybe((i) => Uint8Array.from([i, i + 1, i + 2, i + 3])), new A.FixedSizeBinary(4)),
    tensor: A.vectorFromArray(idx.map((i) => [i, i + 0.5, i + 0.25]), new A.FixedSizeList(3, field('v', new A.Float32(), false))),
    list: A.vectorFromArray(maybe((i) => Array.from({ length: i % 4 }, (_, k) => i * 10 + k)), new A.List(field('item', new A.Int32()))),
    large_list: A.vectorFromArray(maybe((i) => Array.from({ length: i % 3 }, (_, k) => k)), new A.LargeList(field('item', new A.Int32()))),
    struct: A.vectorFromArray(
      maybe((i) => ({ a: i, b: `s${i}`, c: [i, i] })),
      new A.Struct([field('a', new A.Int32()), field('b', new A.Utf8()), field('c', new A.List(field('item', new A.Int32())))]),
    ),
    dictionary: A.vectorFromArray(maybe((i) => ['red', 'green', 'blue'][i % 3]!), new A.Dictionary(new A.Utf8(), new A.Int32())),
    dictionary_int8: A.vectorFromArray(maybe((i) => ['x', 'y'][i % 2]!), new A.Dictionary(new A.Utf8(), new A.Int8())),
  };
  const plain = new A.Table(columns);
  const fields = plain.schema.fields.map((f) => (f.name === 'int32' ? new A.Field(f.name, f.type, f.nullable, new Map([['unit', 'widgets']])) : f));
  const schema = new A.Schema(fields, new Map([['producer', 'gpuring tests']]));
  return new A.Table(schema, plain.batches.map((b) => new A.RecordBatch(schema, b.data)));
}

/** A table of `columns` float64 columns: the wide-frame case. */
export function wideTable(columns: number, rows: number): A.Table {
  const data: Record<string, A.Vector> = {};
  for (let c = 0; c < columns; c++) data[`c${c}`] = A.vectorFromArray(Array.from({ length: rows }, (_, r) => c * 1000 + r), new A.Float64());
  return new A.Table(data);
}
