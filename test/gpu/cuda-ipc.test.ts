// The cuda-ipc memory kind between processes on a real GPU: device columns
// cross without copies, with offsets, null masks, ordering events, one IPC open
// per allocation, and nothing leaked. Skipped, with the reason, without a GPU.
import { constants } from 'node:buffer';
import test from 'ava';
import { tableDifference } from '../../lib/arrow/compare.js';
import { Table } from 'apache-arrow';
import { absentBuffer, Consumer, type Frame, cudaInfo, DeviceBuffer, deviceBufferDescriptor, DeviceStream, exportDeviceMemory, GpuringError, PinnedHostPool, Producer, type FrameDescription } from '../../lib/index.js';
import { HANDLE_BYTES } from '../../lib/codec/layout.js';
import { native } from '../../lib/native.js';
import { allTypesTable } from '../helpers/all-types.js';
import { child, deviceChild, eventually, exitOf, fromDeviceProducer, nextLine, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

gpuTest('every type published to the device in one process reads back equal in another', async (t) => {
  await fromDeviceProducer('types', [29], async (consumer) => {
    const full = allTypesTable(29);
    for (const want of [full, full.slice(3, 27)]) {
      const f = await consumer.next({ timeout: 30_000 });
      t.true(f.description.columns.every((c) => c.buffers.every((b) => b.kind !== 'host')), 'every buffer is device memory');
      t.is(tableDifference(want, f.toTable()), null);
      f.release();
    }
  });
});

gpuTest('a 1 GiB float32 column crosses without copies; its checksum holds after device-to-host', async (t) => {
  const bytes = 1 << 30;
  await fromDeviceProducer('big', [bytes], async (consumer) => {
    const f = await consumer.next({ timeout: 60_000 });
    const started = performance.now();
    const x = f.toTable().getChild('x')!.data[0]!.values as Float32Array;
    const copied = performance.now() - started;
    t.is(x.length, bytes / 4);
    let bad = -1;
    for (let i = 0; i < x.length && bad < 0; i++) if (x[i] !== Math.fround(i)) bad = i; // float32 rounds above 2^24
    t.is(bad, -1, `value ${bad} is ${x[bad]}`);
    t.log(`1 GiB copied device-to-host in ${copied.toFixed(0)} ms (${(bytes / copied / 1e6).toFixed(1)} GB/s)`);
    f.release();
  });
});

gpuTest('copyToDevice(): a device frame copied device-to-device, released at once, and read from the copy', async (t) => {
  await fromDeviceProducer('types', [29], async (consumer) => {
    const full = allTypesTable(29);
    const f = await consumer.next({ timeout: 30_000 });
    using copy = f.copyToDevice();
    f.release(); // the producer may reuse its memory now; the copy is ours
    t.true(copy.memory.byteLength > 0);
    t.is(copy.description.syncKind, 0);
    t.is(tableDifference(full, copy.toTable()), null);
    const g = await consumer.next({ timeout: 30_000 });
    g.release();
  });
});

gpuTest('copyToDevice() of a host frame uploads it; the copy reads back equal', async (t) => {
  await withRing('gpu-host', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const table = allTypesTable(13);
    await producer.publish(table);
    const f = await consumer.next({ timeout: 5000 });
    using copy = f.copyToDevice({ device: 0 });
    f.release();
    t.is(tableDifference(table, copy.toTable()), null);
    consumer.close();
    producer.close();
  });
});

/** One float32 column over `bytes` of device memory at `ptr` (the caller's). */
function float32Column(ptr: bigint, bytes: number): FrameDescription {
  const rows = bytes / 4;
  const column = { name: 'x', format: 'f', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: rows, nullCount: 0, offset: 0, buffers: [absentBuffer(), deviceBufferDescriptor(ptr, bytes)], children: [] };
  return { rowCount: rows, metadata: null, columns: [column], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) };
}

