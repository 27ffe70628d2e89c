// GPU suite (npm run test:gpu). Every test here needs an NVIDIA GPU and its
// driver; where there is none each test is reported as skipped, with the reason.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import test from 'ava';
import { cudaInfo, DeviceBuffer, GpuringError } from '../../lib/index.js';
import { root } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const reason = info.available ? 'no CUDA device visible' : info.error;
const gpuTest = gpu ? test : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${reason}`);

gpuTest('the CUDA driver is loaded at run time (dlopen) and lists devices by UUID', (t) => {
  t.true((info.driverVersion ?? 0) >= 12000, `driver ${info.driverVersion}`);
  const d = info.devices[0]!;
  t.regex(d.uuid, /^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/);
  t.is(d.uuidBytes.length, 16);
  t.true(d.totalBytes > 1e9 && d.freeBytes <= d.totalBytes);
  t.true(d.ipc.ok, d.ipc.reason);
  t.true(d.peerAccess[0], 'a device reaches its own memory');
  t.log(`${d.name} ${d.uuid}, driver ${info.driverVersion}`);
});

gpuTest('a DeviceBuffer round-trips bytes through device memory', (t) => {
  using buf = DeviceBuffer.alloc(1 << 20);
  const data = Uint8Array.from({ length: 1 << 20 }, (_, i) => (i * 7) & 0xff);
  buf.upload(data);
  t.deepEqual(buf.download(), data);
  t.deepEqual(buf.download(100, 16), data.subarray(100, 116));
  t.is(t.throws(() => buf.download(1 << 20, 1), { instanceOf: GpuringError })!.code, 'INVALID_ARGUMENT');
});

gpuTest('CUDA errors carry the CUDA error name and number; unknown devices are DEVICE_NOT_FOUND', (t) => {
  t.is(t.throws(() => DeviceBuffer.alloc(16, { device: 99 }), { instanceOf: GpuringError })!.code, 'DEVICE_NOT_FOUND');
  const e = t.throws(() => DeviceBuffer.alloc(2 ** 52), { instanceOf: GpuringError })!;
  t.is(e.code, 'CUDA');
  t.regex(e.message, /cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY \(2\)/);
});

gpuTest('gpuring demo --device 0: the Node-to-Node device example runs, every value checked', async (t) => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'lib/cli/main.ts', 'demo', '--device', '0', '--frames', '200', '--json'], { cwd: root });
  const s = JSON.parse(stdout);
  t.true(s.ok, stdout);
  t.is(s.memory, 'device memory on GPU 0');
  t.is(s.transport.frames, 200);
  t.deepEqual([s.verification.frames, s.verification.mismatches], [200, 0]);
  t.log(`${s.transport.frames} device frames, ${Math.round(s.transport.framesPerSecond)} frames/s; hand-off p50 ${s.latency.p50Us.toFixed(1)} µs`);
});
