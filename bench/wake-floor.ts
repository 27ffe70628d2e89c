/**
 * The one-wake floor (bench/wake_floor.c), shared by `npm run bench` and
 * `npm run bench:gpu`: how long one C process takes to wake another asleep in
 * epoll_wait on an abstract datagram socket, the mechanism of a Node
 * consumer's doorbell, with nothing else on the path. A sleeping consumer's
 * hand-off is reported as a ratio to it, measured in the same run.
 */
import { execFileSync, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { collectGarbage, percentile } from './harness.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gpuring-bench-c-'));
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));

const built = new Set<string>();

/** A C program of bench/ compiled against the header (once per process). */
export function cProgramBuilt(name: string): string {
  const bin = join(dir, name);
  if (!built.has(name)) execFileSync('cc', ['-std=c11', '-O2', `-I${join(root, 'interop/include')}`, join(root, `bench/${name}.c`), '-o', bin, '-lrt']);
  built.add(name);
  return bin;
}

/**
 * How a producer passes the time between frames: asleep (a timer, or a futex
 * wait below 1 ms), or busy on its CPU, as one computing its next frame is.
 * The floor is measured paced the same way: whether the sender's CPU is free
 * decides where Linux wakes the sleeper, and so what a wake-up costs.
 */
export type Pacing = 'asleep' | 'busy';

/**
 * The floor's p50/p99/p99.9 in µs over `n` wake-ups `gapUs` apart (after
 * `warmUp` more), the share woken on the sender's CPU, and the p50 µs the
 * sleeper took to read 256 KiB it had read before sleeping, just after waking
 * (`coldRead`) and again at once (`warmRead`). The sleeper waits in epoll_wait
 * on a datagram socket, as a doorbell's socket is; on an `eventfd`; or on a
 * pipe that the sender opens as /proc/PID/fd/N, as a doorbell's pipe is (2.5).
 */
export function wakeFloor(n: number, gapUs: number, pacing: Pacing, warmUp: number, on: 'socket' | 'eventfd' | 'pipe' = 'socket'): Record<'p50' | 'p99' | 'p99.9' | 'sameCpu' | 'coldRead' | 'warmRead', number> {
  const args = [String(n), String(Math.max(1, Math.round(gapUs))), String(warmUp), pacing, ...(on === 'socket' ? [] : [on])];
  const ns = JSON.parse(execFileSync(cProgramBuilt('wake_floor'), args, { encoding: 'utf8' })) as Record<string, number>;
  return { p50: ns.p50! / 1000, p99: ns.p99! / 1000, 'p99.9': ns['p99.9']! / 1000, sameCpu: ns.same_cpu!, coldRead: ns.cold_read! / 1000, warmRead: ns.warm_read! / 1000 };
}

/**
 * Node's own wake-up, for scale: the floor's C sender, paced alike, writes its
 * stamps down a Unix stream socket to a 'data' handler in this process, which
 * times each as it runs. It is what any Node code woken from sleep by a socket
 * pays before its first line of JS, with no ring, frame or producer's JS on
 * the path; a sleeping consumer's hand-off holds a wake-up of the same kind.
 * Resolves to p50/p99/p99.9 in µs over the last `n` of `warmUp + n` stamps.
 */
export async function nodeWakeUp(n: number, gapUs: number, pacing: Pacing, warmUp: number): Promise<Record<'p50' | 'p99' | 'p99.9', number>> {
  collectGarbage();
  const path = join(dir, `node-wake-${process.pid}.sock`);
  const server = createServer();
  await new Promise<void>((listening) => server.listen(path, listening));
  const sender = spawn(cProgramBuilt('wake_floor'), [String(n), String(Math.max(1, Math.round(gapUs))), String(warmUp), pacing, path], { stdio: 'ignore' });
  // A sender that cannot connect exits at once: fail rather than wait for a connection forever.
  const stopped = once(sender, 'exit').then(([code]) => Promise.reject(new Error(`the C sender exited (${code}) before connecting to ${path}`)));
  const [socket] = (await Promise.race([once(server, 'connection'), stopped])) as [Socket];
  stopped.catch(() => {});
  const latencies = await stampsTimed(socket, n + warmUp);
  server.close();
  if (latencies.length < n + warmUp) throw new Error(`the C sender stopped after ${latencies.length} of ${n + warmUp} stamps (exit ${sender.exitCode})`);
  const kept = latencies.slice(warmUp);
  return { p50: percentile(kept, 50), p99: percentile(kept, 99), 'p99.9': percentile(kept, 99.9) };
}

/** Latencies in µs of the 16-byte stamps (CLOCK_MONOTONIC ns, CPU) read from `socket` until it ends, each taken as its 'data' handler runs. */
function stampsTimed(socket: Socket, expected: number): Promise<number[]> {
  const latencies = new Float64Array(expected);
  let count = 0;
  let rest: Buffer = Buffer.alloc(0);
  return new Promise((resolve, reject) => {
    socket.on('data', (chunk: Buffer) => {
      const now = process.hrtime.bigint();
      const bytes = rest.length > 0 ? Buffer.concat([rest, chunk]) : chunk;
      let at = 0;
      for (; at + 16 <= bytes.length; at += 16) if (count < expected) latencies[count++] = Number(now - bytes.readBigUInt64LE(at)) / 1000;
      rest = bytes.subarray(at);
    });
    socket.on('end', () => resolve(Array.from(latencies.subarray(0, count))));
    socket.on('error', reject);
  });
}
