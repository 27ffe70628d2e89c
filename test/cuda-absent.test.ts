// Without a CUDA driver (CI), the addon still loads and CUDA calls fail with
// CUDA_UNAVAILABLE and the reason; on a GPU machine this checks the opposite.
import test from 'ava';
import { tableFromArrays } from 'apache-arrow';
import { Consumer, cudaInfo, DeviceBuffer, DeviceStream, GpuringError, PinnedHostPool, Producer } from '../lib/index.js';
import { withRing } from './helpers/ring.js';

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
  t.is(t.throws(() => PinnedHostPool.reserve(1 << 20), { instanceOf: GpuringError })!.code, 'CUDA_UNAVAILABLE');
  t.deepEqual(PinnedHostPool.stats(), { pinnedBytes: 0, idleBytes: 0, limitBytes: PinnedHostPool.stats().limitBytes }, 'nothing was pinned');
});

test('release({ stream }) needs the driver; without it the lease stands and a plain release still ends it', async (t) => {
  await withRing('nocuda-release', { slots: 4 }, async (ring, name) => {
    using producer = Producer.open(name);
    using consumer = Consumer.open(name);
    await producer.publish(tableFromArrays({ x: Int32Array.of(1, 2, 3) }));
    const f = await consumer.next({ timeout: 5000 });
    if (info.available) {
      f.release({ stream: 0n }); // the legacy default stream: the lease ends once it is idle
    } else {
      const e = t.throws(() => f.release({ stream: 0n }), { instanceOf: GpuringError })!;
      t.is(e.code, 'CUDA_UNAVAILABLE');
      t.false(f.released);
      t.is(ring.inspect().slots.leased, 1, 'the frame is still leased');
      t.is(t.throws(() => DeviceStream.create(), { instanceOf: GpuringError })!.code, 'CUDA_UNAVAILABLE');
      f.release();
    }
    await producer.drain();
    t.is(producer.inFlight, 0);
    t.true(f.released);
  });
});
