/**
 * The producer process of the publish-to-visible benchmark (bench/gpu.ts):
 *   stamp-producer NAME BYTES FRAMES
 * publishes one BYTES-byte device allocation FRAMES times, one at a time, each
 * tagged with the time of the publish call (process.hrtime: CLOCK_MONOTONIC,
 * comparable across processes). Builds the description per frame, as a
 * producer handing out raw device pointers would. Like every benchmark it
 * runs the compiled package (dist/), which is what users run.
 */
import { absentBuffer, DeviceBuffer, deviceBufferDescriptor, Producer } from '../dist/index.js';
import { HANDLE_BYTES } from '../dist/codec/layout.js';

const [name, bytesArg, framesArg] = process.argv.slice(2);
const bytes = Number(bytesArg);
const producer = Producer.open(name!);
const buf = DeviceBuffer.alloc(bytes);
for (let i = 0; i < Number(framesArg); i++) {
  const column = { name: 'x', format: 'C', nullable: false, dictionaryOrdered: false, mapKeysSorted: false, metadata: null, dictionary: -1, length: bytes, nullCount: 0, offset: 0, buffers: [absentBuffer(), deviceBufferDescriptor(buf.ptr, bytes)], children: [] };
  const tag = process.hrtime.bigint();
  await producer.publishFrame({ rowCount: bytes, metadata: null, columns: [column], dictionaries: [], syncKind: 0, syncHandle: new Uint8Array(HANDLE_BYTES) }, { tag });
  await producer.drain();
}
producer.close();
buf.free();
