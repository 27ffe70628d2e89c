// The Node API's contracts: options, timeouts, abort, backpressure, releases,
// zero-copy allocation, explicit offsets, lifetime.
import { spawnSync } from 'node:child_process';
import { constants } from 'node:buffer';
import { readdirSync, statSync } from 'node:fs';
import test from 'ava';
import { Bool, Field, Float32, Float64, Int32, makeData, makeVector, Table, Utf8, vectorFromArray } from 'apache-arrow';
import { absentBuffer, Consumer, ERROR_CODES, GpuringError, hostBuffer, Producer, Ring, type BufferDescriptor, type FrameDescription } from '../lib/index.js';
import { native } from '../lib/native.js';
import { HANDLE_BYTES } from '../lib/codec/layout.js';
import { encodeFrame } from '../lib/codec/encode.js';
import { hostPublishOptions, preparedPublishOptions } from '../lib/options.js';
import { root, uniqueName, withRing } from './helpers/ring.js';

const frame = (i: number) => new Table({ i: vectorFromArray([i], new Int32()) });
const code = (fn: () => unknown) => {
  try {
    fn();
  } catch (error) {
    return (error as GpuringError).code;
  }
  return 'no error';
};

test('error codes are the same list in C and TypeScript', (t) => {
  t.deepEqual(native().errorCodes, ERROR_CODES.filter((c) => c !== 'NATIVE_LOAD'));
});

test('options are validated: unknown keys are named, bad values explained', (t) => {
  const e = t.throws(() => Ring.create(uniqueName('opt'), { slotz: 8 } as never), { instanceOf: GpuringError })!;
  t.is(e.code, 'INVALID_ARGUMENT');
  t.regex(e.message, /'slotz'/);
  t.regex(t.throws(() => Ring.create(uniqueName('opt'), { slots: 6 }))!.message, /power of two/);
  t.is(code(() => Ring.create('bad/name')), 'INVALID_ARGUMENT');
  t.is(code(() => Ring.open(uniqueName('missing'))), 'SEGMENT_NOT_FOUND');
});

test('next() rejects bad options with INVALID_ARGUMENT (a rejected promise, never a throw), hot keys as zod would', async (t) => {
  await withRing('next-opt', {}, async (_ring, name) => {
    const consumer = Consumer.open(name);
    for (const bad of [{ spin: -1 }, { spin: 2_000_000 }, { spin: Number.NaN }, { timeout: -1 }, { timeout: '5' }, { spinn: 1 }]) {
      const e = await t.throwsAsync(consumer.next(bad as never), { instanceOf: GpuringError }, JSON.stringify(bad));
      t.is(e!.code, 'INVALID_ARGUMENT');
    }
    t.is((await t.throwsAsync(consumer.next({ spin: 50, timeout: 0 }), { instanceOf: GpuringError }))!.code, 'TIMEOUT');
    consumer.close();
    t.is((await t.throwsAsync(consumer.next(), { instanceOf: GpuringError }))!.code, 'CLOSED');
  });
});

