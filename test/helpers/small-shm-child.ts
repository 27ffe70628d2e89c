/**
 * Runs inside a private /dev/shm of a few tens of MiB (shared-memory-short.test.ts)
 * and prints one JSON line of what happened:
 *   stream NAME FRAMES MIB   a slow consumer (another process) checks every frame
 *   stuck NAME MIB           nobody consumes: publishing must fail with NO_SPACE, not hang
 *   fallback NAME            /dev/shm nearly full: a producer of 64 MiB arenas publishes 1 MiB
 *   reopen NAME              Ring.create(ifExists: 'open') of a ring there, no room for a second copy
 *   consume NAME FRAMES      (the stream's consumer)
 */
import { execFileSync, spawn } from 'node:child_process';
import { statfsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { makeVector, Table } from 'apache-arrow';
import { Consumer, GpuringError, Producer, Ring } from '../../lib/index.js';

const [role, name, ...args] = process.argv.slice(2);
const MiB = 1 << 20;
const say = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);
const table = (i: number, mib: number) => new Table({ v: makeVector(new Float64Array((mib * MiB) / 8).fill(i)) });

async function consume(frames: number): Promise<void> {
  const consumer = Consumer.open(name!);
  const seen: number[] = [];
  for (let i = 0; i < frames; i++) {
    const f = await consumer.next({ timeout: 60_000 });
    const v = f.toTable().getChild('v')!;
    seen.push(v.get(0) === v.get(v.length - 1) ? (v.get(0) as number) : -1);
    await new Promise((r) => setTimeout(r, 5));
    f.release();
  }
  consumer.close();
  say({ seen });
}

async function stream(frames: number, mib: number): Promise<void> {
  const ring = Ring.create(name!, { slots: 64 });
  const reader = spawn(process.execPath, [...process.execArgv, process.argv[1]!, 'consume', name!, String(frames)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = new Promise<string>((resolve) => createInterface({ input: reader.stdout! }).once('line', resolve));
  const producer = Producer.open(name!);
  for (let i = 0; i < frames; i++) await producer.publish(table(i, mib), { timeout: 60_000 });
  await producer.drain();
  producer.close();
  say({ published: frames, ...JSON.parse(await line) });
  ring.close();
}

async function stuck(mib: number): Promise<void> {
  const ring = Ring.create(name!, { slots: 64 });
  const producer = Producer.open(name!);
  let published = 0;
  const codeOf = async (p: Promise<unknown>) => p.then(() => 'published', (e: GpuringError) => `${e.code}: ${e.message}`);
  let atOnce = 'published';
  while (published < 1000 && (atOnce = await codeOf(producer.publish(table(published, mib), { timeout: 0 }))) === 'published') published++;
  const t = performance.now();
  const waited = await codeOf(producer.publish(table(published, mib), { timeout: 300 }));
  say({ published, atOnce, waited, ms: performance.now() - t });
  producer.close();
  ring.close();
}

/** The native arena allocator (gpuring.h) sizes an arena to the allocation when a regular one does not fit. */
async function fallback(): Promise<void> {
  const ring = Ring.create(name!, { slots: 8 });
  const { bavail, bsize } = statfsSync('/dev/shm');
  execFileSync('fallocate', ['-l', String(bavail * bsize - 12 * MiB), '/dev/shm/filler']);
  const producer = Producer.open(name!, { arenaBytes: 64 * MiB });
  say({ frameId: await producer.publish(table(7, 1)) });
  producer.close();
  ring.close();
}

/** Create-or-open of a ring that is there, with /dev/shm too full for a second copy of it. */
function reopen(): void {
  const geometry = { slots: 1 << 16, participants: 1024 };
  const first = Ring.create(name!, geometry);
  const { bavail, bsize } = statfsSync('/dev/shm');
  const again = Ring.create(name!, { ...geometry, ifExists: 'open' });
  const { creatorPid, totalBytes } = again.inspect();
  say({ freeBytes: bavail * bsize, totalBytes, sameCreator: creatorPid === process.pid });
  again.close();
  first.close();
}

if (role === 'consume') await consume(Number(args[0]));
else if (role === 'reopen') reopen();
else if (role === 'stream') await stream(Number(args[0]), Number(args[1]));
else if (role === 'stuck') await stuck(Number(args[0]));
else if (role === 'fallback') await fallback();
else throw new Error(`unknown role ${role}`);
