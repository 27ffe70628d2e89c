/**
 * A consumer blocked in Consumer.nextSync(), for test/doorbell.test.ts. Plain
 * JavaScript over the compiled package (dist/): a worker thread does not load
 * TypeScript through tsx on Node 20.
 *   sync-consumer.mjs NAME COUNT [worker]
 * Takes COUNT frames with nextSync(), each released at once, with a ten-minute
 * sweep tick (only rings can wake it in time); says "ready" (after opening)
 * and then {"ids", "values", "ticks"}: the frame ids, each frame's `seq` (null
 * where it has none), and, with `worker`, where the frames are taken in a worker
 * thread, how many 5 ms timer ticks the main thread ran meanwhile (else null).
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { Consumer } from '../../dist/index.js';

function takeFrames(name, count, ready) {
  const consumer = Consumer.open(name, { sweepInterval: 600_000 });
  ready();
  const ids = [], values = [];
  for (let i = 0; i < count; i++) {
    const f = consumer.nextSync({ timeout: 60_000 });
    ids.push(f.id);
    values.push(f.toTable().getChild('seq')?.get(0) ?? null);
    f.release();
  }
  consumer.close();
  return { ids, values };
}

const say = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

if (!isMainThread) {
  parentPort.postMessage(takeFrames(workerData.name, workerData.count, () => parentPort.postMessage('ready')));
} else {
  const [name, count, where] = process.argv.slice(2);
  if (where !== 'worker') {
    say({ ...takeFrames(name, Number(count), () => say('ready')), ticks: null });
  } else {
    let ticks = 0;
    const timer = setInterval(() => ticks++, 5);
    const worker = new Worker(new URL(import.meta.url), { workerData: { name, count: Number(count) } });
    worker.on('message', (m) => {
      if (m === 'ready') return say('ready');
      clearInterval(timer);
      say({ ...m, ticks });
    });
    worker.on('error', (e) => {
      console.error(e);
      process.exitCode = 1;
    });
  }
}
