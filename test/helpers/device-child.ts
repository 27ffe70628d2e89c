/**
 * Device producers for the GPU suite, one per role, each in its own process:
 *   types NAME ROWS         the every-type table and a slice, uploaded to device 0
 *   big NAME BYTES          one float32 column of BYTES bytes, values 0, 1, 2, ...
 *   offset NAME             a column inside a larger allocation, validity from bit 3
 *   ordering NAME BYTES MS  publishes a zeroed buffer while a write of 0x5a is queued behind
 *                           an MS-millisecond stall of the legacy default stream
 *   ordering-stream NAME BYTES MS  the same on a non-blocking stream of its own, twice:
 *                           publishFrame({ stream: DeviceStream }) of a buffer written 0x5a,
 *                           then a prepared frame published with { stream: CUstream bigint }
 *                           of one written 0x6b
 *   same NAME FRAMES        one allocation published in FRAMES frames
 *   fresh-events NAME FRAMES  one allocation published in FRAMES frames, frame i all bytes i & 0xff,
 *                           each written by a memset still queued and carrying an interprocess
 *                           event of its own, a new one per frame (against SPEC.md §9a's pooling)
 *   many NAME FRAMES        FRAMES small tables uploaded to the device, frame i all i
 *   recycled NAME FRAMES    FRAMES int32 columns, each a new cuMemAlloc freed once released, frame i all i
 *   on-device NAME ORDINAL  the every-type table (13 rows) uploaded to device ORDINAL
 *   pool NAME FRAMES        FRAMES float32 columns in memory of gpuring's exportable pool
 *                           (cuda-pool), frame i all i, each allocation freed once released
 *                           (so addresses repeat) before the next is made
 *   pool-exit NAME          one cuda-pool frame, then exits without waiting for its release
 *   vmm NAME FRAMES         FRAMES float32 columns of VMM memory (cuda-vmm): each a new 50 MiB
 *                           allocation (chunks of 20, 20 and 10 MiB), the column's 4 MiB from
 *                           18 MiB on (across the first chunk boundary), frame i all i, freed
 *                           once released
 *   read NAME               (a consumer) reads one frame and prints its rows, or its error code
 *   read-all NAME N [MS]    (a consumer, or a subscriber of a broadcast ring) says it is ready, reads N
 *                           frames (holding each MS milliseconds before its release) and prints how
 *                           many held only their tag's value in their first column, the tags in
 *                           order, and the buffer kinds seen
 *   stream-release NAME N   (a consumer) for each of two frames, queues N device copies of it
 *                           on a stream and releases it with release({ stream }): the first on
 *                           a DeviceStream, the second on a bare CUstream, then closes at once;
 *                           prints whether each lease outlived the release call, and each copy
 * Each prints {"published": n} once published, drains, and exits.
 */
import { makeVector, Table } from 'apache-arrow';
import { Consumer, cudaInfo, Producer, DeviceBuffer, deviceBufferDescriptor, absentBuffer, DeviceStream, Ring, type DeviceFrameCopy, type FrameDescription } from '../../lib/index.js';
import { native } from '../../lib/native.js';
import { HANDLE_BYTES } from '../../lib/codec/layout.js';
import { allTypesTable } from './all-types.js';

const [role, name, arg] = process.argv.slice(2);
const say = (v: unknown) => process.stdout.write(`${JSON.stringify(v)}\n`);

if (role === 'read') {
  const consumer = Consumer.open(name!);
  const f = await consumer.next({ timeout: 30_000 });
  try {
    say({ rows: f.toTable().numRows, devices: cudaInfo().devices.map((d) => d.uuid) });
  } catch (error) {
    say({ code: (error as { code?: string }).code, message: (error as Error).message });
  }
  f.release();
  consumer.close();
  process.exit(0);
}

if (role === 'read-all') {
  const consumer = Consumer.open(name!);
  cudaInfo(); // the CUDA context now: a test may take the device's free memory once this is ready
  say({ ready: true });
  let ok = 0;
  const tags: number[] = [];
  const kinds = new Set<string>();
  for (let i = 0; i < Number(arg); i++) {
    const f = await consumer.next({ timeout: 30_000 });
    const values = f.toTable().getChildAt(0)!.toArray() as ArrayLike<number>;
    if (Array.prototype.every.call(values, (v: number) => v === Number(f.tag))) ok++;
    tags.push(Number(f.tag));
    for (const c of f.description.columns) for (const b of c.buffers) kinds.add(b.kind);
    if (process.argv[5]) await new Promise((r) => setTimeout(r, Number(process.argv[5])));
    f.release();
  }
  say({ ok, tags, kinds: [...kinds].sort() });
  consumer.close();
  process.exit(0);
}

