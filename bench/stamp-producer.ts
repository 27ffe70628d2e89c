/**
 * The producer process of the publish-to-visible benchmark (bench/gpu.ts):
 *   stamp-producer NAME BYTES WARMUP FRAMES [prepared]
 * publishes WARMUP + FRAMES frames, one at a time, each tagged with the time
 * of the publish call (process.hrtime: CLOCK_MONOTONIC, comparable across
 * processes). The first WARMUP frames share a warm-up allocation of the same size (frame
 * 0 is the cold start: the producer's first arena, the consumer's first
 * mapping); the FRAMES frames after them share one BYTES-byte allocation, so
 * the first of those opens it in a warm pipeline and the rest hit the
 * consumer's mapping cache. The description is built per frame, as a
 * producer handing out raw device pointers would; with `prepared`, each
 * allocation's frames are one PreparedFrame published again (the warm-up
 * frames too, so V8 has optimized the path the measured frames take). With `fresh` or
 * `fresh-pool`, every measured frame is a new allocation (cuMemAlloc, or gpuring's
 * exportable pool), freed once released: what a consumer pays to open memory it has not
 * seen, legacy IPC against pool import. Like every benchmark it runs the compiled
 * package (dist/), which is what users run. At the end it sends the parent (IPC)
 * how long Producer.open() took, each measured frame's publish call (tag to return) and,
 * unless prepared, the describing before it (deviceBufferDescriptor: the export of the
 * allocation, made anew for a new allocation, looked up for a known one).
 */
import { absentBuffer, DeviceBuffer, deviceBufferDescriptor, Producer } from '../dist/index.js';
import { HANDLE_BYTES } from '../dist/codec/layout.js';

const [name, bytesArg, warmUpArg, framesArg, mode] = process.argv.slice(2);
const warmUpFrames = Number(warmUpArg);
const opening = performance.now();
const producer = Producer.open(name!);
const openMicros = (performance.now() - opening) * 1000;
// As large as the measured one: V8 keeps a length of 2^31 or more as a double
// where a smaller one is a small integer, and code optimized on small lengths
// is thrown away at the first large one (4 GiB frames measured code being re-optimized).
const fresh = mode === 'fresh' || mode === 'fresh-pool';
const warmUp = DeviceBuffer.alloc(fresh ? 1 << 20 : Number(bytesArg));
const measured = DeviceBuffer.alloc(Number(bytesArg));
const describe = (buf: DeviceBuffer) => ({
  rowCount: buf.byteLength,
  metadata: null,
  columns: [{ name: 'x', format: 'C', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: buf.byteLength, nullCount: 0, offset: 0, buffers: [absentBuffer(), deviceBufferDescriptor(buf.ptr, buf.byteLength)], children: [] }],
  dictionaries: [],
  syncKind: 0,
  syncHandle: new Uint8Array(HANDLE_BYTES),
});
// A prepared run warms up on a prepared frame too, so the measured frames run the code V8 optimized for them.
const prepared = mode === 'prepared' ? [producer.prepare(describe(warmUp)), producer.prepare(describe(measured))] : null;
const publishCalls: number[] = [];
const describeCalls: number[] = [];
for (let i = 0; i < warmUpFrames + Number(framesArg); i++) {
  const measuring = i >= warmUpFrames;
  const buf = fresh && measuring ? DeviceBuffer.alloc(measured.byteLength, { pool: mode === 'fresh-pool' }) : null;
  const describing = process.hrtime.bigint();
  const description = prepared ? null : describe(buf ?? (measuring ? measured : warmUp));
  const tag = process.hrtime.bigint();
  await (description ? producer.publishFrame(description, { tag }) : prepared![measuring ? 1 : 0]!.publish({ tag }));
  if (measuring) publishCalls.push(Number(process.hrtime.bigint() - tag) / 1000);
  if (measuring && description) describeCalls.push(Number(tag - describing) / 1000);
  await producer.drain();
  buf?.free();
}
process.send?.({ openMicros, publishCalls, describeCalls });
producer.close();
warmUp.free();
measured.free();
