// Consumers learn a stream's layout from its first frame and build later
// frames' Tables straight from their bodies (lib/arrow/frame-layout.ts). The
// Tables must be those the description gives, whatever changes from frame to
// frame: row counts, slices (offsets), null counts, absent buffers, and
// layouts that alternate or differ only in a type, and the arena each buffer
// lies in (the consumer reuses the last arena while handles name it); nested
// columns and dictionaries as well as flat ones, checked as on the first frame.
import { readdirSync, readFileSync } from 'node:fs';
import test, { type ExecutionContext } from 'ava';
import { Bool, Dictionary, Field, FixedSizeList, Float32, Float64, Int32, List, Struct, Table, Utf8, vectorFromArray } from 'apache-arrow';
import { tableDifference } from '../lib/arrow/compare.js';
import { forEachBuffer, handleName } from '../lib/codec/description.js';
import { Consumer, GpuringError, Producer } from '../lib/index.js';
import { withRing } from './helpers/ring.js';
import { locate, patch, u32 } from './helpers/shm-patch.js';

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

/**
 * Publishes `count` frames, frame `seed` the table `make(seed, rows)` (rows
 * < `most`; a third of them sliced from row 3, where the table has 6 rows
 * more), then checks each frame's Table, built twice, against its table.
 */
async function sendAndCompare(t: ExecutionContext, ring: string, count: number, most: number, make: (seed: number, rows: number) => Table) {
  await withRing(ring, { slots: 256 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const sent: Table[] = [];
    for (let seed = 0; seed < count; seed++) {
      const rows = pick(seed, most);
      const whole = make(seed, rows);
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
}

test('Tables from the learned layout equal the description path frame after frame: rows, slices, nulls, alternating and retyped layouts', (t) =>
  sendAndCompare(t, 'layout', 120, 40, (seed, rows) => (seed % 5 === 4 ? retyped(seed, rows) : flat(seed, rows + 6))));

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

/** Every nested kind a column can be, nested in one another, with nulls at every level. */
function nested(seed: number, rows: number): Table {
  const ids = Array.from({ length: rows }, (_, i) => seed * 100 + i);
  const nullAt = (i: number, every: number) => pick(seed + 11 * i, every) === 0;
  const words = ['red', 'green', 'blue'];
  const item = () => new Field('item', new Int32(), true);
  return new Table({
    tags: vectorFromArray(ids.map((id, i) => (nullAt(i, 6) ? null : Array.from({ length: id % 4 }, (_, k) => (k === 1 ? null : id + k)))), new List(item())),
    embedding: vectorFromArray(ids.map((id, i) => (nullAt(i, 7) ? null : [id, id / 2, id / 4])), new FixedSizeList(3, new Field('v', new Float32(), false))),
    point: vectorFromArray(ids.map((id, i) => (nullAt(i, 5) ? null : { x: id, s: i % 3 ? `p${id}` : null })), new Struct([new Field('x', new Int32()), new Field('s', new Utf8(), true)])),
    kind: vectorFromArray(ids.map((_, i) => (nullAt(i, 4) ? null : words[pick(seed + i, 3)]!)), new Dictionary(new Utf8(), new Int32())),
    groups: vectorFromArray(ids.map((id) => Array.from({ length: id % 3 }, (_, k) => ({ n: k, w: id + k / 8 }))), new List(new Field('g', new Struct([new Field('n', new Int32()), new Field('w', new Float64())]), true))),
  });
}

// A Node producer writes every nested node at offset 0 (it re-bases sliced
// tables); offsets on nested nodes come from Python producers, whose frames
// interop/python/tests/test_node_interop.py reads through the same layouts.
test('nested Tables (lists, fixed-size lists, structs, dictionaries, lists of structs) from the learned layout equal what was sent, frame after frame: rows, nulls, sliced tables, alternating layouts', (t) =>
  sendAndCompare(t, 'layout-nested', 90, 30, (seed, rows) => (seed % 4 === 3 ? flat(seed, rows) : nested(seed, rows + 6))));

test('a nested frame whose layout the consumer knows is checked as the first was: list offsets past the child are FRAME_BOUNDS', async (t) => {
  const table = () => new Table({ l: vectorFromArray([[1, 2], [3], [4, 5, 6]], new List(new Field('item', new Int32(), true))) });
  await withRing('layout-nested-damage', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(table());
    const first = await consumer.next({ timeout: 2000 });
    t.is(tableDifference(table(), first.toTable()), null, 'the first frame teaches the layout');
    first.release();
    await producer.publish(table());
    const { arena } = locate(name, 1);
    const at = readFileSync(arena).lastIndexOf(Buffer.from(new Int32Array([0, 2, 3, 6]).buffer));
    t.true(at > 0, 'the offsets are in the arena');
    patch(arena, at + 8, u32(99));
    const f = await consumer.next({ timeout: 2000 });
    t.throws(() => f.toTable(), { code: 'FRAME_BOUNDS', message: /column 'l': value offset 2 is 99/ });
    f.release();
    consumer.close();
    producer.close();
  });
});

/** Deterministic bytes for the damage below. */
function numbers(seed: number) {
  let s = seed >>> 0 || 1;
  return (n: number) => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) % n);
}

test("frames (nested and flat) whose buffers are overwritten at random under the consumer: toTable() and reading every value give the values or a typed error, never another exception", async (t) => {
  const next = numbers(Number(process.env.GPURING_FUZZ_SEED ?? 20261202));
  await withRing('layout-nested-fuzz', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const codes: Record<string, number> = {};
    for (let i = 0; i < Number(process.env.GPURING_FUZZ_FRAMES ?? 400); i++) {
      const rows = 4 + next(20);
      await producer.publish(i % 4 === 3 ? flat(i, rows) : nested(i, rows)); // flat ones too, between nested layouts
      const f = await consumer.next({ timeout: 2000 });
      const buffers: { arena: string; offset: number; length: number }[] = [];
      forEachBuffer(f.description, (b) => void (b.kind === 'host' && b.length > 0 && buffers.push({ arena: `/dev/shm/${handleName(b.handle)}`, offset: b.offset, length: b.length })));
      for (let k = 1 + next(4); k > 0; k--) {
        const b = buffers[next(buffers.length)]!;
        patch(b.arena, b.offset + next(b.length), Uint8Array.of(next(256)));
      }
      try {
        const table = f.toTable();
        for (const column of table.schema.fields) Array.from(table.getChild(column.name)!, (v) => JSON.stringify(v));
        codes.ok = (codes.ok ?? 0) + 1;
      } catch (error) {
        if (!(error instanceof GpuringError)) throw error;
        codes[error.code] = (codes[error.code] ?? 0) + 1;
      }
      f.release();
    }
    t.log(codes);
    t.deepEqual(Object.keys(codes).filter((c) => c !== 'ok' && c !== 'FRAME_BOUNDS'), [], 'damage is FRAME_BOUNDS or harmless');
    t.true((codes.ok ?? 0) > 0 && (codes.FRAME_BOUNDS ?? 0) > 0, 'some frames read, some refused');
    consumer.close();
    producer.close();
  });
});
