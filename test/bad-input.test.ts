// Shared memory is untrusted: damaged segments, slots and bodies give typed
// errors, never a crash or a hang, and the ring keeps working afterwards.
import { chownSync, closeSync, ftruncateSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import test from 'ava';
import { Dictionary, Int32, Table, Utf8, vectorFromArray } from 'apache-arrow';
import { absentBuffer, Consumer, decodeFrame, GpuringError, hostBuffer, Producer, Ring } from '../lib/index.js';
import { Buffer_, BUFFER_BYTES, HEADER_BYTES, Node, NODE_BYTES } from '../lib/codec/layout.js';
import { child, exitOf, uniqueName, withRing } from './helpers/ring.js';
import { locate, patch, read, u32, u64 } from './helpers/shm-patch.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i, i + 1], new Int32()) });

async function expectCode(t: import('ava').ExecutionContext, promise: Promise<unknown>, codes: string[]) {
  const error = await t.throwsAsync(promise, { instanceOf: GpuringError });
  t.true(codes.includes(error!.code), `code ${error!.code} is one of ${codes}: ${error!.message}`);
}

const asRoot = process.getuid?.() === 0 ? test : test.skip; // making a segment another user owns needs root

asRoot('a ring another user created first is refused with SEGMENT_OWNER unless its owner is trusted (anyOwner)', async (t) => {
  await withRing('squat', {}, async (_ring, name) => {
    chownSync(`/dev/shm/gpuring.${name}`, 65534, 65534);
    for (const open of [() => Consumer.open(name), () => Producer.open(name), () => Ring.open(name)])
      t.is(t.throws(open, { instanceOf: GpuringError })!.code, 'SEGMENT_OWNER');
    const consumer = Consumer.open(name, { anyOwner: true });
    consumer.close();
  });
});

test('a foreign file under the segment name is refused as SEGMENT_FOREIGN', (t) => {
  const name = uniqueName('foreign');
  writeFileSync(`/dev/shm/gpuring.${name}`, Buffer.from('this is not a gpuring segment, just text'.repeat(20)));
  try {
    for (const open of [() => Ring.open(name), () => Consumer.open(name), () => Producer.open(name)])
      t.is(t.throws(open, { instanceOf: GpuringError })!.code, 'SEGMENT_FOREIGN');
  } finally {
    Ring.unlink(name);
  }
});

for (const [what, offset, bytes, code] of [
  ['wrong magic', 0, new TextEncoder().encode('NOTARING'), 'SEGMENT_FOREIGN'],
  ['a newer major version', 8, u32(3 << 16), 'SEGMENT_VERSION'],
  ['a different layout hash', 16, u64(0x1234n), 'SEGMENT_LAYOUT'],
  ['impossible slot count', 32, u32(3), 'SEGMENT_LAYOUT'],
  ['a creator that never finished', 8, u32(0), 'SEGMENT_NOT_READY'],
] as const) {
  test(`a segment with ${what} is refused as ${code}`, async (t) => {
    await withRing('damaged', { slots: 8 }, async (_ring, name) => {
      patch(`/dev/shm/gpuring.${name}`, offset, bytes);
      t.is(t.throws(() => Ring.open(name, { openTimeout: 50 }), { instanceOf: GpuringError })!.code, code);
      t.is(t.throws(() => Consumer.open(name, { openTimeout: 50 }), { instanceOf: GpuringError })!.code, code);
    });
  });
}

test('a truncated segment is refused as SEGMENT_TRUNCATED', async (t) => {
  await withRing('trunc', { slots: 64 }, async (_ring, name) => {
    const fd = openSync(`/dev/shm/gpuring.${name}`, 'r+');
    ftruncateSync(fd, 4096);
    closeSync(fd);
    t.is(t.throws(() => Ring.open(name), { instanceOf: GpuringError })!.code, 'SEGMENT_TRUNCATED');
  });
});

test('a malformed frame description: publishFrame() and prepare() refuse it with INVALID_ARGUMENT naming the place, publish nothing, and the ring goes on', async (t) => {
  await withRing('bad-description', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const column = () => ({ name: 'x', format: 'C', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: 0, nullCount: 0, offset: 0, buffers: [absentBuffer(), absentBuffer()], children: [] as unknown[] });
    const valid = () => ({ rowCount: 0, metadata: null, columns: [column()] as unknown[], dictionaries: [] as unknown[], syncKind: 0, syncHandle: new Uint8Array(64) });
    const edited = (edit: (d: ReturnType<typeof valid>, c: ReturnType<typeof column>) => void) => {
      const d = valid();
      edit(d, d.columns[0] as ReturnType<typeof column>);
      return d;
    };
    const cases: [string, unknown, RegExp][] = [
      ['null', null, /description: must be an object/],
      ['a number', 5, /description: must be an object/],
      ['no columns', edited((d) => delete (d as { columns?: unknown }).columns), /columns: must be an array/],
      ['columns that are not an array', edited((d) => ((d as { columns: unknown }).columns = { length: 1 })), /columns: must be an array/],
      ['a null column', edited((d) => (d.columns[0] = null)), /columns\[0\]: must be an object/],
      ['a hole among the columns', edited((d) => (d.columns = [, d.columns[0]])), /columns\[0\]: must be an object/],
      ['no buffers', edited((_d, c) => delete (c as { buffers?: unknown }).buffers), /columns\[0\]\.buffers: must be an array/],
      ['a null buffer', edited((_d, c) => ((c.buffers as unknown[])[1] = null)), /columns\[0\]\.buffers\[1\]: must be an object/],
      ['no children', edited((_d, c) => delete (c as { children?: unknown }).children), /columns\[0\]\.children: must be an array/],
      ['a column that contains itself', edited((_d, c) => c.children.push(c)), /nests deeper than 64 levels/],
      ['no dictionaries', edited((d) => delete (d as { dictionaries?: unknown }).dictionaries), /dictionaries: must be an array/],
    ];
    for (const [what, description, message] of cases) {
      for (const [call, attempt] of [['publishFrame', () => producer.publishFrame(description as never)], ['prepare', async () => producer.prepare(description as never)]] as const) {
        const e = await t.throwsAsync(attempt(), { instanceOf: GpuringError }, `${call}: ${what}`);
        t.is(e?.code, 'INVALID_ARGUMENT', `${call}: ${what}`);
        t.regex(e?.message ?? '', message, `${call}: ${what}`);
      }
    }
    t.is(consumer.tryNext(), null, 'nothing was published');
    t.is(producer.inFlight, 0);
    const id = await producer.publishFrame(valid() as never);
    const f = await consumer.next({ timeout: 2000 });
    t.is(f.id, id, 'a valid frame after them goes through');
    t.is(f.description.columns[0]!.name, 'x');
    f.release();
    consumer.close();
    producer.close();
  });
});

