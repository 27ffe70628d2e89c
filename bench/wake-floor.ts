/**
 * The one-wake floor (bench/wake_floor.c), shared by `npm run bench` and
 * `npm run bench:gpu`: how long one C process takes to wake another asleep in
 * epoll_wait on an abstract datagram socket, the mechanism of a Node
 * consumer's doorbell, with nothing else on the path. A sleeping consumer's
 * hand-off is reported as a ratio to it, measured in the same run.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gpuring-bench-c-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

/** A C program of bench/ compiled against the header (once per process). */
export function cProgramBuilt(name: string): string {
  const bin = join(dir, name);
  execFileSync('cc', ['-std=c11', '-O2', `-I${join(root, 'interop/include')}`, join(root, `bench/${name}.c`), '-o', bin, '-lrt']);
  return bin;
}

/**
 * How a producer passes the time between frames: asleep (a timer, or a futex
 * wait below 1 ms), or busy on its CPU, as one computing its next frame is.
 * The floor is measured paced the same way: whether the sender's CPU is free
 * decides where Linux wakes the sleeper, and so what a wake-up costs.
 */
export type Pacing = 'asleep' | 'busy';

/** The floor's p50/p99/p99.9 in µs over `n` wake-ups `gapUs` apart (after `warmUp` more), and the share woken on the sender's CPU. */
export function wakeFloor(n: number, gapUs: number, pacing: Pacing, warmUp: number): Record<'p50' | 'p99' | 'p99.9' | 'sameCpu', number> {
  const ns = JSON.parse(execFileSync(cProgramBuilt('wake_floor'), [String(n), String(Math.max(1, Math.round(gapUs))), String(warmUp), pacing], { encoding: 'utf8' })) as Record<string, number>;
  return { p50: ns.p50! / 1000, p99: ns.p99! / 1000, 'p99.9': ns['p99.9']! / 1000, sameCpu: ns.same_cpu! };
}
