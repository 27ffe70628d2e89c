// Consumers learn a stream's layout from its first frame and build later
// frames' Tables straight from their bodies (lib/arrow/frame-layout.ts). The
// Tables must be those the description gives, whatever changes from frame to
// frame: row counts, slices (offsets), null counts, absent buffers, and
// layouts that alternate or differ only in a type.
import test from 'ava';
import { Bool, Float32, Int32, Table, Utf8, vectorFromArray } from 'apache-arrow';
import { tableDifference } from '../lib/arrow/compare.js';
import { Consumer, Producer } from '../lib/index.js';
import { withRing } from './helpers/ring.js';

const pick = (seed: number, n: number) => ((seed * 2654435761) >>> 0) % n;

function flat(seed: number, rows: number): Table {
  const ints = Array.from({ length: rows }, (_, i) => (pick(seed + i, 5) === 0 ? null : seed * 100 + i));
  const words = Array.from({ length: rows }, (_, i) => (pick(seed + 7 * i, 4) === 0 ? null : `w${seed}-${'x'.repeat(pick(i, 9))}`));
  const flags = Array.from({ length: rows }, (_, i) => (pick(seed + 3 * i, 6) === 0 ? null : (i + seed) % 3 === 0));
  return new Table({ id: vectorFromArray(ints, new Int32()), word: vectorFromArray(words, new Utf8()), flag: vectorFromArray(flags, new Bool()) });
}

/** The same names, another type in the first column. */
const retyped = (seed: number, rows: number) =>
  new Table({ id: vectorFromArray(Array.from({ length: rows }, (_, i) => seed + i / 4), new Float32()), word: vectorFromArray(Array(rows).fill('z'), new Utf8()), flag: vectorFromArray(Array(rows).fill(true), new Bool()) });

test('Tables from the learned layout equal the description path frame after frame: rows, slices, nulls, alternating and retyped layouts', async (t) => {
  await withRing('layout', { slots: 256 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const sent: Table[] = [];
    for (let seed = 0; seed < 120; seed++) {
      const rows = pick(seed, 40);
      const whole = seed % 5 === 4 ? retyped(seed, rows) : flat(seed, rows + 6);
      const table = seed % 3 === 1 && whole.numRows > 6 ? whole.slice(3, 3 + rows) : whole; // offset 3
      sent.push(table);
      await producer.publish(table);
    }
    for (const [i, expected] of sent.entries()) {
      const f = consumer.tryNext()!;
      t.is(tableDifference(expected, f.toTable()), null, `frame ${i}`);
      t.is(tableDifference(expected, f.toTable()), null, `frame ${i}, built again`);
      f.release();
    }
    consumer.close();
    producer.close();
  });
});
