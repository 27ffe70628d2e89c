// Frames larger than one ArrayBuffer can hold in this Node
// (buffer.constants.MAX_LENGTH: 4 GiB before Node.js 22). This process lowers
// that limit to 8 MiB, so that these tests take in CI the paths 4 GiB takes in
// production:
// - a Node consumer reads frames from another language's larger arena through
//   windows (lib/arena-windows.ts): buffers at offsets all over the arena,
//   across window boundaries, one larger than a cached window holds (its own
//   window), one larger than the limit (UNSUPPORTED, released all the same);
// - a Node producer publishes a table larger than one arena it may lend in
//   several allocations, and refuses a single buffer larger than that, and an
//   allocate() or loan() that large, before it makes an arena.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { tableFromArrays, Field, Float64, Schema } from 'apache-arrow';
import test from 'ava';
import { Consumer, GpuringError, Producer, type Frame } from '../lib/index.js';
import { native } from '../lib/native.js';
import { exitOf, root, withRing } from './helpers/ring.js';

const LIMIT = 8 << 20;
native().setLendLimit(LIMIT);

const filesOf = (name: string) => readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${name}`)).sort();
const unsupported = { instanceOf: GpuringError, code: 'UNSUPPORTED' } as const;

/** Rows per frame: 1,000,000 float64 values (7.6 MiB) lie whole in a cached window only where they start in its first 0.4 MiB. */
const ROWS = [1, 1000, 250_000, 530_000, 1_000_000, 70_000, 130_000, 3, 262_144, 400_000, 10, 650_000];
/** 9.6 MB of float64 values: more than one buffer may hold here. */
const TOO_LARGE = 1_200_000;

const PRODUCER = `
import sys, pyarrow as pa, gpuring
rows = [int(n) for n in sys.argv[2].split(",")]
with gpuring.Producer.open(sys.argv[1], arena_size=64 << 20) as p:
    for i, n in enumerate(rows):
        x = pa.array([None if j % 7 == 3 else i * 1e6 + j for j in range(n)], pa.float64())
        s = pa.array([str(j % 97) for j in range(n)], pa.utf8())
        p.publish(pa.table({"x": x, "s": s}), timeout=60)
    p.drain(timeout=60)
