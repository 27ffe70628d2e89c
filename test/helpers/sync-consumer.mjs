/**
 * A consumer blocked in Consumer.nextSync(), for test/doorbell.test.ts. Plain
 * JavaScript over the compiled package (dist/): a worker thread does not load
 * TypeScript through tsx on Node 20.
 *   sync-consumer.mjs NAME COUNT [main|worker|heap|terminate]
 * Takes COUNT frames with nextSync(), each released at once, with a ten-minute
 * sweep tick (only rings can wake it in time); says "ready" (after opening)
 * and then {"ids", "values", "ticks", "heap"}: the frame ids, each frame's `seq`
 * (null where it has none); with `worker`, where the frames are taken in a
 * worker thread, how many 5 ms timer ticks the main thread ran meanwhile (else
 * null); with `heap` (run with --expose-gc), the heap used after a full
 * collection at a sixth of the frames and after the last, the loop never
 * having yielded (else null). With `terminate` the worker waits for a frame
 * that never comes until the parent's IPC message 'stop', on which the main
 * thread terminates it and says {"terminated": ms}, the milliseconds it took.
 * Except with `terminate`, the blocked thread's look for a stopping Node comes
 * every ten minutes instead of every 50 ms (GPURING_TEST_STOP_CHECK_MS): a ring
 * the producer failed to send then shows as a TIMEOUT, not as a late frame.
 */
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { Consumer } from '../../dist/index.js';

/** Each nextSync()'s timeout: a ring wakes the thread in microseconds, so reaching it means none came. */
const WAIT_MS = 60_000;

function takeFrames(name, count, ready, weighHeap = false) {
  const consumer = Consumer.open(name, { sweepInterval: 600_000 });
  ready();
  // Allocated up front, so that only what the loop keeps per frame can grow the heap.
  const ids = new Float64Array(count), values = new Float64Array(count), heap = [];
  const weigh = () => (globalThis.gc(), heap.push(process.memoryUsage().heapUsed));
  for (let i = 0; i < count; i++) {
    const asked = performance.now();
    const f = consumer.nextSync({ timeout: WAIT_MS });
    // At its deadline nextSync() looks once more and takes a frame it finds: a
    // frame that came only then was published without a ring that reached us.
    if (performance.now() - asked >= WAIT_MS) throw new Error(`frame ${i} was taken only when the ${WAIT_MS} ms timeout ended the sleep: no ring woke the thread`);
    ids[i] = f.id;
    values[i] = f.toTable().getChild('seq')?.get(0) ?? NaN;
    f.release();
    if (weighHeap && (i === Math.floor(count / 6) || i === count - 1)) weigh();
  }
  consumer.close();
  return { ids: Array.from(ids), values: Array.from(values, (v) => (Number.isNaN(v) ? null : v)), heap: weighHeap ? heap : null };
}

const say = (value) => process.stdout.write(`${JSON.stringify(value)}\n`);

if (!isMainThread) {
  parentPort.postMessage(takeFrames(workerData.name, workerData.count, () => parentPort.postMessage('ready')));
} else {
  const [name, count, where] = process.argv.slice(2);
  // Set on the main thread, where process.env is the process's environment, before any nextSync().
  if (where !== 'terminate') process.env.GPURING_TEST_STOP_CHECK_MS = '600000';
  if (where === 'main' || where === 'heap') {
    say({ ...takeFrames(name, Number(count), () => say('ready'), where === 'heap'), ticks: null });
  } else if (where === 'terminate') {
    const worker = new Worker(new URL(import.meta.url), { workerData: { name, count: Number(count) } });
    worker.on('message', (m) => m === 'ready' && say('ready'));
    process.once('message', async () => {
      const started = performance.now();
      await worker.terminate();
      say({ terminated: performance.now() - started });
      process.disconnect();
    });
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
      clearInterval(timer); // else the timer keeps the process, and the test, waiting
      process.exitCode = 1;
    });
  }
}