/** Whether every byte of the copy's column `x` equals `value`. */
function allBytes(copy: DeviceFrameCopy, value: number): boolean {
  const x = copy.toTable().getChild('x')!.data[0]!.values as Float32Array;
  return new Uint8Array(x.buffer, x.byteOffset, x.byteLength).every((b) => b === value);
}

if (role === 'stream-release') {
  const copies = Number(arg);
  const ring = Ring.open(name!);
  const consumer = Consumer.open(name!);
  const own = DeviceStream.create();
  const foreign = DeviceStream.create(); // passed as a bare CUstream, as another library's would be
  const results: { copy: DeviceFrameCopy; value: number }[] = [];
  const leasedAfterRelease: number[] = [];
  let leasedAfterSync = -1;
  for (const stream of [own, foreign.ptr]) {
    const f = await consumer.next({ timeout: 30_000 });
    const scratch = DeviceBuffer.alloc(f.copyBytes());
    for (let k = 0; k < copies; k++) f.copyToDevice({ into: scratch, stream }); // keeps the stream busy reading the frame
    results.push({ copy: f.copyToDevice({ stream }), value: Number(f.tag) });
    f.release({ stream });
    leasedAfterRelease.push(ring.inspect().slots.leased);
    if (stream === own) {
      own.synchronize();
      leasedAfterSync = ring.inspect().slots.leased;
    }
  }
  const closing = performance.now();
  consumer.close(); // the second release is still queued: close waits for it
  const closeMs = performance.now() - closing;
  foreign.synchronize();
  say({ leasedAfterRelease, leasedAfterSync, leasedAfterClose: ring.inspect().slots.leased, closeMs, intact: results.map((r) => allBytes(r.copy, r.value)) });
  process.exit(0);
}

const producer = Producer.open(name!);

/** A device buffer of `bytes` zero bytes, written before anything else is queued. */
function zeroed(bytes: number): DeviceBuffer {
  const buf = DeviceBuffer.alloc(bytes);
  buf.upload(new Uint8Array(bytes));
  return buf;
}

function column(format: string, length: number, buffers: FrameDescription['columns'][0]['buffers'], extra: Partial<FrameDescription['columns'][0]> = {}): FrameDescription {
  return {
    rowCount: length,
    metadata: null,
    columns: [{ name: 'x', format, nullable: true, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length, nullCount: 0, offset: 0, buffers, children: [], ...extra }],
    dictionaries: [],
    syncKind: 0,
    syncHandle: new Uint8Array(HANDLE_BYTES),
  };
}

