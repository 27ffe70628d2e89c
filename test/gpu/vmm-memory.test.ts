// GPU suite (npm run test:gpu): VMM memory from a Node producer
// (DeviceBuffer.alloc(n, { vmm: true }), published as cuda-vmm spans, SPEC.md
// §9d) read across processes by Node, Python and C consumers, values checked.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { cudaInfo, DeviceBuffer, deviceBufferDescriptor, exportDeviceMemory, GpuringError } from '../../lib/index.js';
import { cConsumerReport } from '../helpers/c-consumer.js';
import { deviceChild, exitOf, nextLine, root, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`VMM GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

const FRAMES = 4;

gpuTest('VMM memory of DeviceBuffer.alloc({ vmm: true }) exports as one span of 20 MiB chunks; freed, it is no longer exported', (t) => {
  const buf = DeviceBuffer.alloc(50 << 20, { vmm: true });
  const e = exportDeviceMemory(buf.ptr + 123n);
  t.like(e, { kind: 'cuda-vmm', offset: 123, base: buf.ptr, allocationBytes: 50 << 20 });
  const handle = new DataView(e.handle.buffer, e.handle.byteOffset, 64);
  t.is(handle.getBigUint64(0, true), BigInt(50 << 20), 'span bytes');
  t.is(handle.getUint32(8, true), 3, 'chunks of 20, 20 and 10 MiB');
  t.true(e.handle.subarray(12).every((b) => b === 0));
  const again = deviceBufferDescriptor(buf.ptr + BigInt(30 << 20), 16);
  t.is(again.allocationId, e.allocationId, 'the same span, however many buffers name it');
  buf.free();
  const next = DeviceBuffer.alloc(1 << 20, { vmm: true });
  t.not(exportDeviceMemory(next.ptr).allocationId, e.allocationId, 'span numbers are never reused');
  next.free();
  t.is(t.throws(() => DeviceBuffer.alloc(1 << 20, { vmm: true, pool: true }), { instanceOf: GpuringError })!.code, 'INVALID_ARGUMENT');
});

gpuTest(`VMM memory from Node, each frame a new span read across a chunk boundary, by a Node, a Python and the C consumer: ${FRAMES} frames each, every value equal`, async (t) => {
  await withRing('gpu-vmm-node', { slots: 16 }, async (_ring, name) => {
    const node = deviceChild('read-all', name, FRAMES);
    t.like(await nextLine(node), { ready: true });
    const producer = deviceChild('vmm', name, FRAMES);
    t.like(await nextLine(node), { ok: FRAMES });
    t.is((await exitOf(producer)).code, 0);
  });
  await withRing('gpu-vmm-python', { slots: 16 }, async (_ring, name) => {
    const env = { ...process.env, PYTHONPATH: join(root, 'interop/python/src'), PYTHONUNBUFFERED: '1' };
    const python = spawn('python3', [join(root, 'interop/python/tests/children/device_subscribe.py'), name, String(FRAMES)], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    t.like(await nextLine(python), { ready: true });
    const producer = deviceChild('vmm', name, FRAMES);
    t.like(await nextLine(python), { ok: FRAMES });
    t.is((await exitOf(producer)).code, 0);
  });
  await withRing('gpu-vmm-c', { slots: 16 }, async (_ring, name) => {
    const report = cConsumerReport(name, FRAMES);
    const producer = deviceChild('vmm', name, FRAMES);
    const frames = await report;
    t.deepEqual(frames.map((f) => [f.columns[0]!.memory, f.columns[0]!.sum]), Array.from({ length: FRAMES }, (_, i) => ['cuda-vmm', i * (1 << 20)]));
    t.is((await exitOf(producer)).code, 0);
  });
});