test('publish() and publishFrame() reject bad options with INVALID_ARGUMENT, hot keys as zod would, and publish nothing', async (t) => {
  await withRing('publish-opt', {}, async (ring, name) => {
    const producer = Producer.open(name);
    const noColumns: FrameDescription = { rowCount: 0, metadata: null, columns: [], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) };
    const bads = [{ device: -1 }, { device: 1.5 }, { tag: -1n }, { tag: 2n ** 64n }, { tag: 5 }, { timeout: -1 }, { timeout: Number.NaN }, { bogus: 1 }];
    for (const bad of bads) {
      t.is((await t.throwsAsync(producer.publish(frame(0), bad as never), { instanceOf: GpuringError }, JSON.stringify(bad, (_k, v) => (typeof v === 'bigint' ? String(v) : v))))!.code, 'INVALID_ARGUMENT');
      t.is((await t.throwsAsync(producer.publishFrame(noColumns, bad as never), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    }
    t.is(ring.inspect().participants.find((p) => p.index === producer.index)?.published, 0);
    const consumer = Consumer.open(name);
    await producer.publish(frame(3), { tag: 2n ** 64n - 1n, timeout: 0 });
    const f = await consumer.next({ timeout: 5000 });
    t.is(f.tag, 2n ** 64n - 1n, 'the largest tag passes the quick check');
    f.release();
    consumer.close();
    producer.close();
  });
});

test('creating an existing ring fails with SEGMENT_EXISTS, or opens it as it is with ifExists: open', async (t) => {
  await withRing('exists', { slots: 8 }, async (ring, name) => {
    t.is(code(() => Ring.create(name)), 'SEGMENT_EXISTS');
    const producer = ring.producer();
    const again = Ring.create(name, { slots: 64, ifExists: 'open' });
    t.is(again.inspect().slotCount, 8, 'the ring that was there');
    t.is(again.inspect().participants.length, 1, 'with its participants');
    again.close();
    producer.close();
  });
  const fresh = uniqueName('exists-fresh');
  const made = Ring.create(fresh, { slots: 16, ifExists: 'open' });
  t.is(made.inspect().slotCount, 16, 'a missing ring is created');
  made.close();
  Ring.unlink(fresh);
});

test('Ring.waitFor() resolves once another process creates the ring; times out with SEGMENT_NOT_FOUND; aborts with ABORTED', async (t) => {
  const name = uniqueName('waitfor');
  const waiting = Ring.waitFor(name, { timeout: 30_000 });
  await new Promise((r) => setTimeout(r, 100));
  const creator = spawnSync(process.execPath, ['--import', 'tsx', 'lib/cli/main.ts', 'create', name, '--slots', '4'], { cwd: root });
  t.is(creator.status, 0, String(creator.stderr));
  try {
    await waiting;
    const consumer = Consumer.open(name);
    t.is(consumer.tryNext(), null);
    consumer.close();
    const missing = uniqueName('waitfor-missing');
    const started = performance.now();
    t.is((await t.throwsAsync(Ring.waitFor(missing, { timeout: 60 }), { instanceOf: GpuringError }))?.code, 'SEGMENT_NOT_FOUND');
    t.true(performance.now() - started >= 59);
    const abort = new AbortController();
    setTimeout(() => abort.abort(), 30);
    t.is((await t.throwsAsync(Ring.waitFor(missing, { signal: abort.signal }), { instanceOf: GpuringError }))?.code, 'ABORTED');
  } finally {
    Ring.unlink(name);
  }
});

test('next() times out with TIMEOUT; tryNext() returns null on an empty ring', async (t) => {
  await withRing('timeout', {}, async (_ring, name) => {
    const consumer = Consumer.open(name);
    t.is(consumer.tryNext(), null);
    const started = performance.now();
    const e = await t.throwsAsync(consumer.next({ timeout: 150 }), { instanceOf: GpuringError });
    t.is(e!.code, 'TIMEOUT');
    t.true(performance.now() - started >= 140);
    consumer.close();
  });
});

test('a frame ready when a consumer next runs is handed over, not TIMEOUT, when its event loop was held up past the deadline', async (t) => {
  await withRing('late-loop', {}, async (_ring, name) => {
    using producer = Producer.open(name);
    using consumer = Consumer.open(name);
    const waiting = consumer.next({ timeout: 50 });
    await producer.publishFrame({ rowCount: 0, metadata: null, columns: [], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(64) }, { tag: 7n });
    // A synchronous call holds the event loop past the deadline; when it turns
    // again, libuv runs the expired timer before the ring's poll.
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 200);
    const f = await waiting;
    t.is(f.tag, 7n);
    f.release();
    const e = await t.throwsAsync(consumer.next({ timeout: 50 }), { instanceOf: GpuringError });
    t.is(e!.code, 'TIMEOUT', 'with nothing ready, a wait still times out');
  });
});

test('opening publishes and allocates nothing: the code warm-up of open() encodes its sample frame in memory only', async (t) => {
  await withRing('warm-up', {}, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = Producer.open(name);
    t.like(producer.stats(), { inFlight: 0, unpublishedAllocations: 0, arenas: 0 });
    t.is(consumer.tryNext(), null, 'no sample frame reached the ring');
    await producer.publishFrame({ rowCount: 0, metadata: null, columns: [], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(64) });
    const f = await consumer.next({ timeout: 5000 });
    t.deepEqual(f.description.columns, [], 'the first frame received is the first one published');
    f.release();
    producer.close();
    consumer.close();
  });
});

