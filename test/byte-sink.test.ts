// ByteSink: typed arrays of every element type copied into bytes as bytes,
// through a view of their own type or not, and nothing written out of range.
import test from 'ava';
import { ByteSink } from '../lib/arrow/byte-sink.js';

const bytesOf = (a: ArrayBufferView) => new Uint8Array(a.buffer, a.byteOffset, a.byteLength).slice();

const sources: ArrayBufferView[] = [
  Int8Array.of(-1, 2, -3), Uint8Array.of(1, 255), Uint8ClampedArray.of(7), Int16Array.of(-2, 300), Uint16Array.of(65535),
  Int32Array.of(-5, 1 << 30), Uint32Array.of(0xdeadbeef), Float32Array.of(1.5, NaN), Float64Array.of(-0, Math.PI),
  BigInt64Array.of(-1n), BigUint64Array.of(2n ** 64n - 1n),
];

for (const shift of [0, 1, 4])
  test(`every element type lands as its bytes, ${shift} bytes from an 8-byte boundary`, (t) => {
    const sink = new ByteSink(new Uint8Array(shift + 64 * sources.length).fill(0xee).subarray(shift));
    sources.forEach((src, i) => sink.copy(src, src.byteLength, 64 * i));
    sources.forEach((src, i) => {
      t.deepEqual(sink.bytes.subarray(64 * i, 64 * i + src.byteLength), bytesOf(src), src.constructor.name);
      t.true(sink.bytes.subarray(64 * i + src.byteLength, 64 * (i + 1)).every((b) => b === 0xee), `${src.constructor.name}: nothing past it`);
    });
  });

test('a prefix of a source, a subclass and a view into a larger buffer copy their bytes only', (t) => {
  class Tagged extends Int32Array {}
  const sink = new ByteSink(new Uint8Array(256));
  sink.copy(Float64Array.of(1, 2, 3), 8, 0);
  t.deepEqual(sink.bytes.subarray(0, 16), Uint8Array.from([...bytesOf(Float64Array.of(1)), ...new Uint8Array(8)]));
  sink.copy(Tagged.of(9, 10), 8, 64);
  t.deepEqual(sink.bytes.subarray(64, 72), bytesOf(Int32Array.of(9, 10)));
  const wide = new Int16Array(16).map((_, i) => i + 1).subarray(3, 5);
  sink.copy(wide, 4, 128);
  t.deepEqual(sink.bytes.subarray(128, 136), Uint8Array.of(4, 0, 5, 0, 0, 0, 0, 0));
});

test('a copy past the end of the bytes is a RangeError and writes nothing', (t) => {
  const whole = new Uint8Array(80);
  const sink = new ByteSink(whole.subarray(8, 72));
  t.throws(() => sink.copy(Float64Array.of(1, 2), 16, 56), { instanceOf: RangeError });
  t.throws(() => sink.copy(Uint8Array.of(1), 1, -1), { instanceOf: RangeError });
  t.true(whole.every((b) => b === 0));
});