/** A producer, a consumer and `bytes` of device memory in this process; all drained, freed and closed after `fn`. */
async function inProcess(prefix: string, bytes: number, fn: (producer: Producer, consumer: Consumer, buf: DeviceBuffer) => Promise<void>): Promise<void> {
  await withRing(prefix, { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const buf = DeviceBuffer.alloc(bytes);
    try {
      await fn(producer, consumer, buf);
      await producer.drain();
    } finally {
      buf.free();
      consumer.close();
      producer.close();
    }
  });
}

/** Whether every byte of the frame's column `x` (copied to the host) is `value`. */
function everyByteIs(f: Frame, value: number): boolean {
  const x = f.toTable().getChild('x')!.data[0]!.values as Float32Array;
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength).every((b) => b === value);
}

/** Publishes `buf` filled with `value` and hands the received frame to `fn`. */
async function roundTrip<T>(producer: Producer, consumer: Consumer, buf: DeviceBuffer, value: number, fn: (f: Frame) => T): Promise<T> {
  buf.upload(new Float32Array(buf.byteLength / 4).fill(value));
  await producer.publishFrame(float32Column(buf.ptr, buf.byteLength));
  const f = await consumer.next({ timeout: 5000 });
  try {
    return fn(f);
  } finally {
    f.release();
  }
}

gpuTest('a device column over 4 GiB: toTable() says UNSUPPORTED where Node holds no such Uint8Array (Node 20), and copyToDevice() carries it whole', async (t) => {
  // Its host copy would have been lent as a pinned block or huge pages, which Node
  // refuses over buffer.constants.MAX_LENGTH by running the finalizer at once (a double free).
  const low = 2 ** 32;
  const bytes = low + (64 << 20);
  const expected = (i: number) => (i < low ? 0x11 : 0x22);
  await inProcess('gpu-over-4g', bytes, async (producer, consumer, buf) => {
    native().deviceMemsetAsync(0, buf.ptr, 0x11, low, 1);
    native().deviceMemsetAsync(0, buf.ptr + BigInt(low), 0x22, bytes - low, 1);
    await producer.publishFrame(float32Column(buf.ptr, buf.byteLength));
    const f = await consumer.next({ timeout: 60_000 });
    if (bytes > constants.MAX_LENGTH) t.throws(() => f.toTable(), { instanceOf: GpuringError, code: 'UNSUPPORTED' });
    else {
      const x = f.toTable().getChild('x')!.data[0]!.values as Float32Array;
      const got = new Uint8Array(x.buffer, x.byteOffset, x.byteLength);
      t.deepEqual([0, low - 1, low, bytes - 1].map((i) => got[i]), [0, low - 1, low, bytes - 1].map(expected));
    }
    const copy = f.copyToDevice();
    f.release();
    for (const at of [0, low - 4096, low, bytes - 4096]) t.true(copy.memory.download(at, 4096).every((b) => b === expected(at)), `the copy's bytes at ${at}`);
    copy.free();
  });
});

gpuTest('a frame published after an idle stream needs no event; one published over queued writes reads them complete', async (t) => {
  await inProcess('gpu-event', 64 << 20, async (producer, consumer, buf) => {
    buf.upload(new Uint8Array(buf.byteLength)); // synchronous: the legacy stream is idle afterwards
    await producer.publishFrame(float32Column(buf.ptr, buf.byteLength));
    const idle = await consumer.next({ timeout: 5000 });
    t.is(idle.description.syncKind, 0, 'nothing was queued: no event');
    idle.release();
    native().deviceMemsetAsync(0, buf.ptr, 0x3c, buf.byteLength, 1, undefined, 200); // queued behind a 200 ms stall
    await producer.publishFrame(float32Column(buf.ptr, buf.byteLength));
    const busy = await consumer.next({ timeout: 5000 });
    t.true(everyByteIs(busy, 0x3c), 'the reads waited for the queued write');
    busy.release();
  });
});