test('an aborted next() rejects with ABORTED and loses no frame', async (t) => {
  await withRing('abort', {}, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = Producer.open(name);
    const controller = new AbortController();
    const pending = consumer.next({ signal: controller.signal });
    setTimeout(() => controller.abort(), 50);
    t.is((await t.throwsAsync(pending, { instanceOf: GpuringError }))!.code, 'ABORTED');
    await producer.publish(frame(7));
    const f = await consumer.next({ timeout: 2000 });
    t.is(f.toTable().getChild('i')!.get(0), 7);
    f.release();
    t.is((await t.throwsAsync(consumer.next({ signal: AbortSignal.abort() }), { instanceOf: GpuringError }))!.code, 'ABORTED');
    consumer.close();
    producer.close();
  });
});

test('closing a consumer rejects its waits with CLOSED and ends iteration', async (t) => {
  await withRing('close', {}, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const pending = consumer.next();
    consumer.close();
    t.is((await t.throwsAsync(pending, { instanceOf: GpuringError }))!.code, 'CLOSED');
    t.is(code(() => consumer.tryNext()), 'CLOSED');
    const iterating = Consumer.open(name);
    const producer = Producer.open(name);
    await producer.publish(frame(1));
    const loop = (async () => {
      let n = 0;
      for await (const f of iterating) (n++, f.release(), setTimeout(() => iterating.close(), 20));
      return n;
    })();
    t.is(await loop, 1, 'the loop took the frame, then ended when the consumer closed');
    producer.close();
  });
});

test('backpressure: a full ring fails fast with RING_FULL, or waits for space, or times out', async (t) => {
  await withRing('full', { slots: 2 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(frame(0));
    await producer.publish(frame(1));
    t.is((await t.throwsAsync(producer.publish(frame(2), { timeout: 0 }), { instanceOf: GpuringError }))!.code, 'RING_FULL');
    t.is((await t.throwsAsync(producer.publish(frame(2), { timeout: 100 }), { instanceOf: GpuringError }))!.code, 'TIMEOUT');
    t.is(producer.stats().unpublishedAllocations, 0, 'a publish that failed freed its copies');
    const waiting = producer.publish(frame(2));
    await new Promise((r) => setTimeout(r, 50));
    const f = await consumer.next();
    f.release();
    const id = await waiting;
    t.is(id, 3, 'published once a slot was released and reclaimed');
    const seen = [];
    for (let i = 0; i < 2; i++) {
      const g = await consumer.next({ timeout: 2000 });
      seen.push(g.toTable().getChild('i')!.get(0));
      g.release();
    }
    t.deepEqual(seen, [1, 2], 'order kept');
    await producer.drain();
    t.is(producer.inFlight, 0);
    consumer.close();
    producer.close();
  });
});

test('releases() and drain() report frames as their memory comes back', async (t) => {
  await withRing('releases', {}, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const ids = [await producer.publish(frame(0)), await producer.publish(frame(1))];
    const released: number[] = [];
    const collecting = (async () => {
      for await (const id of producer.releases()) if (released.push(id) === 2) return;
    })();
    for (let i = 0; i < 2; i++) (await consumer.next()).release();
    await collecting;
    t.deepEqual(released.sort(), ids);
    await producer.drain();
    const before = producer.stats().arenaFreeBytes;
    await producer.publish(frame(2));
    t.true(producer.stats().arenaFreeBytes < before, 'an unreleased frame holds arena memory');
    const f = await consumer.next();
    t.is(code(() => f.release()), 'no error');
    t.is(code(() => f.release()), 'no error', 'releasing twice is harmless');
    t.is(code(() => f.toTable()), 'FRAME_STATE', 'a released frame cannot be read');
    await producer.drain();
    t.is(producer.stats().arenaFreeBytes, before, 'released memory is reused');
    consumer.close();
    producer.close();
  });
});

