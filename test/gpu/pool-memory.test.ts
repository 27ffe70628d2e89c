// The cuda-pool memory kind (SPEC.md §9b) between processes on a real GPU:
// memory of a stream-ordered pool crosses without copies, its pool's
// descriptor handed over the producer's descriptor channel (§9c), each
// allocation imported once per frame and freed with the last release.
// Skipped, with the reason, without a GPU.
import test from 'ava';
import { absentBuffer, Consumer, cudaInfo, DeviceBuffer, deviceBufferDescriptor, exportDeviceMemory, GpuringError, Producer, type FrameDescription } from '../../lib/index.js';
import { HANDLE_BYTES } from '../../lib/codec/layout.js';
import { native } from '../../lib/native.js';
import { deviceChild, exitOf, fromDeviceProducer, nextLine, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

const floats = (n: number, buffer: ReturnType<typeof deviceBufferDescriptor>): FrameDescription => ({
  rowCount: n,
  metadata: null,
  columns: [{ name: 'x', format: 'f', nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: n, nullCount: 0, offset: 0, buffers: [absentBuffer(), buffer], children: [] }],
  dictionaries: [],
  syncKind: 0,
  syncHandle: new Uint8Array(HANDLE_BYTES),
});

gpuTest('memory of an exportable pool is exported as cuda-pool; the default pool of cudaMallocAsync is refused, naming the fix', (t) => {
  const buf = DeviceBuffer.alloc(1 << 20, { pool: true });
  const e = exportDeviceMemory(buf.ptr + 4096n);
  t.is(e.kind, 'cuda-pool');
  t.true(e.poolId > 0n);
  t.is(e.offset, 4096, 'the offset counts from the allocation base');
  t.is(exportDeviceMemory(buf.ptr).poolId, e.poolId, 'one pool, one number');
  buf.free();
  const other = native().allocOtherMemory('pool', 1 << 20);
  const refused = t.throws(() => exportDeviceMemory(other), { instanceOf: GpuringError })!;
  t.is(refused.code, 'NOT_EXPORTABLE');
  t.regex(refused.message, /POSIX_FILE_DESCRIPTOR/);
});

gpuTest('pool memory crosses processes: 40 frames, each a new allocation at a recycled address, read exactly; every import freed', async (t) => {
  const before = native().poolStats();
  await fromDeviceProducer('pool', [40], async (consumer) => {
    for (let i = 0; i < 40; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      t.is(f.description.columns[0]!.buffers[1]!.kind, 'cuda-pool');
      const values = f.toTable().getChild('x')!.toArray() as Float32Array;
      if (values.length !== 1 << 18 || !values.every((v) => v === i)) t.fail(`frame ${i} read ${values[0]} .. ${values[values.length - 1]}`);
      f.release();
    }
  });
  const after = native().poolStats();
  t.is(after.poolsImported - before.poolsImported, 1, 'the pool was imported once');
  t.is(after.imported - before.imported, 40, 'each allocation imported once');
  t.is(after.imports, before.imports, 'every import freed at release');
});

gpuTest('a cuda-pool frame published and read in one process maps the memory directly', async (t) => {
  await withRing('gpu-pool-self', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const buf = DeviceBuffer.alloc(1 << 16, { pool: true });
    buf.upload(new Float32Array(1 << 14).fill(3));
    await producer.publishFrame(floats(1 << 14, deviceBufferDescriptor(buf.ptr, 1 << 16)));
    const f = await consumer.next({ timeout: 5000 });
    t.true((f.toTable().getChild('x')!.toArray() as Float32Array).every((v) => v === 3));
    f.release();
    await producer.drain();
    buf.free();
    consumer.close();
    producer.close();
  });
});

gpuTest('a cuda-pool frame whose producer died before anyone imported its pool fails with DESCRIPTOR_UNAVAILABLE, and is released', async (t) => {
  await withRing('gpu-pool-dead', { slots: 8 }, async (ring, name) => {
    const consumer = Consumer.open(name);
    const producer = deviceChild('pool-exit', name);
    await nextLine(producer);
    await exitOf(producer);
    const f = await consumer.next({ timeout: 30_000 });
    const e = t.throws(() => f.toTable(), { instanceOf: GpuringError })!;
    t.is(e.code, 'DESCRIPTOR_UNAVAILABLE');
    f.release();
    t.is(ring.inspect().slots.leased, 0);
    consumer.close();
  });
});

gpuTest('10,000 pool frames, each a new allocation, mapped and released: no import outlives its frame, device memory returns to where it started', async (t) => {
  const freeBefore = cudaInfo().devices[0]!.freeBytes;
  const before = native().poolStats();
  await fromDeviceProducer('pool', [10_000], async (consumer) => {
    for (let i = 0; i < 10_000; i++) {
      const f = await consumer.next({ timeout: 30_000 });
      f.mapDevice();
      if (i % 1000 === 999 && !(f.toTable().getChild('x')!.toArray() as Float32Array).every((v) => v === i)) t.fail(`frame ${i}`);
      f.release();
    }
  });
  const after = native().poolStats();
  t.is(after.imported - before.imported, 10_000);
  t.is(after.imports, before.imports, 'every import freed at release');
  const freeAfter = cudaInfo().devices[0]!.freeBytes;
  // Not lower than before (it may be higher: memory of earlier tests' processes still being given back then).
  t.true(freeAfter > freeBefore - (64 << 20), `free device memory ${freeBefore} -> ${freeAfter}`);
});

gpuTest("a producer's idle mappings and imported pool stay while it lives, and go at the first sweep after it is killed", async (t) => {
  await withRing('gpu-forget', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name, { sweepInterval: 20 });
    const [ipcBefore, poolsBefore] = [native().ipcStats(), native().poolStats()];
    const producer = deviceChild('leave', name);
    for (const kind of ['cuda-ipc', 'cuda-pool'] as const) {
      const f = await consumer.next({ timeout: 30_000 });
      t.is(f.description.columns[0]!.buffers[1]!.kind, kind);
      t.true((f.toTable().getChild('x')!.toArray() as Float32Array).every((v) => v === (kind === 'cuda-ipc' ? 1 : 2)));
      f.release();
    }
    await nextLine(producer); // drained: both frames released, the producer idles
    await t.throwsAsync(consumer.next({ timeout: 200 }), { instanceOf: GpuringError }); // several sweeps pass
    t.is(native().ipcStats().entries, ipcBefore.entries + 1, 'a live producer\'s mapping stays cached');
    t.is(native().poolStats().pools, poolsBefore.pools + 1, 'a live producer\'s pool stays imported');
    producer.kill('SIGKILL');
    await exitOf(producer);
    await t.throwsAsync(consumer.next({ timeout: 200 }), { instanceOf: GpuringError });
    t.is(native().ipcStats().entries, ipcBefore.entries, 'its mapping was closed');
    t.is(native().poolStats().pools, poolsBefore.pools, 'its pool was destroyed');
    t.is(native().poolStats().imports, poolsBefore.imports);
    consumer.close();
  });
});
