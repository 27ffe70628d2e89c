/**
 * `npm run bench:gpu` (on a machine with an NVIDIA GPU): device columns
 * against what users do without IPC, baselines measured in the same run, on
 * the compiled package (dist/), as users run it.
 *  - publish-to-visible: a producer process publishes a device column, this
 *    process maps it (first open, then cached); baseline: host staging
 *    (pinned device-to-host, then host-to-device) of the same bytes.
 *  - copyToDevice() against raw cuMemcpyDtoDAsync of the same bytes.
 *  - toTable() against raw pinned cuMemcpyDtoHAsync of the same bytes.
 *  - a Python CuPy producer to this Node consumer: latency and frames/s.
 */
import { spawn, spawnSync } from 'node:child_process';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Consumer, cudaInfo, DeviceBuffer, deviceBufferDescriptor, absentBuffer, PinnedHostPool, Producer, type FrameDescription } from '../dist/index.js';
import { HANDLE_BYTES } from '../dist/codec/layout.js';
import { native } from '../dist/native.js';
import { exitOf, withRing } from '../test/helpers/ring.js';
import { compare, LATENCY_WARMUP, median, microsSince, percentile, report, type BenchRecord } from './harness.js';
import { wakeFloor } from './wake-floor.js';
import type { Chart, Series } from './plot.js';

const json = process.argv.includes('--json');
const root = fileURLToPath(new URL('..', import.meta.url));
const hasCupy = () => spawnSync('python3', ['-c', 'import cupy'], { stdio: 'ignore' }).status === 0;
const MiB = 1 << 20;
const SIZES = [MiB, 16 * MiB, 256 * MiB, 1024 * MiB, 4096 * MiB];
const COPY_SIZES = [16 * MiB, 256 * MiB, 1024 * MiB];
const progress = (line: string) => !json && process.stderr.write(`${line}\n`);
/** `--only WORD`: run the sections whose name contains WORD (publish-to-visible, new-allocation, cupy, cupy-made, copies; cupy runs cupy-made too). */
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1]! : '';
const want = (section: string) => section.includes(only);

function deviceColumn(ptr: bigint, bytes: number): FrameDescription {
  return {
    rowCount: bytes,
    metadata: null,
    columns: [{ name: 'x', format: 'C', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: bytes, nullCount: 0, offset: 0, buffers: [absentBuffer(), deviceBufferDescriptor(ptr, bytes)], children: [] }],
    dictionaries: [],
    syncKind: 0,
    syncHandle: new Uint8Array(HANDLE_BYTES),
  };
}

/**
 * Publish (tag taken) to the consumer holding the buffer's device address,
 * frame by frame (bench/stamp-producer.ts): frame 0 is the cold start (new
 * producer, and the process's first IPC open); WARM_UP frames of a small
 * allocation bring both sides to a running service's state (V8 optimized:
 * see LATENCY_WARMUP);
 * then the measured allocation's first frame opens it (cuIpcOpenMemHandle,
 * timed on its own too) and later frames hit the IpcHandleCache. `spin` is the
 * consumer's busy-poll (µs; 0: it sleeps and is woken through its thread).
 * Returns the measured allocation's latencies, [0] its first open.
 */
const WARM_UP = LATENCY_WARMUP;
/** What bench/stamp-producer.ts reports at its end: Producer.open(), and each measured frame's publish call (tag to return). */
interface ProducerTimes {
  openMicros: number;
  publishCalls: number[];
  describeCalls: number[];
}
async function publishToVisible(bytes: number, frames: number, spin: number, mode = 'describe'): Promise<{ cold: number; coldMap: number; producer: ProducerTimes; latencies: number[]; received: number[]; open: number; opens: number[]; gapUs: number }> {
  return withRing('bench-ptv', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = spawn(process.execPath, ['--import', 'tsx', join(root, 'bench/stamp-producer.ts'), name, String(bytes), String(WARM_UP), String(frames), mode], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let times: ProducerTimes = { openMicros: NaN, publishCalls: [], describeCalls: [] };
    producer.once('message', (m: ProducerTimes) => (times = m));
    const latencies: number[] = [];
    const received: number[] = [];
    const maps: number[] = [];
    const tags: bigint[] = [];
    for (let i = 0; i < WARM_UP + frames; i++) {
      const f = await consumer.next({ timeout: 60_000, spin: i ? spin : 0 });
      received.push(microsSince(f.tag));
      tags.push(f.tag);
      const t = performance.now();
      f.mapDevice();
      maps.push((performance.now() - t) * 1000);
      latencies.push(microsSince(f.tag));
      f.release();
    }
    consumer.close();
    await exitOf(producer);
    const gaps = tags.slice(WARM_UP + 1).map((tag, i) => Number(tag - tags[WARM_UP + i]!) / 1000);
    return { cold: latencies[0]!, coldMap: maps[0]!, producer: times, latencies: latencies.slice(WARM_UP), received: received.slice(WARM_UP), open: maps[WARM_UP]!, opens: maps.slice(WARM_UP), gapUs: median(gaps) };
  });
}

