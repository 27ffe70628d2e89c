// A producer whose /dev/shm runs short waits for its frames in flight to come
// back, as it waits for a full ring, instead of failing while memory it owns is
// about to be released; it fails with NO_SPACE when nothing can come back.
// Each case runs in a private /dev/shm (a mount namespace: root and unshare).
import { execFileSync, spawnSync } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { root } from './helpers/ring.js';

const why = process.getuid?.() !== 0 ? 'a private /dev/shm needs root' : spawnSync('unshare', ['--help']).error ? 'no unshare' : null;
const maybe = why ? test.skip : test.serial;
if (why) test(`shared-memory-short tests skipped: ${why}`, (t) => t.pass());

/** Runs small-shm-child.ts ARGS with /dev/shm a fresh tmpfs of `size`; its last JSON line. */
function inSmallShm(size: string, ...args: string[]): Record<string, unknown> {
  const script = `mount -t tmpfs -o size=${size} none /dev/shm && exec "$0" "$@"`;
  const out = execFileSync('unshare', ['--mount', '--propagation', 'private', 'sh', '-c', script, process.execPath, '--import', 'tsx', join(root, 'test/helpers/small-shm-child.ts'), ...args], {
    cwd: root,
    encoding: 'utf8',
    timeout: 120_000,
  });
  return JSON.parse(out.trim().split('\n').at(-1)!) as Record<string, unknown>;
}

maybe('a stream larger than shared memory waits for releases and loses nothing', (t) => {
  // 40 frames of 4 MiB through 48 MiB: the producer must reuse what the slow consumer released.
  const out = inSmallShm('48m', 'stream', 'short-stream', '40', '4');
  t.is(out.published, 40);
  t.deepEqual(out.seen, Array.from({ length: 40 }, (_, i) => i));
});

maybe('with nothing to come back, publishing fails with NO_SPACE: at once with timeout 0, else at the timeout', (t) => {
  const out = inSmallShm('48m', 'stuck', 'short-stuck', '4');
  t.true((out.published as number) >= 1);
  t.regex(out.atOnce as string, /^NO_SPACE: /);
  t.regex(out.waited as string, /^NO_SPACE: .*still unreleased at the timeout$/);
  t.true((out.ms as number) >= 250);
});

maybe("creating a ring that is there with ifExists: 'open' opens it even when /dev/shm could not hold a second copy", (t) => {
  const out = inSmallShm('12m', 'reopen', 'short-reopen');
  t.true((out.freeBytes as number) < (out.totalBytes as number), `the ring (${out.totalBytes} bytes) would not fit again in the ${out.freeBytes} bytes free`);
  t.true(out.sameCreator);
});

maybe('an arena shrinks to fit the shared memory left', (t) => {
  // A 64 MiB arena does not fit in the 12 MiB left; one of the frame's size does.
  t.is(inSmallShm('48m', 'fallback', 'short-fallback').frameId, 1);
});