test('arguments of the wrong type are INVALID_ARGUMENT: allocate(), loan(), decodeFrame(), hostBuffer()', async (t) => {
  await withRing('bad-arguments', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const calls: [string, () => unknown][] = [
      ['allocate("x")', () => producer.allocate('x' as never)],
      ['allocate(1.5)', () => producer.allocate(1.5)],
      ['loan(null, 1)', () => producer.loan(null as never, 1)],
      ['decodeFrame(null)', () => decodeFrame(null as never)],
      ['hostBuffer(null, 0, 0)', () => hostBuffer(null as never, 0, 0)],
    ];
    for (const [what, call] of calls) t.is(t.throws(call, { instanceOf: GpuringError }, what)?.code, 'INVALID_ARGUMENT', what);
    t.is(producer.allocate(8).length, 8, 'a valid allocation after them');
    producer.close();
  });
});

test('garbage in a published slot reference: a typed error for that frame, then the ring goes on', async (t) => {
  await withRing('garbage-ref', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const variants: [string, (slot: number, seg: string) => void][] = [
      ['random bytes', (slot, seg) => patch(seg, slot + 16, Uint8Array.from({ length: 48 }, (_, i) => (i * 97 + 13) & 0xff))],
      ['producer index past the table', (slot, seg) => patch(seg, slot + 24, u32(5000))],
      ['body outside its arena', (slot, seg) => patch(seg, slot + 16 + 24, u64(1n << 40n))],
      ['body length too large', (slot, seg) => patch(seg, slot + 16 + 20, u32(0xfffffff0))],
    ];
    for (const [i, [what, damage]] of variants.entries()) {
      await producer.publish(frame(i));
      const { slot, seg } = locate(name, 2 * i);
      damage(slot, seg);
      await expectCode(t, consumer.next({ timeout: 2000 }), ['FRAME_INVALID', 'FRAME_BOUNDS', 'ARENA_INVALID']);
      await producer.publish(frame(100 + i));
      const good = await consumer.next({ timeout: 2000 });
      t.is(good.toTable().getChild('i')!.get(0), 100 + i, `after ${what}, the next frame arrives intact`);
      good.release();
    }
    consumer.close();
    producer.close();
  });
});

