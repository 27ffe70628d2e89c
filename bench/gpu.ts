/**
 * `npm run bench:gpu` (on a machine with an NVIDIA GPU): device columns
 * against what users do without IPC, baselines measured in the same run.
 *  - publish-to-visible: a producer process publishes a device column, this
 *    process maps it (first open, then cached); baseline: host staging
 *    (pinned device-to-host, then host-to-device) of the same bytes.
 *  - copyToDevice() against raw cuMemcpyDtoDAsync of the same bytes.
 *  - toTable() against raw pinned cuMemcpyDtoHAsync of the same bytes.
 */
import { cpus } from 'node:os';
import { Consumer, cudaInfo, DeviceBuffer, deviceBufferDescriptor, absentBuffer, Producer, type FrameDescription } from '../lib/index.js';
import { HANDLE_BYTES } from '../lib/codec/layout.js';
import { native } from '../lib/native.js';
import { deviceChild, exitOf, withRing } from '../test/helpers/ring.js';
import { compare, median, microsSince, percentile, report, type BenchRecord } from './harness.js';

const json = process.argv.includes('--json');
const MiB = 1 << 20;
const SIZES = [MiB, 16 * MiB, 256 * MiB, 1024 * MiB, 4096 * MiB];
const COPY_SIZES = [16 * MiB, 256 * MiB, 1024 * MiB];
const progress = (line: string) => !json && process.stderr.write(`${line}\n`);

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

async function publishToVisible(bytes: number, frames: number): Promise<BenchRecord[]> {
  const latencies = await withRing('bench-ptv', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = deviceChild('stamp', name, bytes, frames);
    const times: number[] = [];
    for (let i = 0; i < frames; i++) {
      const f = await consumer.next({ timeout: 60_000 });
      f.mapDevice();
      times.push(microsSince(f.tag));
      f.release();
    }
    consumer.close();
    await exitOf(producer);
    return times;
  });
  const staging = (native().rawCopySeconds('dtoh', 0, bytes, 3) + native().rawCopySeconds('htod', 0, bytes, 3)) * 1e6;
  const label = `publish-to-visible ${bytes / MiB} MiB`;
  const cached = latencies.slice(1);
  return [
    compare(label, 'first open', 'µs', latencies[0]!, 'host staging (pinned DtoH + HtoD)', staging, false),
    compare(label, 'cached p50', 'µs', median(cached), 'host staging (pinned DtoH + HtoD)', staging, false),
    compare(label, 'cached p99', 'µs', percentile(cached, 99), 'host staging (pinned DtoH + HtoD)', staging, false),
  ];
}

async function copies(bytes: number): Promise<BenchRecord[]> {
  const dtod: number[] = [];
  const dtoh: number[] = [];
  await withRing('bench-copy', { slots: 8 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    const buf = DeviceBuffer.alloc(bytes);
    await producer.publishFrame(deviceColumn(buf.ptr, bytes));
    const f = await consumer.next();
    for (let i = 0; i < 4; i++) {
      let t = performance.now();
      const copy = f.copyToDevice();
      if (i) dtod.push((performance.now() - t) / 1000);
      copy.free();
      t = performance.now();
      f.toTable();
      if (i) dtoh.push((performance.now() - t) / 1000);
    }
    f.release();
    await producer.drain();
    buf.free();
    consumer.close();
    producer.close();
  });
  const gbps = (s: number) => bytes / s / 1e9;
  const label = `${bytes / MiB} MiB`;
  return [
    compare(`copyToDevice ${label}`, 'bandwidth', 'GB/s', gbps(median(dtod)), 'raw cuMemcpyDtoDAsync', gbps(native().rawCopySeconds('dtod', 0, bytes, 5)), true),
    compare(`toTable ${label}`, 'bandwidth', 'GB/s', gbps(median(dtoh)), 'raw pinned cuMemcpyDtoHAsync', gbps(native().rawCopySeconds('dtoh', 0, bytes, 5)), true),
  ];
}

const info = cudaInfo();
if (!info.available || info.devices.length === 0) {
  process.stderr.write(`bench:gpu needs a CUDA device: ${info.error ?? 'none visible'}\n`);
  process.exit(1);
}
const records: BenchRecord[] = [];
for (const bytes of SIZES) {
  progress(`publish-to-visible, ${bytes / MiB} MiB ...`);
  records.push(...(await publishToVisible(bytes, 21)));
}
for (const bytes of COPY_SIZES) {
  progress(`copies, ${bytes / MiB} MiB ...`);
  records.push(...(await copies(bytes)));
}
const d = info.devices[0]!;
report('gpuring GPU benchmarks', `${d.name}, CUDA driver ${info.driverVersion}, ${cpus().length} CPU cores`, 'npm run bench:gpu', 'bench-gpu.md', records, json);