`;

const encoder = new TextEncoder();

/** A Node producer and consumer on a new ring, closed after `fn`. */
async function withEnds(prefix: string, fn: (producer: Producer, consumer: Consumer, name: string) => Promise<void>): Promise<void> {
  await withRing(prefix, { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    try {
      await fn(producer, consumer, name);
    } finally {
      consumer.close();
      producer.close();
    }
  });
}

/** Checks frame `i`'s columns as views and as a Table, every row against what the producer wrote. */
function check(t: import('ava').ExecutionContext, frame: Frame, i: number, n: number): void {
  const [x, s] = frame.columns();
  const values = x!.values as Float64Array;
  let wrong = 0;
  for (let j = 0; j < n; j++) {
    const valid = x!.validity ? (x!.validity[(x!.offset + j) >> 3]! >> ((x!.offset + j) & 7)) & 1 : 1;
    if (valid !== (j % 7 === 3 ? 0 : 1) || (valid && values[j] !== i * 1e6 + j)) wrong++;
    const text = encoder.encode(String(j % 97));
    const at = Number(s!.offsets![j]);
    if (Number(s!.offsets![j + 1]) - at !== text.length || text.some((b, k) => s!.values![at + k] !== b)) wrong++;
  }
  t.is(wrong, 0, `frame ${i} (${n} rows): its column views`)
  const table = frame.toTable();
  const xs = table.getChild('x')!;
  const ss = table.getChild('s')!;
  let wrongRows = 0;
  for (let j = 0; j < n; j += Math.max(1, Math.floor(n / 4099))) {
    if (xs.get(j) !== (j % 7 === 3 ? null : i * 1e6 + j) || ss.get(j) !== String(j % 97)) wrongRows++;
  }
  t.is(wrongRows, 0, `frame ${i}: its Table`);
  t.is(xs.get(n - 1), (n - 1) % 7 === 3 ? null : i * 1e6 + n - 1);
}

test('a consumer reads frames in an arena larger than it may lend whole, through windows, and releases them to the producer', async (t) => {
  t.timeout(120_000);
  await withRing('windows', { slots: 32 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const rows = [...ROWS, TOO_LARGE];
    const producer = spawn('python3', ['-c', PRODUCER, name, rows.join(',')], {
      stdio: ['ignore', 'ignore', 'inherit'],
      env: { ...process.env, PYTHONPATH: `${root}/interop/python/src` },
    });
    try {
      // All held at once: later frames lie further into the arenas.
      const frames: Frame[] = [];
      for (let k = 0; k < rows.length; k++) frames.push(await consumer.next({ timeout: 60_000 }));
      ROWS.forEach((n, i) => check(t, frames[i]!, i, n));
      const tooLarge = frames[ROWS.length]!;
      t.is(tooLarge.numRows, TOO_LARGE);
      t.throws(() => tooLarge.columns(), unsupported);
      t.throws(() => tooLarge.toTable(), unsupported);
      const kept = frames[4]!.column('x')!.values as Float64Array;
      t.is(kept[1], 4e6 + 1);
      for (const frame of frames) frame.release();
      t.deepEqual(await exitOf(producer), { code: 0, signal: null }, 'the producer saw every frame released (drain returned)');
      consumer.close();
      t.is(kept[1], 0, 'a window the consumer lent reads zeros once it is closed');
    } finally {
      producer.kill();
      consumer.close();
    }
  });
});

test('a Node producer publishes a table larger than one arena it may lend, in several allocations; a single buffer that large is refused', async (t) => {
  await withEnds('split', async (producer, consumer) => {
    const n = 700_000; // 5.6 + 2.8 MB of numbers, 2.8 MB of string offsets, 1.4 MB of characters
    const a = Float64Array.from({ length: n }, (_, j) => j * 0.5);
    const b = Int32Array.from({ length: n }, (_, j) => n - j);
    const s = Array.from({ length: n }, (_, j) => String(j % 89));
    await producer.publish(tableFromArrays({ a, b, s }));
    const frame = await consumer.next({ timeout: 10_000 });
    const arenas = new Set(frame.description.columns.flatMap((c) => c.buffers.filter((x) => x.length > 0).map((x) => Buffer.from(x.handle).toString('hex'))));
    t.true(arenas.size >= 2, `its buffers lie in ${arenas.size} arenas`);
    const table = frame.toTable();
    t.deepEqual(table.getChild('a')!.toArray(), a);
    t.deepEqual(table.getChild('b')!.toArray(), b);
    let wrong = 0;
    for (let j = 0; j < n; j += 7) if (table.getChild('s')!.get(j) !== s[j]) wrong++;
    t.is(wrong, 0);
    frame.release();

    const huge = new Float64Array(LIMIT / 8);
    await t.throwsAsync(producer.publish(tableFromArrays({ huge })), unsupported);
    await producer.publish(tableFromArrays({ x: Float64Array.from([7, 8]) }));
    const after = await consumer.next({ timeout: 10_000 });
    t.deepEqual(Array.from(after.toTable().getChild('x')!.toArray() as Float64Array), [7, 8]);
    after.release();
    await producer.drain({ timeout: 10_000 });
    t.is(producer.inFlight, 0);
  });
});

test('allocations and loans whose arena one ArrayBuffer cannot hold are refused before an arena is made; the producer goes on', async (t) => {
  await withEnds('big-alloc', async (producer, consumer, name) => {
    producer.allocate(1024).free(); // its first arena, so that the listing below is settled
    const before = filesOf(name);
    t.throws(() => producer.allocate(LIMIT), unsupported);
    const rows = Math.ceil(LIMIT / 8);
    t.throws(() => producer.loan(new Schema([new Field('x', new Float64(), false)]), rows), unsupported);
    t.deepEqual(filesOf(name), before, 'no arena was made for them');
    await producer.publish(tableFromArrays({ x: Float64Array.from([1, 2, 3]) }));
    const frame = await consumer.next({ timeout: 5000 });
    t.deepEqual(Array.from(frame.toTable().getChild('x')!.toArray() as Float64Array), [1, 2, 3]);
    frame.release();
  });
});