async function publishToVisibleRecords(bytes: number): Promise<BenchRecord[]> {
  const asleep = await publishToVisible(bytes, 201, 0);
  const spinning = await publishToVisible(bytes, 201, 20_000);
  const prepared = await publishToVisible(bytes, 201, 20_000, 'prepared');
  const preparedAsleep = await publishToVisible(bytes, 201, 0, 'prepared');
  const staging = stagingMicros(bytes);
  // Frames follow each other as fast as the round trip allows (publish, map, release, drain):
  // the floor is paced alike, its sender asleep for the median gap between our frames.
  const floor = wakeFloor(200, asleep.gapUs, 'asleep', WARM_UP);
  const floorName = `C one-wake floor (epoll_wait on a socket; sender asleep, ${Math.round(asleep.gapUs)} µs apart alike)`;
  const eventfdFloor = wakeFloor(200, asleep.gapUs, 'asleep', WARM_UP, 'eventfd');
  const eventfdName = `C one-wake floor on an eventfd (epoll_wait; sender asleep, ${Math.round(asleep.gapUs)} µs apart alike)`;
  const label = `publish-to-visible ${bytes / MiB} MiB`;
  const base = 'host staging (pinned DtoH + HtoD)';
  return [
    compare(label, 'cold start (new producer, first frame)', 'µs', asleep.cold, base, staging, false),
    compare(label, 'cold start: mapDevice alone', 'µs', asleep.coldMap, base, staging, false),
    compare(label, 'cold start: Producer.open() before it', 'µs', asleep.producer.openMicros, base, staging, false),
    compare(label, 'first open', 'µs', spinning.latencies[0]!, base, staging, false),
    compare(label, 'first open: mapDevice (cuIpcOpenMemHandle) alone', 'µs', spinning.open, base, staging, false),
    compare(label, 'cached p50, consumer asleep', 'µs', median(asleep.latencies.slice(1)), base, staging, false),
    compare(label, 'cached p50, consumer asleep', 'µs', median(asleep.latencies.slice(1)), floorName, floor.p50, false),
    compare(label, 'cached p50, prepared frame, consumer asleep', 'µs', median(preparedAsleep.latencies.slice(1)), floorName, floor.p50, false),
    compare(label, 'cached p50, prepared frame, consumer asleep', 'µs', median(preparedAsleep.latencies.slice(1)), eventfdName, eventfdFloor.p50, false),
    compare(label, 'cached p50, consumer spinning', 'µs', median(spinning.latencies.slice(1)), base, staging, false),
    compare(label, 'cached p99, consumer spinning', 'µs', percentile(spinning.latencies.slice(1), 99), base, staging, false),
    compare(label, 'cached p50, prepared frame, consumer spinning', 'µs', median(prepared.latencies.slice(1)), base, staging, false),
    compare(label, 'cached p99, prepared frame, consumer spinning', 'µs', percentile(prepared.latencies.slice(1), 99), base, staging, false),
    // Where each frame's time goes: the producer's publish call, the hand-off until next() resolves, then mapDevice() (IpcHandleCache hit).
    compare(label, 'cached p50, consumer spinning: describing the frame before the call (deviceBufferDescriptor, a known allocation)', 'µs', median(spinning.producer.describeCalls.slice(1)), base, staging, false),
    compare(label, 'cached p50, consumer spinning: publishFrame() call', 'µs', median(spinning.producer.publishCalls.slice(1)), base, staging, false),
    compare(label, 'cached p50, consumer spinning: until next() resolves', 'µs', median(spinning.received.slice(1)), base, staging, false),
    compare(label, 'cached p50, prepared frame, consumer spinning: publish() call', 'µs', median(prepared.producer.publishCalls.slice(1)), base, staging, false),
    compare(label, 'cached p50, prepared frame, consumer spinning: until next() resolves', 'µs', median(prepared.received.slice(1)), base, staging, false),
  ];
}

