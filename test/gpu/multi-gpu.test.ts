// Devices are named by UUID on the wire: ordinals differ between processes.
// Needs two GPUs; skipped, with the reason, on fewer.
import test from 'ava';
import { tableDifference } from '../../lib/arrow/compare.js';
import { Consumer, cudaInfo } from '../../lib/index.js';
import { allTypesTable } from '../helpers/all-types.js';
import { deviceChild, deviceChildWithEnv, exitOf, nextLine, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const twoGpus = info.available && info.devices.length >= 2;
const multiTest = twoGpus ? test.serial : test.skip;
if (!twoGpus) console.log(`multi-GPU tests skipped: ${info.available ? `${info.devices.length} CUDA device(s) visible, 2 needed` : info.error}`);

/** Publishes the every-type table on physical GPU `producerGpu`, then runs a reader with `visible` devices. */
async function readAcross(producerGpu: number, visible: string) {
  return withRing('mgpu', { slots: 8 }, async (_ring, name) => {
    const producer = deviceChild('on-device', name, producerGpu);
    await nextLine(producer);
    const reader = deviceChildWithEnv({ CUDA_VISIBLE_DEVICES: visible }, 'read', name);
    const result = await nextLine<{ rows?: number; devices?: string[]; code?: string; message?: string }>(reader);
    await exitOf(reader);
    await exitOf(producer);
    return result;
  });
}

multiTest('a consumer that sees the producer\'s GPU under another ordinal finds it by UUID', async (t) => {
  const r = await readAcross(1, '1'); // GPU 1 is ordinal 0 for the reader
  t.is(r.code, undefined, r.message);
  t.is(r.rows, 13);
  t.deepEqual(r.devices, [info.devices[1]!.uuid]);
});

multiTest('a consumer that cannot see the producer\'s GPU gets DEVICE_NOT_FOUND naming CUDA_VISIBLE_DEVICES', async (t) => {
  const r = await readAcross(1, '0');
  t.is(r.code, 'DEVICE_NOT_FOUND');
  t.regex(r.message!, /CUDA_VISIBLE_DEVICES/);
});

multiTest('copyToDevice() copies a frame from one GPU to another', async (t) => {
  await withRing('mgpu-copy', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = deviceChild('on-device', name, 0);
    const f = await consumer.next({ timeout: 30_000 });
    using copy = f.copyToDevice({ device: 1 });
    f.release();
    t.is(copy.memory.device, 1);
    t.true(copy.description.columns.every((c) => c.buffers.every((b) => b.kind !== 'cuda-ipc' || b.deviceOrdinal === 1)));
    t.is(tableDifference(allTypesTable(13), copy.toTable()), null);
    consumer.close();
    await exitOf(producer);
  });
});