// Asleep: the consumer waits before each frame is published, so the damaged
// body is copied where its wait's spare Frame lies (lib/spare-frame.ts), and the
// good frame after it must still become that Frame, whole.
for (const mode of ['ready', 'asleep'] as const)
  test(`a damaged frame body: FRAME_INVALID or FRAME_BOUNDS, and the next frame is fine (consumer ${mode})`, async (t) => {
    await withRing(`garbage-body-${mode}`, { slots: 8 }, async (_ring, name) => {
      const producer = Producer.open(name);
      const consumer = Consumer.open(name);
      const damages: [string, string, (arena: string, body: number) => void][] = [
        ['FRAME_INVALID', 'bad magic', (a, b) => patch(a, b, u32(0x12345678))],
        ['FRAME_INVALID', 'bad format string', (a, b) => patch(a, b + HEADER_BYTES + Node.formatLength, u32(0))],
        ['FRAME_BOUNDS', 'column longer than its buffer', (a, b) => (patch(a, b + HEADER_BYTES + Node.length, u64(1000n)), patch(a, b + 32, u64(1000n)))],
        ['FRAME_BOUNDS', 'null count above length', (a, b) => patch(a, b + HEADER_BYTES + Node.nullCount, u64(3n))],
      ];
      // A frame, published before next() is called or while it waits (the damage lands before the consumer's event loop runs).
      const take = async (publish: () => Promise<unknown>) => {
        if (mode === 'ready') return (await publish(), consumer.next({ timeout: 2000 }));
        const taken = consumer.next({ timeout: 2000 });
        await publish();
        return taken;
      };
      for (const [i, [code, what, damage]] of damages.entries()) {
        const bad = take(async () => {
          await producer.publish(frame(i));
          const { arena, body } = locate(name, 2 * i);
          damage(arena, body);
        });
        await expectCode(t, bad, [code]);
        const good = await take(() => producer.publish(frame(50 + i)));
        t.is(good.toTable().getChild('i')!.get(1), 51 + i, `after ${what}`);
        good.release();
      }
      consumer.close();
      producer.close();
    });
  });

// nextBatch() waits for its first frame, then takes the frames ready after it:
// a damaged one among those must not cost the caller the first, which it holds
// by then (a lease nobody would release until garbage collection).
test('nextBatch() that waited gets its frame when a damaged frame follows it; the next call reports the damage, then the ring goes on', async (t) => {
  await withRing('garbage-after-wait', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const waiting = consumer.nextBatch({ timeout: 2000 });
    await producer.publish(frame(0));
    await producer.publish(frame(10));
    const { arena, body } = locate(name, 1);
    patch(arena, body, u32(0x12345678)); // bad magic, before the consumer's event loop runs
    const batch = await waiting;
    t.deepEqual(batch.map((f) => f.toTable().getChild('i')!.get(0)), [0]);
    batch.forEach((f) => f.release());
    await expectCode(t, consumer.nextBatch({ timeout: 2000 }), ['FRAME_INVALID']);
    await producer.publish(frame(20));
    const [good] = await consumer.nextBatch({ timeout: 2000 });
    t.is(good!.toTable().getChild('i')!.get(0), 20);
    good!.release();
    consumer.close();
    producer.close();
  });
});

