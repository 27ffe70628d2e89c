// Device frames on a broadcast ring (SPEC.md §5.4) on a real GPU: every
// subscriber, in this process, another Node process and a Python process,
// maps each frame's device memory and reads its values; the producer frees an
// allocation only once every subscriber released its frame. Skipped, with the
// reason, without a GPU.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { Consumer, cudaInfo } from '../../lib/index.js';
import { deviceChild, exitOf, nextLine, root, withRing } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test.serial : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

const FRAMES = 20;

/** A CuPy subscriber (interop/python/tests/children/device_subscribe.py); JSON lines like deviceChild's. */
function pythonSubscriber(name: string) {
  const env = { ...process.env, PYTHONPATH: join(root, 'interop/python/src'), PYTHONUNBUFFERED: '1' };
  return spawn('python3', [join(root, 'interop/python/tests/children/device_subscribe.py'), name, String(FRAMES)], { env, stdio: ['ignore', 'pipe', 'inherit'] });
}

for (const [role, kind] of [
  ['pool', 'cuda-pool memory, a new allocation per frame freed once all released'],
  ['many', 'cuda-ipc memory uploaded by publish(table, { device: 0 })'],
] as const) {
  gpuTest(`broadcast ring, ${kind}: subscribers here, in another Node process and in Python each read all ${FRAMES} frames`, async (t) => {
    await withRing(`gpu-bcast-${role}`, { slots: 8, delivery: 'all' }, async (_ring, name) => {
      using here = Consumer.open(name);
      const node = deviceChild('read-all', name, FRAMES);
      t.like(await nextLine(node), { ready: true });
      const python = pythonSubscriber(name);
      t.like(await nextLine(python), { ready: true });
      const producer = deviceChild(role, name, FRAMES);
      let ok = 0;
      for (let i = 0; i < FRAMES; i++) {
        const f = await here.next({ timeout: 60_000 });
        const values = f.toTable().getChildAt(0)!.toArray() as ArrayLike<number>;
        if (f.tag === BigInt(i) && Array.prototype.every.call(values, (v: number) => v === i)) ok++;
        f.release();
      }
      t.is(ok, FRAMES, 'this process read every frame, in order, with its values');
      t.like(await nextLine(node), { ok: FRAMES, tags: Array.from({ length: FRAMES }, (_, i) => i) }, 'so did the other Node process');
      t.deepEqual(await nextLine(python), { ok: FRAMES }, 'and the Python one (CuPy)');
      t.deepEqual(await nextLine(producer), { published: FRAMES });
      for (const p of [node, producer, python]) t.is((await exitOf(p)).code, 0);
    });
  });
}
