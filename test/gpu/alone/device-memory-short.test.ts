// GPU suite: publish(table, { device }) when the device cannot hold another
// upload. Most of the GPU's free memory is taken by a ballast allocation first,
// so that a few frames in flight fill the rest.
import test from 'ava';
import { makeVector, Table } from 'apache-arrow';
import { cudaInfo, DeviceBuffer, GpuringError, Producer } from '../../../lib/index.js';
import { deviceChild, exitOf, nextLine, withRing } from '../../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

const FRAME_VALUES = 16 << 20; // float32: 64 MiB a frame
const HEADROOM = 512 << 20; // about seven frames' uploads fit beside the ballast
const table = (i: number, values = FRAME_VALUES) => new Table({ v: makeVector(new Float32Array(values).fill(i)) });

/** Takes all but HEADROOM of device 0's free memory for the callback's duration. */
async function withBallast<T>(fn: () => Promise<T>): Promise<T> {
  using _ballast = DeviceBuffer.alloc(cudaInfo().devices[0]!.freeBytes - HEADROOM, { device: 0 });
  return await fn();
}

gpuTest('a device upload that does not fit waits for this producer\'s frames to be released: every frame arrives, in order, each value checked', async (t) => {
  const frames = 32;
  await withRing('gpu-devshort', { slots: 64 }, async (_ring, name) => {
    const reader = deviceChild('read-all', name, frames, 150); // holds each frame 150 ms: uploads outrun it
    t.like(await nextLine(reader), { ready: true });
    const producer = Producer.open(name);
    // A first, small frame before the ballast: whatever the reader's first device frame takes on the GPU is taken then.
    await producer.publish(table(0, 1024), { device: 0, tag: 0n });
    await producer.drain();
    let most = 0;
    await withBallast(async () => {
      const free = cudaInfo().devices[0]!.freeBytes;
      for (let i = 1; i < frames; i++) {
        await producer.publish(table(i), { device: 0, tag: BigInt(i), timeout: 60_000 });
        most = Math.max(most, producer.inFlight);
      }
      await producer.drain();
      t.true(most * FRAME_VALUES * 4 > free - (64 << 20), `the uploads in flight (${most}) filled the ${free >> 20} MiB left`);
    });
    await producer.close();
    t.deepEqual(await nextLine(reader), { ok: frames, tags: Array.from({ length: frames }, (_, i) => i), kinds: ['absent', 'cuda-ipc'] });
    t.is((await exitOf(reader)).code, 0);
  });
});

gpuTest('with no frame released, the upload fails with CUDA out of memory: at once with timeout 0, else at the timeout naming the frames in flight', async (t) => {
  await withRing('gpu-devstuck', { slots: 64 }, async (_ring, name) => {
    await withBallast(async () => {
      const producer = Producer.open(name);
      let published = 0;
      const error = await t.throwsAsync(async () => {
        for (;;) (await producer.publish(table(published), { device: 0, timeout: 0 }), published++);
      }, { instanceOf: GpuringError });
      t.like(error, { code: 'CUDA', cudaError: 2 });
      t.true(published >= 1, `${published} frames fit before the device was full`);
      const started = performance.now();
      const late = await t.throwsAsync(producer.publish(table(0), { device: 0, timeout: 300 }), { instanceOf: GpuringError });
      t.like(late, { code: 'CUDA', cudaError: 2 });
      t.regex(late!.message, new RegExp(`${published} frames of this producer were still unreleased at the timeout`));
      t.true(performance.now() - started >= 290, 'it waited for the timeout');
      await producer.close();
    });
  });
});