/**
 * A new allocation in every frame, as a model's outputs are: legacy IPC opens
 * each with cuIpcOpenMemHandle; pool memory imports each pointer after one
 * import of the pool (frame 0 of the measured run, left out).
 */
async function freshAllocationRecords(bytes: number): Promise<BenchRecord[]> {
  const legacy = await publishToVisible(bytes, 101, 20_000, 'fresh');
  const pool = await publishToVisible(bytes, 101, 20_000, 'fresh-pool');
  const label = `new allocation every frame, ${bytes / MiB} MiB`;
  const base = 'legacy IPC (cudaMalloc, cuIpcOpenMemHandle)';
  return [
    compare(label, 'pool memory: publish-to-visible p50', 'µs', median(pool.latencies.slice(1)), base, median(legacy.latencies.slice(1)), false),
    compare(label, 'pool memory: mapDevice (cuMemPoolImportPointer) p50', 'µs', median(pool.opens.slice(1)), base, median(legacy.opens.slice(1)), false),
    compare(label, 'pool memory: one-time pool import (first frame, mapDevice)', 'µs', pool.opens[0]!, base, median(legacy.opens.slice(1)), false),
    // Where a new allocation's time goes: describing it before the publish call (the producer exports it:
    // cuMemPoolExportPointer, or cuIpcGetMemHandle), the publishFrame() call, the hand-off until next() resolves; mapDevice() is above.
    compare(label, 'pool memory: describing it before the publish call (deviceBufferDescriptor: cuMemPoolExportPointer) p50', 'µs', median(pool.producer.describeCalls.slice(1)), base, median(legacy.producer.describeCalls.slice(1)), false),
    compare(label, 'pool memory: publishFrame() call p50', 'µs', median(pool.producer.publishCalls.slice(1)), base, median(legacy.producer.publishCalls.slice(1)), false),
    compare(label, 'pool memory: until next() resolves p50', 'µs', median(pool.received.slice(1)), base, median(legacy.received.slice(1)), false),
  ];
}

/** What users do without IPC: device to pinned host, then host to device, in µs. */
function stagingMicros(bytes: number): number {
  return (native().rawCopySeconds('dtoh', 0, bytes, 3) + native().rawCopySeconds('htod', 0, bytes, 3)) * 1e6;
}

/** A CuPy producer process (bench/cupy_producer.py) publishing `frames` frames of `bytes`. */
function cupyProducer(mode: CupyMode | 'rate', name: string, frames: number, bytes: number) {
  const env = { ...process.env, PYTHONPATH: join(root, 'interop/python/src') };
  return spawn('python3', [join(root, 'bench/cupy_producer.py'), mode, name, String(frames), String(bytes)], { stdio: ['ignore', 'inherit', 'inherit'], env });
}

type CupyMode = 'latency' | 'latency-prepared' | 'made' | 'made-heads-up';

/**
 * Hand-off latencies, µs, from a CuPy producer in `mode` (bench/cupy_producer.py) to this
 * consumer, spinning in next() for `spin` µs or, with 0, asleep, mapping each frame; from its
 * publish call (latency modes) or from when it began making the frame (made modes).
 */
async function cupyHandOffs(bytes: number, mode: CupyMode, frames: number, spin: number): Promise<number[]> {
  return withRing('bench-cupy', { slots: 64 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = cupyProducer(mode, name, frames, bytes);
    const times: number[] = [];
    for (let i = 0; i < frames; i++) {
      const f = await consumer.next({ timeout: 60_000, spin: i ? spin : 0 });
      f.mapDevice();
      times.push(microsSince(f.tag));
      f.release();
    }
    consumer.close();
    await new Promise((r) => producer.on('exit', r));
    return times.slice(1); // frame 0 opened the allocation
  });
}

