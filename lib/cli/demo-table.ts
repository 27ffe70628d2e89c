/**
 * The demo's table: one column of most kinds gpuring carries, filled from a
 * seed so that the consumer can rebuild exactly what it should have received.
 */
import {
  Bool, Dictionary, Field, FixedSizeList, Float32, Float64, Int32, List, Struct, Table, TimeUnit, Timestamp, Utf8, vectorFromArray,
} from 'apache-arrow';

function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

export function demoTable(seed: number, rows: number): Table {
  const r = rng(seed);
  const ids = Array.from({ length: rows }, (_, i) => seed * 1_000_000 + i);
  const words = ['alpha', 'beta', 'gamma', 'delta'];
  const pick = <T>(xs: T[]) => xs[Math.floor(r() * xs.length)]!;
  const f32 = new Float32(); 
  return new Table({
    id: vectorFromArray(ids, new Int32()),
    value: vectorFromArray(ids.map(() => r() * 1000), new Float64()),
    label: vectorFromArray(ids.map((id) => (id % 7 === 3 ? null : `row-${id}`)), new Utf8()),
    flag: vectorFromArray(ids.map((id) => id % 3 === 0), new Bool()),
    at: vectorFromArray(ids.map((id) => 1_700_000_000_000 + id), new Timestamp(TimeUnit.MILLISECOND, 'UTC')),
    tags: vectorFromArray(ids.map((id) => Array.from({ length: id % 4 }, (_, k) => id + k)), new List(new Field('item', new Int32(), true))),
    embedding: vectorFromArray(ids.map(() => [r(), r(), r(), r()]), new FixedSizeList(4, new Field('v', f32, false))),
    kind: vectorFromArray(ids.map(() => pick(words)), new Dictionary(new Utf8(), new Int32())),
    point: vectorFromArray(ids.map((id) => ({ x: id, y: r() })), new Struct([new Field('x', new Int32()), new Field('y', new Float64())])),
  });
}
