// Consumers learn a stream's layout from its first frame and build later
// frames' Tables straight from their bodies (lib/arrow/frame-layout.ts). The
// Tables must be those the description gives, whatever changes from frame to
// frame: row counts, slices (offsets), null counts, absent buffers, and
// layouts that alternate or differ only in a type, and the arena each buffer
// lies in (the consumer reuses the last arena while handles name it).
import { readdirSync } from 'node:fs';
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

/** About 20 KB of int32 values: three fill a producer's 64 KiB arena. */
const wide = (seed: number) => new Table({ id: vectorFromArray(Array.from({ length: 5000 }, (_, i) => seed * 10_000 + i), new Int32()) });

test('frames whose buffers lie in different arenas (two producers, each spilling into arenas a1, a2, ...) each read their own arena', async (t) => {
  await withRing('layout-arenas', { slots: 64 }, async (_ring, name) => {
    const producers = [Producer.open(name, { arenaBytes: 1 << 16 }), Producer.open(name, { arenaBytes: 1 << 16 })];
    const consumer = Consumer.open(name);
    const held = [];
    // Unreleased frames keep their arena space, so each producer's later frames go into new arenas.
    for (let seed = 0; seed < 16; seed++) {
      await producers[seed % 2]!.publish(wide(seed));
      const f = consumer.tryNext()!;
      t.is(tableDifference(wide(seed), f.toTable()), null, `frame ${seed}`);
      held.push(f);
    }
    const arenas = readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${name}.p`));
    t.true(arenas.length >= 6, `buffers spread over ${arenas.length} arenas`);
    for (const [seed, f] of held.entries()) t.is(tableDifference(wide(seed), f.toTable()), null, `frame ${seed}, built again after the others`);
    for (const f of held) f.release();
    consumer.close();
    for (const p of producers) p.close();
  });
});