async function main(): Promise<number> {
  switch (role) {
    case 'types': {
      const t = allTypesTable(Number(arg));
      await producer.publish(t, { device: 0, tag: 0n });
      await producer.publish(t.slice(3, t.numRows - 2), { device: 0, tag: 1n });
      return 2;
    }
    case 'big': {
      const bytes = Number(arg);
      const buf = DeviceBuffer.alloc(bytes);
      const chunk = new Float32Array(16 << 20);
      for (let at = 0; at < bytes / 4; at += chunk.length) {
        for (let i = 0; i < chunk.length; i++) chunk[i] = at + i;
        buf.upload(chunk.subarray(0, Math.min(chunk.length, bytes / 4 - at)), at * 4);
      }
      await producer.publishFrame(column('f', bytes / 4, [absentBuffer(), deviceBufferDescriptor(buf.ptr, bytes)]));
      return 1;
    }
    case 'offset': {
      const buf = DeviceBuffer.alloc(1 << 20);
      const ints = Int32Array.from({ length: 10 }, (_, i) => 10 * i);
      buf.upload(ints, 4096);
      const mask = new Uint8Array(2);
      for (let i = 0; i < 10; i++) if (i % 4 !== 1) mask[i >> 3]! |= 1 << (i & 7);
      buf.upload(mask, 8192 + 3);
      const desc = column('i', 6, [deviceBufferDescriptor(buf.ptr + 8195n, 2), deviceBufferDescriptor(buf.ptr + 4096n, 40)], { offset: 3, nullCount: 1 });
      await producer.publishFrame(desc);
      return 1;
    }
    case 'ordering': {
      const bytes = Number(arg);
      const buf = zeroed(bytes);
      native().deviceMemsetAsync(0, buf.ptr, 0x5a, bytes, 1, undefined, Number(process.argv[5])); // still queued
      await producer.publishFrame(column('C', bytes, [absentBuffer(), deviceBufferDescriptor(buf.ptr, bytes)]));
      return 1;
    }
    case 'ordering-stream': {
      const bytes = Number(arg);
      const stall = Number(process.argv[5]);
      const stream = DeviceStream.create({ device: 0 });
      const [first, second] = [zeroed(bytes), zeroed(bytes)];
      native().deviceMemsetAsync(0, first.ptr, 0x5a, bytes, 1, stream.ptr, stall);
      await producer.publishFrame(column('C', bytes, [absentBuffer(), deviceBufferDescriptor(first.ptr, bytes)]), { stream });
      const prepared = producer.prepare(column('C', bytes, [absentBuffer(), deviceBufferDescriptor(second.ptr, bytes)]));
      native().deviceMemsetAsync(0, second.ptr, 0x6b, bytes, 1, stream.ptr, stall);
      await prepared.publish({ stream: stream.ptr });
      return 2;
    }
    case 'same': {
      const buf = DeviceBuffer.alloc(1 << 16);
      buf.upload(Int32Array.from({ length: 16 }, (_, i) => i));
      for (let i = 0; i < Number(arg); i++) await producer.publishFrame(column('i', 16, [absentBuffer(), deviceBufferDescriptor(buf.ptr, 64)]));
      return Number(arg);
    }
    case 'fresh-events': {
      const bytes = 1 << 16;
      const buf = zeroed(bytes);
      for (let i = 0; i < Number(arg); i++) {
        native().deviceMemsetAsync(0, buf.ptr, i & 0xff, bytes, 1, undefined, 1);
        const desc = column('C', bytes, [absentBuffer(), deviceBufferDescriptor(buf.ptr, bytes)]);
        native().recordEvent(0, false, undefined, desc.syncHandle); // never recycled: a new event every frame
        await producer.publishFrame({ ...desc, syncKind: 2 }, { tag: BigInt(i) });
        await producer.drain();
      }
      return Number(arg);
    }
    case 'on-device': {
      await producer.publish(allTypesTable(13), { device: Number(arg) });
      return 1;
    }
    case 'pool': {
      for (let i = 0; i < Number(arg); i++) {
        const buf = DeviceBuffer.alloc(1 << 20, { pool: true });
        buf.upload(new Float32Array(1 << 18).fill(i));
        await producer.publishFrame(column('f', 1 << 18, [absentBuffer(), deviceBufferDescriptor(buf.ptr, 1 << 20)]), { tag: BigInt(i) });
        await producer.drain();
        buf.free();
      }
      return Number(arg);
    }
    case 'vmm': {
      const floats = 1 << 20;
      for (let i = 0; i < Number(arg); i++) {
        const buf = DeviceBuffer.alloc(50 << 20, { vmm: true });
        buf.upload(new Float32Array(floats).fill(i), 18 << 20);
        const data = deviceBufferDescriptor(buf.ptr + BigInt(18 << 20), floats * 4);
        if (data.kind !== 'cuda-vmm' || data.offset !== 18 << 20) throw new Error(`not a span export: ${data.kind} at ${data.offset}`);
        await producer.publishFrame(column('f', floats, [absentBuffer(), data]), { tag: BigInt(i) });
        await producer.drain();
        buf.free();
      }
      return Number(arg);
    }
    case 'pool-exit': {
      const buf = DeviceBuffer.alloc(1 << 20, { pool: true });
      await producer.publishFrame(column('f', 1 << 18, [absentBuffer(), deviceBufferDescriptor(buf.ptr, 1 << 20)]));
      say({ published: 1 });
      process.exit(0);
    }
    case 'leave': {
      // A legacy frame and a pool frame; once both are released, idles until killed.
      const legacy = DeviceBuffer.alloc(1 << 20);
      const pooled = DeviceBuffer.alloc(1 << 20, { pool: true });
      legacy.upload(new Float32Array(1 << 18).fill(1));
      pooled.upload(new Float32Array(1 << 18).fill(2));
      for (const buf of [legacy, pooled]) await producer.publishFrame(column('f', 1 << 18, [absentBuffer(), deviceBufferDescriptor(buf.ptr, 1 << 20)]));
      await producer.drain();
      say({ drained: true });
      await new Promise((resolve) => setTimeout(resolve, 600_000)); // a pending timer keeps the process (and its producer) alive
      return 2;
    }
    case 'many': {
      // Uploads reuse the memory of released frames (UploadPool): per-frame contents catch a stale read.
      for (let i = 0; i < Number(arg); i++)
        await producer.publish(new Table({ i: makeVector(Int32Array.of(i, i, i, i, i, i, i, i)) }), { device: 0, tag: BigInt(i) });
      return Number(arg);
    }
    case 'recycled': {
      // Each frame a new cuMemAlloc, freed once released: the next often lands at the same
      // address with the same IPC handle, and only its buffer id tells a stale mapping apart.
      for (let i = 0; i < Number(arg); i++) {
        const buf = DeviceBuffer.alloc(32);
        buf.upload(new Int32Array(8).fill(i));
        await producer.publishFrame(column('i', 8, [absentBuffer(), deviceBufferDescriptor(buf.ptr, 32)], { name: 'i' }), { tag: BigInt(i) });
        await producer.drain();
        buf.free();
      }
      return Number(arg);
    }
  }
  throw new Error(`unknown role ${role}`);
}

say({ published: await main() });
await producer.drain();
producer.close();
