// C and C++ programs on a real GPU, each side in its own process: the C++
// tensor stage (interop/c/tensor_producer.cc) to Node; Node device frames,
// Node pool memory and PyTorch VMM memory to the C consumer
// (interop/c/consumer.c, through gpuring/cuda.h). Skipped, with the reason,
// without a GPU.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import * as A from 'apache-arrow';
import test from 'ava';
import { Consumer, cudaInfo, Producer } from '../../lib/index.js';
import { cConsumerReport, expectedReport } from '../helpers/c-consumer.js';
import { cProgram, deviceChild, exitOf, root, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`C GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

// cuda-ipc: cuMemAlloc tensors; cuda-pool: tensors of an exportable stream-ordered pool; cuda-vmm:
// each tensor VMM memory of its own, 24 MiB across two chunks (gpr_cuda_vmm_alloc). All described
// with gpr_cuda_describe_for.
const modes = { 'cuda-ipc': { rows: 512, arg: [] }, 'cuda-pool': { rows: 512, arg: ['pool'] }, 'cuda-vmm': { rows: 65536, arg: ['vmm'] } };
for (const [memory, mode] of Object.entries(modes)) {
  gpuTest(`rows x cols tensors a C++ stage filled on the device (${memory}) read in Node equal what its kernel wrote`, async (t) => {
    const [rows, cols, frames] = [mode.rows, 96, 3];
    await withRing('gpu-cxx', { slots: 16 }, async (_ring, name) => {
      const consumer = Consumer.open(name);
      const args = [name, rows, cols, frames, ...mode.arg].map(String);
      const proc = spawn(cProgram('tensor_producer', 'interop/c'), args, { stdio: ['ignore', 'pipe', 'inherit'] });
      // It drains before exiting, so an exit before the last frame is a failure: report it at once.
      const died = exitOf(proc).then((e) => Promise.reject(new Error(`tensor_producer exited early: ${JSON.stringify(e)}`)));
      died.catch(() => {});
      try {
        for (let k = 0; k < frames; k++) {
          const f = await Promise.race([consumer.next({ timeout: 60_000 }), died]);
          const [tensor] = f.description.columns;
          t.is(tensor!.format, `+w:${cols}`);
          t.is(tensor!.children[0]!.buffers[1]!.kind as string, memory);
          t.is(f.description.syncKind, 2, 'an event orders the reads after the kernel');
          const items = f.toTable().getChild('tensor')!.getChildAt(0)!.toArray() as Float32Array;
          t.is(items.length, rows * cols);
          let bad = -1;
          for (let i = 0; i < items.length && bad < 0; i++) if (items[i] !== i * 0.5 + k) bad = i;
          t.is(bad, -1, `frame ${k}: item ${bad} is ${items[bad]}`);
          f.release();
        }
      } finally {
        consumer.close();
      }
      t.deepEqual(await exitOf(proc), { code: 0, signal: null });
    });
  });
}

gpuTest('device frames from Node read by the C consumer (CUDA IPC, ordered by the event) give the checksums Node computes', async (t) => {
  await withRing('gpu-c', { slots: 16 }, async (_ring, name) => {
    const producer = Producer.open(name);
    const idx = Array.from({ length: 1000 }, (_, i) => i);
    const table = new A.Table({
      x: A.vectorFromArray(idx.map((i) => (i % 9 === 0 ? null : i * 0.75)), new A.Float32()),
      id: A.vectorFromArray(idx.map((i) => i - 500), new A.Int32()),
      name: A.vectorFromArray(idx.map((i) => (i % 4 === 0 ? null : `ключ-${i}`)), new A.Utf8()),
      tensor: A.vectorFromArray(idx.map((i) => Array.from({ length: 8 }, (_, c) => i * 8 + c)), new A.FixedSizeList(8, new A.Field('item', new A.Float32(), false))),
    });
    const sources = [table, table.slice(13, 700)];
    const report = cConsumerReport(name, sources.length);
    for (const [k, source] of sources.entries()) await producer.publish(source, { device: 0, tag: BigInt(k) });
    t.deepEqual(await report, sources.map((source, k) => expectedReport(source, k + 1, k, 'cuda-ipc')));
    await producer.drain();
    producer.close();
  });
});

gpuTest('pool memory from Node read by the C consumer: each frame a new pool allocation, its pool fetched over the descriptor channel', async (t) => {
  await withRing('gpu-c-pool', { slots: 16 }, async (_ring, name) => {
    const report = cConsumerReport(name, 5);
    const producer = deviceChild('pool', name, 5);
    const frames = await report;
    t.deepEqual(frames.map((f) => [f.columns[0]!.memory, f.columns[0]!.sum]), [0, 1, 2, 3, 4].map((i) => ['cuda-pool', i * (1 << 18)]));
    t.is((await exitOf(producer)).code, 0);
  });
});

gpuTest('VMM memory (PyTorch expandable segments) from a Python producer read by the C consumer, span by span', async (t) => {
  await withRing('gpu-c-vmm', { slots: 16 }, async (_ring, name) => {
    const report = cConsumerReport(name, 1);
    const env = { ...process.env, PYTHONPATH: join(root, 'interop/python/src'), PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True' };
    const producer = spawn('python3', [join(root, 'interop/python/tests/children/device_produce.py'), name, 'torch-expandable', '1000'], { env, stdio: 'ignore' });
    const [frame] = await report;
    const x = frame!.columns.find((c) => c.name === 'x')!;
    t.deepEqual([x.memory, x.sum], ['cuda-vmm', 249_750]); // x[i] = i * 0.5
    t.is(frame!.columns.find((c) => c.name === 'm')!.memory, 'cuda-vmm');
    t.is((await exitOf(producer)).code, 0);
  });
});