gpuTest('a prepared device frame published again and again: each frame ordered after the work queued before it', async (t) => {
  await inProcess('gpu-prepared', 16 << 20, async (producer, consumer, buf) => {
    const prepared = producer.prepare(float32Column(buf.ptr, buf.byteLength));
    const opens = native().ipcStats().opens;
    for (let i = 1; i <= 20; i++) {
      native().deviceMemsetAsync(0, buf.ptr, i, buf.byteLength, 1, undefined, 50); // writes i after a 50 ms stall
      await prepared.publish({ tag: BigInt(i) });
      const f = await consumer.next({ timeout: 5000 });
      if (!everyByteIs(f, i)) t.fail(`frame ${i} was read before its write (the buffer held frame ${i - 1}'s)`);
      f.release();
      await producer.drain(); // the caller may write the buffer again only after release
    }
    buf.download(0, 4);
    await prepared.publish();
    const idle = await consumer.next({ timeout: 5000 });
    t.is(idle.description.syncKind, 0, 'nothing queued: no event');
    idle.release();
    t.is(native().ipcStats().opens - opens, 0, 'one allocation, mapped by this process already (its own export)');
  });
});

gpuTest('copyToDevice({ into }) copies into the caller\'s buffer, which the copy never frees; a wrong buffer is refused', async (t) => {
  await inProcess('gpu-into', 1 << 20, async (producer, consumer, buf) => {
    await roundTrip(producer, consumer, buf, 7, (f) => {
      const into = DeviceBuffer.alloc(f.copyBytes());
      const copy = f.copyToDevice({ into });
      t.is(copy.memory, into);
      t.true((copy.toTable().getChild('x')!.data[0]!.values as Float32Array).every((v) => v === 7));
      copy.free();
      t.false(into.freed, 'the caller\'s buffer stays allocated');
      const small = DeviceBuffer.alloc(256);
      t.is(t.throws(() => f.copyToDevice({ into: small }), { instanceOf: GpuringError })!.code, 'INVALID_ARGUMENT');
      small.free();
      into.free();
    });
  });
});

/** Whether a frame of `buf` filled with a pattern of `seed` comes back from toTable() exactly. */
async function readsBackExactly(producer: Producer, consumer: Consumer, buf: DeviceBuffer, seed: number): Promise<boolean> {
  const want = Uint32Array.from({ length: buf.byteLength / 4 }, (_, i) => Math.imul(i, 2654435761) + seed);
  buf.upload(want);
  await producer.publishFrame(float32Column(buf.ptr, buf.byteLength));
  const f = await consumer.next({ timeout: 5000 });
  const x = f.toTable().getChild('x')!.data[0]!.values as Float32Array;
  const got = new Uint32Array(x.buffer, x.byteOffset, x.length);
  f.release();
  return got.length === want.length && got.every((v, i) => v === want[i]);
}

gpuTest('large toTable results land in pinned memory, piece by piece, reused (and fully overwritten) once the table is collected', async (t) => {
  const bytes = (72 << 20) + 4096; // three pinned pieces, the last one partial
  await inProcess('gpu-pinned', bytes, async (producer, consumer, buf) => {
    const readsBack = (seed: number) => readsBackExactly(producer, consumer, buf, seed);
    const before = native().pinnedHostStats(); // earlier tests may have left larger blocks idle
    t.true(await readsBack(1), 'a fresh block holds the frame exactly');
    const pinned = native().pinnedHostStats().pinnedBytes;
    t.true(pinned >= before.pinnedBytes + bytes, 'the result was pinned');
    const collect = () => ((globalThis as { gc?: () => void }).gc?.(), native().pinnedHostStats().idleBytes >= before.idleBytes + bytes);
    t.true(await eventually(collect), 'the collected table gave its block back');
    t.true(await readsBack(2), 'the reused block holds the new frame only');
    t.is(native().pinnedHostStats().pinnedBytes, pinned, 'no new memory was pinned');
  });
});