test('drain() gives up with TIMEOUT or ABORTED and leaves the frame out, then resolves once it is released', async (t) => {
  await withRing('drain-wait', {}, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(frame(0));
    const held = await consumer.next();
    const late = await t.throwsAsync(producer.drain({ timeout: 50 }), { instanceOf: GpuringError });
    t.is(late!.code, 'TIMEOUT');
    t.regex(late!.message, /1 frames still in flight after 50 ms/);
    const abort = new AbortController();
    const aborted = producer.drain({ signal: abort.signal });
    setTimeout(() => abort.abort(), 20);
    t.is((await t.throwsAsync(aborted, { instanceOf: GpuringError }))!.code, 'ABORTED');
    t.is((await t.throwsAsync(producer.drain({ signal: AbortSignal.abort() }), { instanceOf: GpuringError }))!.code, 'ABORTED');
    t.is((await t.throwsAsync(producer.drain({ timeout: -1 }), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    t.is(producer.inFlight, 1, 'a wait that ended released nothing');
    t.deepEqual(held.toTable().getChild('i')!.toArray(), frame(0).getChild('i')!.toArray(), 'the held frame is intact');
    const draining = producer.drain({ timeout: 20_000 });
    held.release();
    await draining;
    t.is(producer.inFlight, 0);
    consumer.close();
    producer.close();
  });
});

test('frames released behind one still held are reclaimed again and again while publishing goes on, with no wake-up: within about 128 publishes each time', async (t) => {
  await withRing('held-behind', { slots: 512 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    for (let i = 0; i < 10; i++) await producer.publish(frame(i));
    const held = consumer.tryNext()!;
    for (let i = 1; i < 10; i++) consumer.tryNext()!.release();
    // Publishing reaps in order, so nothing comes back behind `held` but by
    // the full pass publishing makes every 128 publishes or so (as many as
    // were in flight after the last one). No await here yields to the event
    // loop: no wake-up of the producer can reap for it.
    let most = 0;
    for (let i = 0; i < 400; i++) {
      await producer.publish(frame(i));
      consumer.tryNext()!.release();
      most = Math.max(most, producer.inFlight);
    }
    t.true(most <= 140, `up to ${most} frames in flight over 400 publishes`);
    held.release();
    await producer.drain();
    t.is(producer.inFlight, 0);
    consumer.close();
    producer.close();
  });
});

test('allocate(): columns written into arena memory are published without a copy', async (t) => {
  await withRing('zerocopy', {}, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const rows = 1000;
    const a = producer.allocate(rows * 4);
    const values = new Float32Array(a.bytes.buffer, a.bytes.byteOffset, rows);
    values.forEach((_, i) => (values[i] = i / 2));
    const column = makeVector(makeData({ type: new Float32(), length: rows, nullCount: 0, data: values }));
    await producer.publish(new Table({ x: column }));
    t.is(producer.stats().unpublishedAllocations, 0, 'the allocation now belongs to the frame');
    const f = await consumer.next();
    const x = f.toTable().getChild('x')!;
    t.is(x.get(999), 499.5);
    values[999] = -1; // same memory on both sides: the consumer sees the producer's write
    t.is(x.get(999), -1);
    t.is(code(() => a.free()), 'FRAME_STATE', 'a published allocation is not the caller\'s to free');
    f.release();
    const b = producer.allocate(64);
    b.free();
    t.is(producer.stats().unpublishedAllocations, 0);
    consumer.close();
    producer.close();
  });
});

test('publishFrame(): a hand-laid column with offset 3 and validity bits starting at bit 3', async (t) => {
  await withRing('offsets', {}, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    // Elements 0..9 = 10*i, valid unless i % 4 == 1; the frame shows elements 3..8.
    const data = producer.allocate(40);
    const ints = new Int32Array(data.bytes.buffer, data.bytes.byteOffset, 10);
    ints.forEach((_, i) => (ints[i] = 10 * i));
    const mask = producer.allocate(2);
    for (let i = 0; i < 10; i++) if (i % 4 !== 1) mask.bytes[i >> 3]! |= 1 << (i & 7);
    const arena = `/gpuring.${name}.p${producer.index}g1.a0`;
    const description: FrameDescription = {
      rowCount: 6,
      metadata: null,
      columns: [
        {
          name: 'v', format: 'i', nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null,
          dictionary: -1, length: 6, nullCount: 1, offset: 3,
          buffers: [hostBuffer(arena, mask.offset, 2), hostBuffer(arena, data.offset, 40)],
          children: [],
        },
      ],
      dictionaries: [],
      syncKind: 0,
      syncHandle: new Uint8Array(HANDLE_BYTES),
    };
    await producer.publishFrame(description);
    const f = await consumer.next();
    t.deepEqual([...f.toTable().getChild('v')!], [30, 40, null, 60, 70, 80]);
    f.release();
    const bad = { ...description, columns: [{ ...description.columns[0]!, buffers: [absentBuffer(), hostBuffer(arena, 1 << 20, 40)] }] };
    t.is((await t.throwsAsync(producer.publishFrame(bad), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    // Well-formed, but no consumer could read it: the data buffer holds 4 of the 9 int32s
    // that offset 3 + length 6 needs. The producer's own C validation refuses it.
    const short = producer.allocate(16);
    const tooShort = { ...description, columns: [{ ...description.columns[0]!, buffers: [absentBuffer(), hostBuffer(arena, short.offset, 16)] }] };
    const e = (await t.throwsAsync(producer.publishFrame(tooShort), { instanceOf: GpuringError }))!;
    t.is(e.code, 'FRAME_INVALID');
    t.regex(e.message, /buffer/);
    t.is(consumer.tryNext(), null, 'nothing was published');
    consumer.close();
    producer.close();
  });
});

test('a Table of several record batches is refused with advice; a zero-batch table is a zero-row frame', async (t) => {
  await withRing('batches', {}, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const two = new Table([...frame(1).batches, ...frame(2).batches]);
    const e = await t.throwsAsync(producer.publish(two), { instanceOf: GpuringError });
    t.regex(e!.message, /table\.batches/);
    await producer.publish(new Table(frame(1).schema));
    const f = await consumer.next();
    t.is(f.numRows, 0);
    t.deepEqual(f.schema.fields.map((x: Field) => x.name), ['i']);
    f.release();
    consumer.close();
    producer.close();
  });
});

/** Sizes of the producer's arena files, by arena number. */
function arenaSizes(name: string): number[] {
  const prefix = `gpuring.${name}.p`;
  return readdirSync('/dev/shm')
    .filter((f) => f.startsWith(prefix) && /\.a\d+$/.test(f))
    .sort((a, b) => Number(a.split('.a').pop()) - Number(b.split('.a').pop()))
    .map((f) => statSync(`/dev/shm/${f}`).size);
}

test('arenas start at 1 MiB and double while no size is chosen; a chosen size is kept', async (t) => {
  const column = (i: number) => new Table({ x: makeVector(new Float32Array(150_000).fill(i)) }); // 600 KB
  for (const [arenaBytes, want] of [[undefined, [1 << 20, 2 << 20, 4 << 20]], [1 << 20, [1 << 20, 1 << 20, 1 << 20, 1 << 20, 1 << 20]]] as const) {
    await withRing('arenas', { slots: 16 }, async (_ring, name) => {
      const producer = Producer.open(name, arenaBytes === undefined ? {} : { arenaBytes });
      for (let i = 0; i < 5; i++) await producer.publish(column(i)); // unread: every frame keeps its memory
      t.deepEqual(arenaSizes(name), [...want]);
      producer.close();
    });
  }
});

test('an allocation larger than /dev/shm can hold fails with NO_SPACE and a message that says what to do (UNSUPPORTED where one ArrayBuffer cannot hold it); a 1 TiB arena size is cut to what fits', async (t) => {
  await withRing('nospace', {}, async (_ring, name) => {
    const producer = Producer.open(name, { arenaBytes: 2 ** 40 });
    const e = t.throws(() => producer.allocate(2 ** 40), { instanceOf: GpuringError });
    if (constants.MAX_LENGTH < 2 ** 40) {
      t.is(e!.code, 'UNSUPPORTED'); // test/large-arena.test.ts
      t.regex(e!.message, /MAX_LENGTH.*Node\.js 22/);
    } else {
      t.is(e!.code, 'NO_SPACE');
      t.regex(e!.message, /\/dev\/shm.*(enlarge|shm-size)/);
    }
    t.is(await producer.publish(frame(1)), 1); // its arena: as large as the frame, not 1 TiB
    producer.close();
  });
});

test('prepare(): a description validated and encoded once, published again and again; host buffers and invalid frames are refused up front', async (t) => {
  await withRing('prepared', {}, async (_ring, name) => {
    using producer = Producer.open(name);
    using consumer = Consumer.open(name);
    // A struct column with no fields needs no memory at all, so this runs without a GPU.
    const frame = (format: string, buffers: BufferDescriptor[]): FrameDescription => ({
      rowCount: 5,
      metadata: null,
      columns: [{ name: 's', format, nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: 5, nullCount: 0, offset: 0, buffers, children: [] }],
      dictionaries: [],
      syncKind: 0,
      syncHandle: new Uint8Array(HANDLE_BYTES),
    });
    const prepared = producer.prepare(frame('+s', [absentBuffer()]));
    const ids = [];
    for (const tag of [7n, 8n, 9n]) ids.push(await prepared.publish({ tag }));
    t.is(new Set(ids).size, 3, 'each publish is a frame of its own');
    for (const tag of [7n, 8n, 9n]) {
      const f = await consumer.next({ timeout: 5000 });
      t.is(f.tag, tag);
      t.is(f.toTable().getChild('s')!.length, 5);
      f.release();
    }
    // A description that brings its own event carries it in every frame.
    const event = Uint8Array.from({ length: HANDLE_BYTES }, (_, i) => i + 1);
    const withEvent = producer.prepare({ ...frame('+s', [absentBuffer()]), syncKind: 2, syncHandle: event });
    for (let i = 0; i < 2; i++) {
      await withEvent.publish();
      const f = await consumer.next({ timeout: 5000 });
      t.is(f.description.syncKind, 2);
      t.deepEqual(f.description.syncHandle, event);
      f.release();
    }
    const code = (fn: () => unknown) => t.throws(fn, { instanceOf: GpuringError })!.code;
    const host = frame('i', [absentBuffer(), hostBuffer(`/gpuring.${name}.p0g1.a0`, 0, 20)]);
    t.is(code(() => producer.prepare(host)), 'INVALID_ARGUMENT', 'arena memory belongs to one frame');
    t.is(code(() => producer.prepare(frame('i', [absentBuffer()]))), 'FRAME_INVALID', 'an int32 column has two buffers');
    t.is((await t.throwsAsync(prepared.publish({ device: 0 } as never), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    producer.close();
    t.is((await t.throwsAsync(prepared.publish(), { instanceOf: GpuringError }))!.code, 'CLOSED');
  });
});

test('a prepared publish reads { tag, timeout } by hand as zod would, and leaves every other shape to zod', (t) => {
  const values: unknown[] = [undefined, {}, { tag: 0n }, { tag: 2n ** 64n - 1n, timeout: 0 }, { timeout: 5, tag: 3n }, { tag: undefined, stream: undefined }, Object.assign(Object.create(null), { tag: 9n }),
    { tag: -1n }, { tag: 2n ** 64n }, { tag: 5 }, { timeout: -1 }, { timeout: Number.NaN }, { timeout: '5' }, { bogus: 1 }, { bogus: undefined }, { stream: 5n }, null, 7, 'tag', [1n]];
  let handled = 0;
  for (const value of values) {
    const shown = String(JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? `${v}n` : v)));
    const quick = hostPublishOptions(value);
    if (quick === undefined) continue;
    handled++;
    const zod = preparedPublishOptions.safeParse(value ?? {});
    t.true(zod.success, `zod accepts ${shown} too`);
    if (zod.success) t.deepEqual({ timeout: quick.timeout, tag: quick.tag }, { timeout: zod.data.timeout, tag: zod.data.tag }, shown);
  }
  t.is(handled, 7, 'the seven good shapes take the hand path');
});

test('a prepared publish refuses bad options with INVALID_ARGUMENT and publishes nothing', async (t) => {
  await withRing('prepared-opt', {}, async (ring, name) => {
    using producer = Producer.open(name);
    const prepared = producer.prepare({ rowCount: 0, metadata: null, columns: [], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) });
    for (const bad of [{ tag: -1n }, { tag: 2n ** 64n }, { tag: 5 }, { timeout: -1 }, { timeout: Number.NaN }, { bogus: 1 }, { stream: 5n }]) {
      t.is((await t.throwsAsync(prepared.publish(bad as never), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    }
    t.is(ring.inspect().participants.find((p) => p.index === producer.index)?.published, 0);
    using consumer = Consumer.open(name);
    await prepared.publish({ tag: 2n ** 64n - 1n, timeout: 0 });
    const f = await consumer.next({ timeout: 5000 });
    t.is(f.tag, 2n ** 64n - 1n);
    f.release();
  });
});

test('publishMany(): N frames in one call, in order with their tags; nextBatch() takes them; with timeout 0 what fits goes and RING_FULL says how many; `published` counts every frame that went', async (t) => {
  await withRing('many', { slots: 8 }, async (ring, name) => {
    using producer = Producer.open(name);
    using consumer = Consumer.open(name);
    const prepared = producer.prepare({
      rowCount: 2,
      metadata: null,
      columns: [{ name: 's', format: '+s', nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: 2, nullCount: 0, offset: 0, buffers: [absentBuffer()], children: [] }],
      dictionaries: [],
      syncKind: 0,
      syncHandle: new Uint8Array(HANDLE_BYTES),
    });
    const tags = BigUint64Array.from({ length: 6 }, (_, i) => BigInt(100 + i));
    const ids = await prepared.publishMany(6, { tags });
    t.deepEqual(ids, Array.from({ length: 6 }, (_, i) => ids[0]! + i));
    const got = await consumer.nextBatch({ max: 10, timeout: 5000 });
    t.deepEqual(got.map((f) => f.tag), [...tags]);
    t.deepEqual(got.map((f) => f.id), ids);
    for (const f of got) f.release();
    const full = await t.throwsAsync(prepared.publishMany(10, { timeout: 0 }), { instanceOf: GpuringError });
    t.is(full!.code, 'RING_FULL');
    t.regex(full!.message, /took 8 of 10 frames/);
    const rest = await consumer.nextBatch({ max: 20, timeout: 5000 });
    t.is(rest.length, 8);
    t.deepEqual(rest.map((f) => f.tag), Array(8).fill(0n));
    for (const f of rest) f.release();
    const published = () => ring.inspect().participants.find((p) => p.index === producer.index)?.published;
    t.is(published(), 6 + 8, 'a batch cut short by RING_FULL counts the frames that went');
    const waiting = prepared.publishMany(12); // 8 go at once, 4 wait for space
    let taken = 0;
    while (taken < 12) for (const f of await consumer.nextBatch({ timeout: 5000 })) (f.release(), taken++);
    t.is((await waiting).length, 12);
    t.is(published(), 6 + 8 + 12, 'frames that waited for space count as they go');
    t.is((await t.throwsAsync(prepared.publishMany(0), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
    t.is((await t.throwsAsync(prepared.publishMany(3, { tags: new BigUint64Array(2) }), { instanceOf: GpuringError }))!.code, 'INVALID_ARGUMENT');
  });
});

test('frames taken one at a time keep their own bodies while held: small and large bodies, many at once', async (t) => {
  // Single frames are handed over in shared record chunks (64 KiB): none may
  // see another's bytes, across chunk boundaries and for bodies larger than a chunk.
  await withRing('held', { slots: 512 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const wide = (i: number, columns: number) => {
      const data: Record<string, ReturnType<typeof makeVector>> = {};
      for (let c = 0; c < columns; c++) data[`column_${i}_${c}`] = makeVector(Int32Array.of(i * 1000 + c));
      return new Table(data);
    };
    const shapes = Array.from({ length: 400 }, (_, i) => (i % 97 === 5 ? 900 : 1 + (i % 7)));
    const held = [];
    for (const [i, columns] of shapes.entries()) {
      await producer.publish(wide(i, columns), { tag: BigInt(i) });
      held.push(consumer.tryNext()!);
    }
    t.true(held.some((f) => encodeFrame(f.description).length > 64 << 10), 'some bodies are larger than a chunk');
    for (const [i, f] of held.entries()) {
      t.is(f.tag, BigInt(i));
      const table = f.toTable();
      t.is(table.numCols, shapes[i]!);
      t.is(table.schema.fields.at(-1)!.name, `column_${i}_${shapes[i]! - 1}`);
      t.is(table.getChildAt(shapes[i]! - 1)!.get(0), i * 1000 + shapes[i]! - 1);
      f.release();
    }
    consumer.close();
    producer.close();
  });
});

test('publish(table) of flat batches: small frames (columns sent with the body in one call) and larger ones read back whole while many are held', async (t) => {
  // Frames whose columns take up to 8 KiB travel in one allocation with their
  // body (publishStaged); larger ones in an allocation of their own. Rows
  // around that size, with nulls, strings and bits, cross it both ways; 400
  // more small ones, all held, fill several arenas.
  await withRing('staged', { slots: 512 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const values = (rows: number, seed: number) => ({
      f: Array.from({ length: rows }, (_, i) => (i % 3 === 0 ? null : seed + i / 4)),
      s: Array.from({ length: rows }, (_, i) => `v${seed}-${i}`),
      b: Array.from({ length: rows }, (_, i) => (i + seed) % 5 === 0),
    });
    const rows = [0, 1, 7, 300, 500, 560, 620, 700, 1000, 3000, ...Array<number>(400).fill(300)];
    const tables = rows.map((n, k) => {
      const v = values(n, k);
      return new Table({ f: vectorFromArray(v.f, new Float64()), s: vectorFromArray(v.s, new Utf8()), b: vectorFromArray(v.b, new Bool()) });
    });
    for (const [k, table] of tables.entries()) await producer.publish(table, { tag: BigInt(k) });
    const held = rows.map(() => consumer.tryNext()!);
    t.true(producer.stats().arenas > 1, 'the held frames fill more than one arena');
    for (const [k, f] of held.entries()) {
      t.is(f.tag, BigInt(k));
      const got = f.toTable();
      const want = values(rows[k]!, k);
      t.deepEqual(got.getChild('f')!.toArray().length, rows[k]);
      t.deepEqual([...got.getChild('f')!], want.f, `frame ${k}: float64 with nulls`);
      t.deepEqual([...got.getChild('s')!], want.s, `frame ${k}: utf8`);
      t.deepEqual([...got.getChild('b')!], want.b, `frame ${k}: bool`);
    }
    for (const f of held) f.release();
    await producer.drain();
    t.is(producer.inFlight, 0);
    consumer.close();
    producer.close();
  });
});