/** Python CuPy producer to this Node consumer: hand-off latency (spinning consumer) and frames/s. */
async function cupyToNode(bytes: number): Promise<BenchRecord[]> {
  const latencies = await cupyHandOffs(bytes, 'latency', 501, 20_000);
  const prepared = await cupyHandOffs(bytes, 'latency-prepared', 501, 20_000);
  const frames = 20_000;
  const seconds = await withRing('bench-cupy-rate', { slots: 1024 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = cupyProducer('rate', name, frames, bytes);
    const first = await consumer.next({ timeout: 60_000 });
    first.mapDevice();
    first.release();
    const started = performance.now();
    for (let i = 1; i < frames; i++) {
      const f = await consumer.next({ timeout: 60_000 });
      f.mapDevice();
      f.release();
    }
    const elapsed = (performance.now() - started) / 1000;
    consumer.close();
    await new Promise((r) => producer.on('exit', r));
    return elapsed;
  });
  const staging = stagingMicros(bytes);
  const label = `CuPy producer to Node consumer, ${bytes / MiB} MiB column`;
  const base = 'host staging (pinned DtoH + HtoD)';
  return [
    compare(label, 'latency p50', 'µs', median(latencies), base, staging, false),
    compare(label, 'latency p99', 'µs', percentile(latencies, 99), base, staging, false),
    compare(label, 'latency p50, prepared once (Producer.prepare)', 'µs', median(prepared), base, staging, false),
    compare(label, 'latency p50, prepared once (Producer.prepare)', 'µs', median(prepared), 'publishing the array each frame, same run', median(latencies), false),
    compare(label, 'rate', 'frames/s', (frames - 1) / seconds, `${base}, one frame at a time`, 1e6 / staging, true),
  ];
}

/** A frame made by three CuPy kernels before its publish, to a sleeping consumer: heads_up() as making begins against none. */
async function cupyMadeRecords(bytes: number): Promise<BenchRecord[]> {
  const label = `CuPy producer to Node consumer, ${bytes / MiB} MiB column`;
  const plain = await cupyHandOffs(bytes, 'made', 1001, 0);
  const early = await cupyHandOffs(bytes, 'made-heads-up', 1001, 0);
  const what = 'frame made by 3 kernels then published prepared, 2 ms apart, consumer asleep, producer.heads_up() as making begins: making\'s start to next()';
  return (['p50', 'p99'] as const).map((p) => {
    const at = p === 'p50' ? 50 : 99;
    return compare(label, `${what} ${p}`, 'µs', percentile(early, at), 'no heads_up(), same run', percentile(plain, at), false);
  });
}

/** Lets V8 collect the last result and run its finalizers (pinned blocks go back to the pool). */
async function collect(): Promise<void> {
  (globalThis as { gc?: () => void }).gc?.();
  await new Promise((r) => setImmediate(r));
}

/**
 * copyToDevice into a buffer the consumer already has (what raw DtoD
 * measures) and allocating its own, back to back as the raw baseline runs,
 * and once more after a pause (a collection) as a consumer reading now and
 * then meets it: the driver's copy itself is then slower too, which the raw
 * baseline (warmed up before it is timed) does not show. toTable on first use
 * (pinning a fresh block) and in steady state (the block of a collected table
 * reused).
 */