gpuTest('PinnedHostPool.reserve() pins a block ahead: the first toTable() of that size lands in it, pinning nothing more, every value right', async (t) => {
  const bytes = (100 << 20) + 8192; // a size no other test reads
  await inProcess('gpu-reserve', bytes, async (producer, consumer, buf) => {
    const before = PinnedHostPool.stats();
    t.true(PinnedHostPool.reserve(bytes));
    const reserved = PinnedHostPool.stats();
    t.true(reserved.pinnedBytes >= before.pinnedBytes + bytes, 'a block was pinned');
    t.true(reserved.idleBytes >= before.idleBytes + bytes, 'and kept idle');
    t.true(await readsBackExactly(producer, consumer, buf, 7), 'the reserved block holds the frame exactly');
    t.is(PinnedHostPool.stats().pinnedBytes, reserved.pinnedBytes, 'no new memory was pinned');
    t.false(PinnedHostPool.reserve(2 ** 52), 'past the bound nothing is pinned');
    t.is(PinnedHostPool.stats().pinnedBytes, reserved.pinnedBytes);
  });
});

gpuTest('a pointer inside a larger allocation, and a null mask starting at bit 3', async (t) => {
  await fromDeviceProducer('offset', [], async (consumer) => {
    const f = await consumer.next({ timeout: 30_000 });
    const [mask, data] = f.description.columns[0]!.buffers;
    t.is(data!.offset, 4096, 'the offset inside the allocation travels');
    t.is(mask!.offset, 8195);
    t.deepEqual([...f.toTable().getChild('x')!], [30, 40, null, 60, 70, 80]);
    f.release();
  });
});

gpuTest('ordering: published while device writes are still queued, the consumer sees them complete', async (t) => {
  const bytes = 16 << 20;
  await fromDeviceProducer('ordering', [bytes, 300], async (consumer) => {
    const f = await consumer.next({ timeout: 60_000 });
    f.synchronize(); // a host-side wait on the producer's event; toTable() would order itself anyway
    const x = f.toTable().getChild('x')!.data[0]!.values as Uint8Array;
    let bad = -1;
    for (let i = 0; i < x.length && bad < 0; i += 1) if (x[i] !== 0x5a) bad = i;
    t.is(bad, -1, `byte ${bad} is ${x[bad]}, not the last write's 0x5a`);
    f.release();
  });
});

gpuTest('publishFrame({ stream }) and prepared.publish({ stream }): a write still queued on a stream of the producer\'s own is complete when the consumer reads', async (t) => {
  const bytes = 16 << 20;
  await fromDeviceProducer('ordering-stream', [bytes, 300], async (consumer) => {
    for (const value of [0x5a, 0x6b]) {
      const f = await consumer.next({ timeout: 60_000 });
      const x = f.toTable().getChild('x')!.data[0]!.values as Uint8Array;
      let bad = -1;
      for (let i = 0; i < x.length && bad < 0; i += 1) if (x[i] !== value) bad = i;
      t.is(bad, -1, `byte ${bad} is ${x[bad]}, not the last write's ${value}`);
      f.release();
    }
  });
});

gpuTest('a stream on another device than the frame\'s, or for a frame with no device buffer, is refused', async (t) => {
  await withRing('gpu-stream-refused', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    try {
      const noColumns: FrameDescription = { rowCount: 0, metadata: null, columns: [], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) };
      t.is((await t.throwsAsync(producer.publishFrame(noColumns, { stream: 0n }), { instanceOf: GpuringError }))?.code, 'INVALID_ARGUMENT');
      t.is((await t.throwsAsync(producer.publish(new Table(), { stream: 0n }), { instanceOf: GpuringError }))?.code, 'INVALID_ARGUMENT', 'publish(table) uploads itself');
      if (cudaInfo().devices.length > 1) {
        const buf = DeviceBuffer.alloc(64, { device: 0 });
        const other = DeviceStream.create({ device: 1 });
        t.is((await t.throwsAsync(producer.publishFrame(float32Column(buf.ptr, 64), { stream: other }), { instanceOf: GpuringError }))?.code, 'INVALID_ARGUMENT');
        other.destroy();
        buf.free();
      }
    } finally {
      producer.close();
    }
  });
});

