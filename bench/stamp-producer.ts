/**
 * The producer process of the publish-to-visible benchmark (bench/gpu.ts):
 *   stamp-producer NAME BYTES WARMUP FRAMES
 * publishes WARMUP + FRAMES frames, one at a time, each tagged with the time
 * of the publish call (process.hrtime: CLOCK_MONOTONIC, comparable across
 * processes). The first WARMUP frames share a small warm-up allocation (frame
 * 0 is the cold start: the producer's first arena, the consumer's first
 * mapping); the FRAMES frames after them share one BYTES-byte allocation, so
 * the first of those opens it in a warm pipeline and the rest hit the
 * consumer's mapping cache. The description is built per frame, as a
 * producer handing out raw device pointers would. Like every benchmark it runs
 * the compiled package (dist/), which is what users run.
 */
import { absentBuffer, DeviceBuffer, deviceBufferDescriptor, Producer } from '../dist/index.js';
import { HANDLE_BYTES } from '../dist/codec/layout.js';

const [name, bytesArg, warmUpArg, framesArg] = process.argv.slice(2);
const warmUpFrames = Number(warmUpArg);
const producer = Producer.open(name!);
const warmUp = DeviceBuffer.alloc(1 << 20);
const measured = DeviceBuffer.alloc(Number(bytesArg));
for (let i = 0; i < warmUpFrames + Number(framesArg); i++) {
  const buf = i < warmUpFrames ? warmUp : measured;
  const column = { name: 'x', format: 'C', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: buf.byteLength, nullCount: 0, offset: 0, buffers: [absentBuffer(), deviceBufferDescriptor(buf.ptr, buf.byteLength)], children: [] };
  const tag = process.hrtime.bigint();
  await producer.publishFrame({ rowCount: buf.byteLength, metadata: null, columns: [column], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) }, { tag });
  await producer.drain();
}
producer.close();
warmUp.free();
measured.free();