async function copies(bytes: number): Promise<BenchRecord[]> {
  const into: number[] = [];
  const afterPause: number[] = [];
  const allocating: number[] = [];
  const dtoh: number[] = [];
  let firstDtoh = 0;
  let reserveSeconds = 0;
  let reservedDtoh = 0;
  await withRing('bench-copy', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const buf = DeviceBuffer.alloc(bytes);
    await producer.publishFrame(deviceColumn(buf.ptr, bytes));
    const f = await consumer.next();
    const target = DeviceBuffer.alloc(f.copyBytes());
    const seconds = (fn: () => unknown) => {
      const t = performance.now();
      fn();
      return (performance.now() - t) / 1000;
    };
    for (let i = 0; i < 6; i++) {
      await collect();
      const s = seconds(() => f.copyToDevice({ into: target }));
      if (i) afterPause.push(s);
      await collect();
      let first: unknown = null;
      const h = seconds(() => (first = f.toTable()));
      if (i) dtoh.push(h);
      else {
        firstDtoh = h;
        // A first call into a block pinned ahead; the first table still holds its own.
        reserveSeconds = seconds(() => PinnedHostPool.reserve(bytes));
        reservedDtoh = seconds(() => f.toTable());
      }
      first = null;
    }
    for (let i = 0; i < 200; i++) into.push(seconds(() => f.copyToDevice({ into: target })));
    for (let i = 0; i < 50; i++) {
      let copy: { free(): void } | undefined;
      allocating.push(seconds(() => (copy = f.copyToDevice())));
      copy!.free();
    }
    target.free();
    f.release();
    await producer.drain();
    buf.free();
    consumer.close();
    producer.close();
  });
  const gbps = (s: number) => bytes / s / 1e9;
  const label = `${bytes / MiB} MiB`;
  const rawDtod = gbps(native().rawCopySeconds('dtod', 0, bytes, 5));
  const rawDtoh = gbps(native().rawCopySeconds('dtoh', 0, bytes, 5));
  return [
    compare(`copyToDevice ${label}`, 'bandwidth, into a buffer', 'GB/s', gbps(median(into)), 'raw cuMemcpyDtoDAsync', rawDtod, true),
    compare(`copyToDevice ${label}`, 'bandwidth, into a buffer, after a pause', 'GB/s', gbps(median(afterPause)), 'raw cuMemcpyDtoDAsync', rawDtod, true),
    compare(`copyToDevice ${label}`, 'bandwidth, allocating', 'GB/s', gbps(median(allocating)), 'raw cuMemcpyDtoDAsync', rawDtod, true),
    compare(`toTable ${label}`, 'bandwidth, steady state', 'GB/s', gbps(median(dtoh)), 'raw pinned cuMemcpyDtoHAsync', rawDtoh, true),
    compare(`toTable ${label}`, 'bandwidth, first call', 'GB/s', gbps(firstDtoh), 'raw pinned cuMemcpyDtoHAsync', rawDtoh, true),
    compare(`toTable ${label}`, 'bandwidth, first call after PinnedHostPool.reserve()', 'GB/s', gbps(reservedDtoh), 'raw pinned cuMemcpyDtoHAsync', rawDtoh, true),
    compare(`toTable ${label}`, 'PinnedHostPool.reserve() itself, ahead of time', 'ms', reserveSeconds * 1000, 'toTable first call', firstDtoh * 1000, false),
  ];
}

const info = cudaInfo();
if (!info.available || info.devices.length === 0) {
  process.stderr.write(`bench:gpu needs a CUDA device: ${info.error ?? 'none visible'}\n`);
  process.exit(1);
}
const records: BenchRecord[] = [];
const series: Series[] = ['first open', 'cached p50, consumer asleep', 'cached p50, consumer spinning', 'cached p50, prepared frame, consumer spinning'].map((label) => ({ label, points: [] }));
series.push({ label: 'host staging', points: [] });
for (const bytes of want('publish-to-visible') ? SIZES : []) {
  progress(`publish-to-visible, ${bytes / MiB} MiB ...`);
  const rows = await publishToVisibleRecords(bytes);
  records.push(...rows);
  for (const s of series) {
    const row = rows.find((r) => r.metric === s.label) ?? rows[0]!;
    s.points.push([bytes / MiB, s.label === 'host staging' ? row.baselineValue! : row.value]);
  }
}
const charts: Record<string, Chart> = {
  'latency-vs-size': { title: 'Publish-to-visible, device column', x: { label: 'column size (MiB)', log: true }, y: { label: 'µs (log)', log: true }, series },
};
for (const bytes of want('new-allocation') ? [MiB, 256 * MiB] : []) {
  progress(`new allocation every frame, legacy and pool, ${bytes / MiB} MiB ...`);
  records.push(...(await freshAllocationRecords(bytes)));
}
if (want('cupy') && hasCupy()) {
  progress('CuPy producer to Node consumer ...');
  records.push(...(await cupyToNode(16 * MiB)));
} else if (want('cupy')) progress('CuPy producer benchmark skipped: python3 cannot import cupy');
if (want('cupy-made') && hasCupy()) {
  progress('CuPy producer making each frame, with and without heads_up() ...');
  records.push(...(await cupyMadeRecords(16 * MiB)));
}
for (const bytes of want('copies') ? COPY_SIZES : []) {
  progress(`copies, ${bytes / MiB} MiB ...`);
  records.push(...(await copies(bytes)));
}
const d = info.devices[0]!;
report('gpuring GPU benchmarks', `${d.name}, CUDA driver ${info.driverVersion}, ${cpus().length} CPU cores`, 'npm run bench:gpu', only ? null : 'bench-gpu.md', records, json, charts);