test('a buffer offset past the end of its arena: decoding succeeds, toTable() refuses with FRAME_BOUNDS', async (t) => {
  await withRing('oob', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(frame(1));
    const { arena, body } = locate(name, 0);
    const dataBuffer = body + HEADER_BYTES + NODE_BYTES + 1 * BUFFER_BYTES; // node 0, buffer 1 (data)
    patch(arena, dataBuffer + Buffer_.offset, u64(1n << 45n));
    const f = await consumer.next({ timeout: 2000 });
    t.is(t.throws(() => f.toTable(), { instanceOf: GpuringError })!.code, 'FRAME_BOUNDS');
    f.release();
    consumer.close();
    producer.close();
  });
});

test('value offsets are checked inside the slice, not only at its ends: toTable() refuses [0, 64 MiB, 4, 5] with FRAME_BOUNDS', async (t) => {
  await withRing('offsets', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(new Table({ s: vectorFromArray(['ab', 'cd', 'e'], new Utf8()) }));
    const { arena } = locate(name, 0);
    const bytes = readFileSync(arena);
    const at = bytes.indexOf(Buffer.from(new Int32Array([0, 2, 4, 5]).buffer));
    t.true(at > 0, 'the offsets are in the arena');
    patch(arena, at + 4, u32(64 << 20));
    const f = await consumer.next({ timeout: 2000 });
    const error = t.throws(() => f.toTable(), { instanceOf: GpuringError })!;
    t.is(error.code, 'FRAME_BOUNDS');
    t.regex(error.message, /value offset 1 is 67108864/);
    f.release();
    consumer.close();
    producer.close();
  });
});

test('dictionary indices outside the dictionary are FRAME_BOUNDS; one under a null is any value', async (t) => {
  const column = vectorFromArray(['x', 'y', 'x', null, 'y', 'x', 'y'], new Dictionary(new Utf8(), new Int32()));
  const pattern = Buffer.from(new Int32Array([0, 1, 0, 0, 1, 0, 1]).buffer);
  await withRing('dictionary-index', { slots: 4 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    for (const [row, bad] of [[3, false], [2, true]] as const) {
      await producer.publish(new Table({ d: column }));
      const { arena } = locate(name, row === 3 ? 0 : 1);
      const bytes = readFileSync(arena);
      const at = bytes.lastIndexOf(pattern);
      t.true(at > 0, 'the indices are in the arena');
      patch(arena, at + 4 * row, new Uint8Array(new Int32Array([99]).buffer));
      const f = await consumer.next({ timeout: 5000 });
      if (bad) t.throws(() => f.toTable(), { code: 'FRAME_BOUNDS', message: /dictionary index 99 of row 2/ });
      else t.deepEqual([...f.toTable().getChild('d')!], ['x', 'y', 'x', null, 'y', 'x', 'y']);
      f.release();
    }
    consumer.close();
    producer.close();
  });
});

test("an arena header overwritten under its producer is restored by the producer's next full reap: a consumer process that maps the arena later reads its frames", async (t) => {
  await withRing('arena-header', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(frame(0));
    const { arena } = locate(name, 0);
    const header = read(arena, 0, 32);
    (await consumer.next({ timeout: 5000 })).release();
    patch(arena, 0, u64(0xbadn)); // the magic: every consumer that maps the arena now refuses it
    // More publishes than kFullReapEvery (128): at least one full reap, which checks the headers.
    for (let i = 1; i < 200; i++) {
      await producer.publish(frame(i), { timeout: 5000 });
      (await consumer.next({ timeout: 5000 })).release();
    }
    t.deepEqual(read(arena, 0, 32), header, 'the header is back');
    for (let i = 0; i < 3; i++) await producer.publish(frame(i));
    t.is((await exitOf(child('take-release', name, 3))).code, 0, 'a consumer process that maps the arena now reads its frames');
    consumer.close();
    producer.close();
  });
});

test('garbage slot words are repaired by a sweep; producers never stall on them', async (t) => {
  await withRing('garbage-word', { slots: 4 }, async (ring, name) => {
    const { seg, slot } = locate(name, 1);
    patch(seg, slot, u64(0xdeadbeefdeadbeefn));
    t.is(ring.sweep().corrupt, 1);
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    for (let i = 0; i < 12; i++) {
      await producer.publish(frame(i), { timeout: 5000 });
      const f = await consumer.next({ timeout: 5000 });
      t.is(f.toTable().getChild('i')!.get(0), i);
      f.release();
    }
    consumer.close();
    producer.close();
  });
});
