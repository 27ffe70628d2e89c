// LeakWatch alone (lib/leak-watch.ts), with plain objects for frames: which
// leases it hands to its rescue.
// Frames end to end (a Frame collected unreleased, its lease ended with a
// warning) are tested across processes in crash.test.ts.
import test from 'ava';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import type { Frame, Lease } from '../lib/frame.js';
import { LeakWatch } from '../lib/leak-watch.js';

v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Collects, then lets finalizers run. */
async function collect(): Promise<void> {
  for (let k = 0; k < 4; k++) (gc(), await new Promise((r) => setTimeout(r, 5)));
}

const leaseAt = (pos: number): Lease => ({ pos, watchId: -1 });

test('frames collected while watched have their leases rescued, once each; settled ones never', async (t) => {
  const rescued: number[] = [];
  const watch = new LeakWatch((lease) => rescued.push(lease.pos));
  const settled = (() => {
    const frames = [0, 1, 2, 3].map(() => ({}) as Frame);
    const leases = frames.map((_, i) => leaseAt(i));
    frames.forEach((f, i) => watch.watch(f, leases[i]!));
    t.deepEqual(new Set(leases.map((l) => l.watchId)).size, 4, 'each watched lease has its own number');
    watch.settle(frames[1]!, leases[1]!);
    watch.settle(frames[1]!, leases[1]!); // settling twice is harmless
    return leases[1]!;
  })();
  t.is(settled.watchId, -1);
  await collect();
  t.deepEqual(rescued.sort((a, b) => a - b), [0, 2, 3]);
});
