// flatData()/fixedData() (lib/arrow/table-reader.ts) build a column's Data over
// shared memory. A fixed-width buffer placed at an offset its type is not
// aligned to (allowed to producers by SPEC.md §8) must be copied, not viewed
// at a rounded address, and a Uint8Array and a ByteRange must read alike.
// dataOver() must make the Data apache-arrow's constructor makes.
import test from 'ava';
import { Bool, Data, type DataType, Field, Float64, Int32, makeVector, Struct, Utf8 } from 'apache-arrow';
import { parseFormat } from '../lib/codec/format.js';
import { dataOver, fixedData, flatData } from '../lib/arrow/table-reader.js';

/** `values` written `shift` bytes into a fresh buffer, as a view of those bytes. */
function placed(values: ArrayBufferView, shift: number): Uint8Array {
  const bytes = new Uint8Array(shift + values.byteLength + 8);
  bytes.set(new Uint8Array(values.buffer, values.byteOffset, values.byteLength), shift);
  return bytes.subarray(shift, shift + values.byteLength);
}

for (const shift of [0, 1, 3, 4]) {
  test(`a slice of fixed-width values ${shift} bytes into its memory reads as written`, (t) => {
    const ints = Int32Array.of(7, -8, 9, 10, 11);
    const node = { name: 'x', offset: 1, length: 3 };
    const bytes = placed(ints, shift);
    const fromRange = fixedData(new Int32(), parseFormat('i')!, node, 0, undefined, { buffer: bytes.buffer, byteOffset: bytes.byteOffset, length: bytes.length });
    const fromView = flatData(new Int32(), parseFormat('i')!, node, 0, (i) => (i === 1 ? bytes : undefined));
    for (const data of [fromRange, fromView]) t.deepEqual([...makeVector(data)], [-8, 9, 10]);
    const doubles = Float64Array.of(0.5, 1.5, 2.5);
    const d = placed(doubles, shift);
    t.deepEqual([...makeVector(fixedData(new Float64(), parseFormat('g')!, { name: 'y', offset: 0, length: 3 }, 0, undefined, d))], [0.5, 1.5, 2.5]);
  });
}

/** A Data's fields, as apache-arrow's constructor sets them. */
const fields = (d: Data) => ({ ...d, type: String(d.type) });

test('dataOver() makes the Data the constructor makes from a buffers array: same fields, same values, fixed, bool, var-size and struct', (t) => {
  const bitmap = Uint8Array.of(0b101);
  const ints = Int32Array.of(1, 2, 3);
  const offsets = Int32Array.of(0, 1, 3, 3);
  const chars = new TextEncoder().encode('abc');
  const children = [new Data(new Int32(), 0, 3, 0, [undefined, ints, bitmap])];
  const cases: [string, DataType, ArrayBufferView | undefined, ArrayBufferView | undefined, Uint8Array, Data[]][] = [
    ['fixed', new Int32(), undefined, ints, bitmap, []],
    ['bool', new Bool(), undefined, Uint8Array.of(0b011), new Uint8Array(0), []],
    ['var-size', new Utf8(), offsets, chars, bitmap, []],
    ['struct', new Struct([new Field('x', new Int32())]), undefined, undefined, new Uint8Array(0), children],
  ];
  for (const [name, type, valueOffsets, values, nulls, kids] of cases) {
    const made = dataOver(type, 1, 2, -1, valueOffsets, values, nulls, kids);
    const expected = new Data(type, 1, 2, -1, [valueOffsets, values, nulls] as never, kids);
    t.deepEqual(fields(made), fields(expected), name);
    t.true(made instanceof Data, name);
  }
});