gpuTest('the same allocation in many frames is opened once', async (t) => {
  const before = native().ipcStats();
  await fromDeviceProducer('same', [50], async (consumer) => {
    for (let i = 0; i < 50; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      t.is(f.toTable().getChild('x')!.get(15), 15);
      f.release();
    }
  });
  const after = native().ipcStats();
  t.is(after.opens - before.opens, 1);
  t.true(after.hits - before.hits >= 49);
});

gpuTest('a producer that makes a new event per frame: each frame is read after its own event, and the consumer holds a bounded number of them open', async (t) => {
  const frames = 700;
  const before = native().eventStats();
  await fromDeviceProducer('fresh-events', [frames], async (consumer) => {
    let wrong = 0;
    for (let i = 0; i < frames; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      const bytes = f.toTable().getChild('x')!.toArray() as Uint8Array;
      if (f.tag !== BigInt(i) || bytes.length !== 1 << 16 || bytes.some((b) => b !== (i & 0xff))) wrong++;
      f.release();
    }
    t.is(wrong, 0, 'every frame in order, with the bytes its event ordered it after');
  });
  const opened = native().eventStats().opened;
  t.log(`other processes' events held open: ${before.opened} before, ${opened} after ${frames} frames`);
  t.true(opened <= 256, `${opened} events held open: at most 256 per device, not one per frame`);
  t.true(opened > before.opened, 'the events were opened and cached');
});

gpuTest('release({ stream }): the lease lasts until the consumer\'s queued reads finish, so the producer\'s reuse cannot corrupt them', async (t) => {
  const bytes = 256 << 20;
  await withRing('gpu-stream-release', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const buffers = new Map<number, DeviceBuffer>();
    const overwrite = new Uint8Array(bytes).fill(0x22);
    // The producer reuses each buffer the moment its frame is released, as a
    // producer with a memory pool would.
    producer.on('release', (id) => buffers.get(id)?.upload(overwrite));
    for (const value of [0x11, 0x33]) {
      const buf = DeviceBuffer.alloc(bytes);
      buf.upload(new Uint8Array(bytes).fill(value));
      buffers.set(await producer.publishFrame(float32Column(buf.ptr, bytes), { tag: BigInt(value) }), buf);
    }
    const consumer = deviceChild('stream-release', name, 400);
    const report = await nextLine<{ leasedAfterRelease: number[]; leasedAfterSync: number; leasedAfterClose: number; closeMs: number; intact: boolean[] }>(consumer);
    t.log(JSON.stringify(report));
    t.deepEqual(report.leasedAfterRelease, [1, 1], 'release({ stream }) returned with the lease still held');
    t.is(report.leasedAfterSync, 0, 'the lease ended once the stream completed');
    t.is(report.leasedAfterClose, 0, 'close() waited for the pending release, then left');
    t.deepEqual(report.intact, [true, true], 'every queued copy read the frame as published');
    t.is((await exitOf(consumer)).code, 0);
    await producer.drain();
    for (const buf of buffers.values()) t.true(buf.download(0, 4096).every((b) => b === 0x22), 'the producer reused each buffer after release');
    for (const buf of buffers.values()) buf.free();
    producer.close();
  });
});

/** Closes every idle mapping, then restores the cache's bounds. */
function trimIpcCache(): void {
  native().ipcSetLimits(0, 0);
  native().ipcSetLimits(256, 64 * 2 ** 30);
}

gpuTest('10,000 device frames, each a new allocation often at a recycled address, each read, then device memory in use returns to where it started', async (t) => {
  trimIpcCache();
  const freeBefore = cudaInfo().devices[0]!.freeBytes;
  const frames = 10_000;
  await fromDeviceProducer('recycled', [frames], async (consumer) => {
    const started = performance.now();
    let stale = 0;
    for (let i = 0; i < frames; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      const values = [...f.toTable().getChild('i')!];
      if (values.length !== 8 || values.some((v) => v !== Number(f.tag))) stale++;
      f.release();
    }
    t.is(stale, 0, 'every frame showed its own contents (no stale mapping of recycled memory)');
    t.log(`${frames} device frames in ${((performance.now() - started) / 1000).toFixed(1)} s; cache ${JSON.stringify(native().ipcStats())}`);
    t.true(native().ipcStats().entries <= 256 + 1, 'the mapping cache stays bounded');
  });
  trimIpcCache();
  const freeAfter = cudaInfo().devices[0]!.freeBytes;
  t.true(Math.abs(freeAfter - freeBefore) < 64 << 20, `free device memory ${freeBefore} -> ${freeAfter}`);
});

