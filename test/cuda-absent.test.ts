// Without a CUDA driver (CI), the addon still loads and CUDA calls fail with
// CUDA_UNAVAILABLE and the reason; on a GPU machine this checks the opposite.
import test from 'ava';
import { cudaInfo, DeviceBuffer, GpuringError } from '../lib/index.js';

const info = cudaInfo();

test('cudaInfo() never throws and says whether the driver is usable', (t) => {
  t.is(typeof info.available, 'boolean');
  if (!info.available) t.regex(info.error!, /libcuda|cuInit|driver/);
});

test('device memory without a driver fails with CUDA_UNAVAILABLE, naming the reason', (t) => {
  if (info.available) return t.pass('a driver is present: the GPU suite covers device memory');
  const e = t.throws(() => DeviceBuffer.alloc(64), { instanceOf: GpuringError })!;
  t.is(e.code, 'CUDA_UNAVAILABLE');
  t.regex(e.message, /libcuda\.so\.1/);
});
