// A producer's 'release' listener runs on the event loop, inside the native
// wake-up that reaped the frames. What it does there (throw, close the
// producer) must reach the user the way Node reports it for any listener, and
// must neither crash the process nor leave the producer's waits without a
// wake-up. Producer and consumer in child processes.
import test from 'ava';
import { child, exitOf, nextLine, withRing } from './helpers/ring.js';

const FRAMES = 40;

type Report = { published: number; released: number; uncaught: string[]; failed?: string };

/** A consumer in its own process that takes and releases each frame at once, as they come. */
async function withConsumer<T>(name: string, fn: () => Promise<T>): Promise<T> {
  const consumer = child('take-release', name, FRAMES);
  try {
    return await fn();
  } finally {
    consumer.kill('SIGKILL');
    await exitOf(consumer);
  }
}

test('a release listener that throws: the error is an uncaught exception, and every later publish still goes through', async (t) => {
  await withRing('relthrow', { slots: 4 }, async (_ring, name) => {
    const proc = child('release-listener', name, 'throw', FRAMES);
    const r = await withConsumer(name, () => nextLine<Report>(proc));
    t.deepEqual(r.uncaught, ['the release listener threw']);
    t.is(r.failed, undefined);
    t.is(r.published, FRAMES);
    t.is(r.released, FRAMES, 'drain() saw every frame come back');
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
  });
});

test('a release listener that throws with no uncaughtException handler ends the process with code 1, as any listener would', async (t) => {
  await withRing('reluncaught', { slots: 4 }, async (_ring, name) => {
    const proc = child('release-listener', name, 'uncaught', FRAMES);
    t.deepEqual(await withConsumer(name, () => nextLine(proc)), { monitor: 'the release listener threw' });
    t.deepEqual(await exitOf(proc), { code: 1, signal: null });
  });
});

test('a release listener that closes its producer: the waiting publish fails with CLOSED, and the process lives on', async (t) => {
  await withRing('relclose', { slots: 4 }, async (_ring, name) => {
    const proc = child('release-listener', name, 'close', FRAMES);
    const r = await withConsumer(name, () => nextLine<Report>(proc));
    t.is(r.failed, 'CLOSED');
    t.true(r.released >= 2, `released ${r.released}`);
    t.true(r.published >= 2 && r.published < FRAMES, `published ${r.published}`);
    t.deepEqual(await exitOf(proc), { code: 0, signal: null });
  });
});
