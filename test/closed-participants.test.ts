// What a closed producer or consumer keeps of its ring in this process:
// nothing of the ring's shared memory once close() returns (native/lent_mappings.h),
// and none of its native state once its object is collected (LoopParticipant::HookExit).
// Before, the views lent to JS held the ring's files mapped until a garbage
// collection ran their finalizers, and every participant's state lived until the
// process ended.
import { tableFromArrays } from 'apache-arrow';
import test from 'ava';
import { readFileSync } from 'node:fs';
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { Consumer, Producer } from '../lib/index.js';
import { native } from '../lib/native.js';
import { withRing } from './helpers/ring.js';

v8.setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** The lines of /proc/self/maps that map a file of ring `name`: its segment or an arena, removed or not. */
function mappedFilesOf(name: string): string[] {
  const file = new RegExp(`/gpuring\\.${name}(\\.p\\d+g\\d+\\.a\\d+)?( \\(deleted\\))?$`);
  return readFileSync('/proc/self/maps', 'utf8').split('\n').filter((line) => file.test(line));
}

test("close() lets go of the ring's shared memory at once: views taken before read zeros, writes fault nothing, and no file of the ring stays mapped", async (t) => {
  await withRing('closed', { slots: 8 }, async (ring, name) => {
    const producer = Producer.open(name);
    const consumer = Consumer.open(name);
    await producer.publish(tableFromArrays({ a: Int32Array.from([1, 2, 3]) }));
    const frame = consumer.tryNext()!;
    const values = frame.columns()[0]!.values as Int32Array; // a view of the producer's arena, mapped here by the consumer
    const table = frame.toTable();
    const allocation = producer.allocate(64).bytes; // a view of the producer's own arena mapping
    t.deepEqual([...values], [1, 2, 3]);
    t.true(mappedFilesOf(name).length >= 3, `the segment and both arena views are mapped while open: ${mappedFilesOf(name).join('; ')}`);

    frame.release();
    consumer.close();
    await producer.drain();
    producer.close();
    ring.close();

    t.deepEqual(mappedFilesOf(name), [], 'nothing of the ring is mapped, though every view is still referenced');
    t.deepEqual([...values], [0, 0, 0]);
    t.is(table.getChild('a')!.get(2), 0);
    allocation.fill(7);
  });
});

test('closed producers and consumers are freed with their objects: none of their native state outlives them', async (t) => {
  await withRing('freed', { slots: 8 }, async (_ring, name) => {
    const before = native().liveParticipants();
    for (let i = 0; i < 50; i++) {
      Producer.open(name).close();
      Consumer.open(name).close();
    }
    t.is(native().liveParticipants(), before + 100, 'each open made a state, alive until its object is collected');
    // Finalizers run on later turns of the event loop.
    for (let turn = 0; turn < 50 && native().liveParticipants() > before; turn++) (gc(), await new Promise((r) => setTimeout(r, 10)));
    t.is(native().liveParticipants(), before);
  });
});