gpuTest('publish(table, { device }) uploads into the memory of released frames: 2,000 frames read exactly, through at most one mapping per frame in flight', async (t) => {
  trimIpcCache();
  const opensBefore = native().ipcStats().opens;
  const frames = 2_000;
  await fromDeviceProducer('many', [frames], async (consumer) => {
    let wrong = 0;
    for (let i = 0; i < frames; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      const values = [...f.toTable().getChild('i')!];
      if (f.tag !== BigInt(i) || values.length !== 8 || values.some((v) => v !== i)) wrong++;
      f.release();
    }
    t.is(wrong, 0, 'every frame in order, with its own contents');
    const opened = native().ipcStats().opens - opensBefore;
    t.log(`${frames} uploaded frames mapped through ${opened} allocations`);
    // A frame holds its allocation from its upload until the producer reaps its release, and the
    // upload comes before the wait for a free slot: 64 published frames plus the one waiting.
    t.true(opened <= 64 + 1, `${opened} allocations opened: one per frame in flight at most (64 slots + 1 waiting for a slot), not one per frame`);
  });
});

gpuTest('memory CUDA IPC cannot export is refused up front, naming the reason', (t) => {
  const pinned = native().allocOtherMemory('pinned', 1 << 20);
  const e1 = t.throws(() => exportDeviceMemory(pinned), { instanceOf: GpuringError })!;
  t.is(e1.code, 'NOT_EXPORTABLE');
  t.regex(e1.message, /pinned host memory/);
  const managed = native().allocOtherMemory('managed', 1 << 20);
  const e2 = t.throws(() => exportDeviceMemory(managed), { instanceOf: GpuringError })!;
  t.is(e2.code, 'NOT_EXPORTABLE');
  t.regex(e2.message, /managed/);
  const pool = native().allocOtherMemory('pool', 1 << 20);
  const e3 = t.throws(() => exportDeviceMemory(pool), { instanceOf: GpuringError })!;
  t.is(e3.code, 'NOT_EXPORTABLE');
  t.regex(e3.message, /stream-ordered pool/);
  const vmm = native().allocOtherMemory('vmm', 1 << 20);
  const e4 = t.throws(() => exportDeviceMemory(vmm), { instanceOf: GpuringError })!;
  t.is(e4.code, 'NOT_EXPORTABLE');
  t.regex(e4.message, /virtual memory management/);
  t.is(t.throws(() => exportDeviceMemory(12345n), { instanceOf: GpuringError })!.code, 'NOT_EXPORTABLE');
});

gpuTest('a consumer killed while holding device frames: the producer reclaims them and frees the memory', async (t) => {
  await withRing('gpu-kill', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const table = allTypesTable(8).selectAt([2, 27]);
    for (let i = 0; i < 4; i++) await producer.publish(table, { device: 0, tag: BigInt(i) });
    const holder = child('hold', name, 3);
    t.deepEqual((await nextLine<{ tags: string[] }>(holder)).tags, ['0', '1', '2']);
    holder.kill('SIGKILL');
    await exitOf(holder);
    t.true(await eventually(() => producer.inFlight === 1), `in flight: ${producer.inFlight}`);
    const consumer = Consumer.open(name);
    const f = await consumer.next({ timeout: 5000 });
    t.is(f.tag, 3n);
    t.is(tableDifference(table, f.toTable()), null);
    f.release();
    await producer.drain();
    consumer.close();
    producer.close();
  });
});
