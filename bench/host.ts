/**
 * `npm run bench` (any Linux machine): gpuring on host memory against what
 * users do today, baselines measured in the same run. Like every benchmark it
 * runs the compiled package (dist/, which the npm script builds first): what
 * users run, without the test loader's per-function wrappers.
 *  1. hand-off latency of one small frame, producer process to consumer
 *     process, spin path (frames back to back, the consumer busy-polling) and
 *     futex path (2 ms apart, the consumer asleep);
 *     baselines: its description as JSON over a Unix socket, and a MessagePort
 *     between worker threads (the in-process reference); and a prepared frame
 *     every 20 µs to a consumer spinning in next({ spin }), against the C ring
 *     alone and the 3 µs target, with the producer's publish call as its hop
 *  2. the C ring alone across two processes: one-way latency and records/s
 *  3. a 1 GiB table made visible in another process, against tableToIPC over
 *     a Unix socket and tableFromIPC
 *  4. throughput, frames/s of 8-column frames from one producer (publish(table))
 *     to 1, 2 and 4 consumer processes that build each frame's Table, with and
 *     without batching (taking every waiting frame per wake-up); baseline: JSON
 *     lines over a Unix socket (parsed), 1 consumer; and of a prepared frame,
 *     1 consumer, batched; and the same frames written in place into loans
 *     (producer.loan()), against publish(table) in the same run; for the
 *     one-consumer runs, each side's main-thread CPU per frame (which side binds)
 *  5. a sleeping consumer hop by hop: a prepared frame published every 2 ms
 *     and every 100 µs (by a producer asleep between frames, and at 100 µs
 *     also by one busy) to a consumer asleep in next(), timestamped at publish
 *     call, publish return (the frame in the ring), consumer wake-up (lastWake), JS
 *     callback and toTable(); anchors, measured in the same run:
 *     the one-wake floor, a C process woken from epoll_wait on a socket by
 *     another paced alike (bench/wake_floor.c), the same on an eventfd (the
 *     floor issue 12 names), the same on a pipe (a doorbell is a socket and a
 *     pipe, format 2.5), and Node's own wake-up, a
 *     socket 'data' handler in this process woken by the same C sender; and
 *     for the p99.9, JSON lines over a Unix socket sent on the producer's clock;
 *     and the same consumer fed by that C sender publishing with
 *     gpr_producer_publish, to tell the consumer's part from the Node producer's;
 *     and the same consumer blocked in nextSync(), its thread asleep on the
 *     doorbell itself (no event loop between the wake-up and the caller),
 *     and in `for await` over the consumer (next() with the iterator's promises);
 *     and frames that take 30 µs to make, timed from when making begins, with
 *     producer.headsUp() then and without
 *  6. fan-out: a broadcast ring to 1, 2, 4, 8 subscriber processes against the
 *     same frame published once per consumer into work-queue rings
 *     (bench/fan-out.ts): throughput and p50/p99 latency
 * Every latency series leaves its first LATENCY_WARMUP frames out, and starts
 * from a collected heap (collectGarbage()).
 */
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Socket } from 'node:net';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { PerformanceObserver } from 'node:perf_hooks';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { tableFromIPC } from 'apache-arrow';
import { Consumer, type Frame } from '../dist/index.js';
import { withRing } from '../test/helpers/ring.js';
import { collectGarbage, compare, LATENCY_WARMUP, median, microsSince, percentile, report, type BenchRecord } from './harness.js';
import { fanOutRecords } from './fan-out.js';
import { cProgramBuilt, nodeWakeUp, type Pacing, wakeFloor } from './wake-floor.js';
import { WARMUP_FRAMES } from './frames.js';
import type { Chart, Series } from './plot.js';

const json = process.argv.includes('--json');
/** `--only WORD`: run the sections whose name contains WORD (ring, hand-off, sleeping, throughput, fan-out, table). */
const only = process.argv.includes('--only') ? process.argv[process.argv.indexOf('--only') + 1]! : '';
const want = (section: string) => section.includes(only);
const root = fileURLToPath(new URL('..', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'gpuring-bench-'));
const progress = (line: string) => !json && process.stderr.write(`${line}\n`);

function child(role: string, ...args: (string | number)[]) {
  return spawn(process.execPath, ['--import', 'tsx', join(root, 'bench/host-child.ts'), role, ...args.map(String)], { stdio: ['ignore', 'pipe', 'inherit', 'ipc'] });
}
const exited = (p: ReturnType<typeof child>) => new Promise((r) => p.on('exit', r));


/**
 * Spin path: the consumer busy-polls on its JS thread (`next({ spin })`), so a
 * frame is taken with no thread wake-up. Futex path (the name users know; the
 * Node consumer sleeps on its doorbell): it sleeps in `next()` and the
 * producer's publish wakes its event loop. `gap` between frames is in the
 * child role's unit (see host-child.ts): ms for gpuring, µs for prepared.
 */
async function gpuringHandOff(n: number, gap: number, spin: number, role = 'gpuring', pacing: Pacing = 'asleep'): Promise<{ latencies: number[]; printed: string }> {
  collectGarbage();
  return withRing('bench-ho', { slots: 1024 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = child(role, name, n + LATENCY_WARMUP, gap, pacing);
    const printed: Buffer[] = [];
    producer.stdout!.on('data', (d: Buffer) => printed.push(d));
    const latencies: number[] = [];
    for (let i = 0; i < n + LATENCY_WARMUP; i++) {
      const f = await consumer.next({ timeout: 30_000, spin });
      latencies.push(microsSince(f.tag));
      f.release();
    }
    consumer.close();
    await exited(producer);
    return { latencies: latencies.slice(LATENCY_WARMUP), printed: Buffer.concat(printed).toString() };
  });
}

/**
 * JSON lines over a Unix socket, `gapUs` apart (paced as `pacing`, see sleepingRecords):
 * each answered before the next goes, or with `paced` sent on the clock whether
 * read or not, as the sleeping rows' producer publishes (host-child.ts, socket-paced).
 */
async function socketHandOff(n: number, gapUs: number, pacing: Pacing = 'asleep', paced = false): Promise<number[]> {
  collectGarbage();
  const path = join(dir, `handoff-${gapUs}-${pacing}.sock`);
  const latencies: number[] = [];
  const server = createServer((s: Socket) => {
    createInterface({ input: s }).on('line', (line) => {
      const msg = JSON.parse(line) as { t: string };
      latencies.push(microsSince(BigInt(msg.t)));
      if (!paced) s.write('ok\n');
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  await exited(child(paced ? 'socket-paced' : 'socket', path, n + LATENCY_WARMUP, gapUs, pacing));
  server.close();
  return latencies.slice(LATENCY_WARMUP);
}

async function messagePortHandOff(n: number): Promise<number[]> {
  collectGarbage();
  const code = `
    const { parentPort, workerData } = require('node:worker_threads');
    let i = 0;
    const send = () => parentPort.postMessage({ t: process.hrtime.bigint(), frame: JSON.parse(workerData.frame) });
    parentPort.on('message', () => (++i < workerData.n ? send() : parentPort.close()));
    send();`;
  const { smallFrameDescription, toJson } = await import('./frames.js');
  const worker = new Worker(code, { eval: true, workerData: { n: n + LATENCY_WARMUP, frame: toJson(smallFrameDescription()) } });
  const latencies: number[] = [];
  worker.on('message', (m: { t: bigint }) => (latencies.push(microsSince(m.t)), worker.postMessage('ok')));
  await new Promise((r) => worker.on('exit', r));
  return latencies.slice(LATENCY_WARMUP);
}

function handOffRecords(path: string, ours: number[], baseline: string, theirs: number[]): BenchRecord[] {
  return (['p50', 'p99', 'p99.9'] as const).map((p) => {
    const q = p === 'p50' ? 50 : p === 'p99' ? 99 : 99.9;
    return compare(`hand-off, one small frame (${path})`, p, 'µs', percentile(ours, q), baseline, percentile(theirs, q), false);
  });
}

/** A measurement with no baseline of its own, that explains others. */
const aside = (name: string, metric: string, unit: string, value: number): BenchRecord => ({ name, metric, unit, value, baseline: null, baselineValue: null, ratio: null });
/** A measured hop: where the time goes. */
const hop = (name: string, samples: number[]) => aside(name, 'p50', 'µs', percentile(samples, 50));

async function spinningRecords(n: number, gapUs: number): Promise<BenchRecord[]> {
  // A prepared frame every `gapUs` (the producer sleeps between frames, in a futex wait: host-child.ts, pacing 'asleep'), the consumer busy-polling.
  const { latencies: ours, printed } = await gpuringHandOff(n, gapUs, 1_000_000, 'prepared');
  const publish = (JSON.parse(printed) as number[]).slice(LATENCY_WARMUP);
  // The same with the producer spinning between frames: what its CPU waking from each sleep adds.
  const busy = await gpuringHandOff(n, gapUs, 1_000_000, 'prepared', 'busy');
  const busyPublish = (JSON.parse(busy.printed) as number[]).slice(LATENCY_WARMUP);
  const ring = cRingLatency();
  const name = `hand-off, consumer spinning, prepared frame ${gapUs} µs apart (publish call to JS)`;
  return [
    ...(['p50', 'p99', 'p99.9'] as const).map((p) => compare(name, p, 'µs', percentile(ours, p === 'p50' ? 50 : p === 'p99' ? 99 : 99.9), 'C ring alone, both sides spinning', ring[p === 'p99.9' ? 'p999' : p]! / 1000, false)),
    compare(name, 'p50', 'µs', percentile(ours, 50), '3 µs (target)', 3, false),
    // The frame is READY before the call returns: what the producer's side can take of the total.
    hop(`  hop: publish call until it returns (the frame went into the ring before it; the producer's CPU just woke from ${gapUs} µs asleep)`, publish),
    hop(`  the same hand-off, the producer spinning between frames instead (its CPU never idle)`, busy.latencies),
    hop(`  hop: its publish call until it returns`, busyPublish),
  ];
}

/**
 * The sleeping rows' producer: a Node process publishing a prepared frame (it
 * prints each publish call's µs), or with `c` the floor's C sender publishing
 * with gpr_producer_publish (bench/wake_floor.c, ring:NAME), paced alike.
 */
function sleepingProducer(producer: Source, name: string, frames: number, gapUs: number, pacing: Pacing) {
  if (producer === 'node') return child('prepared', name, frames, gapUs, pacing);
  if (typeof producer === 'object') return child('prepared', name, frames, gapUs, pacing, producer.makeUs, producer.headsUp ? 'heads-up' : 'none');
  return spawn(cProgramBuilt('wake_floor'), [String(frames), String(gapUs), '0', pacing, `ring:${name}`], { stdio: ['ignore', 'pipe', 'inherit'] });
}

/**
 * Who publishes the sleeping rows' frames: a Node producer, the C floor's
 * sender, or a Node producer that spends `makeUs` making each frame before
 * its publish (timed from when it begins), with or without a headsUp() then.
 */
type Source = 'node' | 'c' | { makeUs: number; headsUp: boolean };

/**
 * How the sleeping consumer waits: in next(), in `for await` over the consumer
 * (what the README shows), in nextSync() (its thread asleep on its doorbell
 * word, a futex), or `alternate`: in a listen() handler (called from the
 * wake-up) and in next() by turns of ALTERNATE_EVERY frames, so that the drift
 * of a noisy machine over a series weighs on both alike.
 */
type SleepingWait = 'next' | 'iterate' | 'sync' | 'alternate';
const ALTERNATE_EVERY = 50;

/** A consumer asleep as `wait` says, a prepared frame every `gapUs` from a Node (or C) producer: each hop's time, µs. */
async function sleepingHandOff(n: number, gapUs: number, pacing: Pacing, from: Source = 'node', wait: SleepingWait = 'next') {
  collectGarbage();
  return withRing('bench-sleep', { slots: 1024 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const frames = wait === 'iterate' ? consumer[Symbol.asyncIterator]() : undefined;
    const producer = sleepingProducer(from, name, n + LATENCY_WARMUP, gapUs, pacing);
    const out: Buffer[] = [];
    producer.stdout!.on('data', (d: Buffer) => out.push(d));
    // Hops go into preallocated arrays as numbers, not kept as BigInt stamps: thousands
    // of live heap objects would lengthen every scavenge, a pause the p99.9 then shows.
    const hops = { total: new Float64Array(n), wake: new Float64Array(n), receive: new Float64Array(n), table: new Float64Array(n) };
    const listening = (k: number) => wait === 'alternate' && Math.floor((k + LATENCY_WARMUP) / ALTERNATE_EVERY) % 2 === 0;
    const listened = new Uint8Array(n); // 1 where the frame went to the listener
    const us = (a: bigint, b: bigint) => Number(b - a) / 1000;
    // The consumer's garbage-collection pauses while timed frames come: a scavenge
    // (0.3-1 ms) every few thousand frames is what a p99.9 may catch.
    const pauses: number[] = [];
    let timed = -LATENCY_WARMUP;
    const gc = new PerformanceObserver((list) => {
      if (timed > 0) for (const e of list.getEntries()) pauses.push(e.duration * 1000);
    });
    gc.observe({ entryTypes: ['gc'] });
    const record = (f: Frame, js: bigint) => {
      f.toTable();
      const done = process.hrtime.bigint();
      if (timed >= 0) {
        const woken = consumer.lastWake;
        listened[timed] = listening(timed) ? 1 : 0;
        hops.total[timed] = us(f.tag, js);
        hops.wake[timed] = us(f.tag, woken);
        hops.receive[timed] = us(woken, js);
        hops.table[timed] = us(js, done);
      }
      f.release();
    };
    while (timed < n) {
      if (listening(timed)) {
        await new Promise<void>((resolve) => {
          const listener = consumer.listen((f) => {
            record(f, process.hrtime.bigint());
            if (++timed === n || !listening(timed)) (listener.stop(), resolve());
          });
        });
        continue;
      }
      // Inline, not a helper: an async helper would add its own microtasks to what is timed.
      const f = wait === 'sync' ? consumer.nextSync({ timeout: 30_000 })
        : wait === 'iterate' ? ((await frames!.next()).value as Frame)
        : await consumer.next({ timeout: 30_000 });
      record(f, process.hrtime.bigint());
      timed++;
    }
    gc.disconnect();
    await frames?.return?.();
    consumer.close();
    await exited(producer);
    const publish = from === 'node' ? (JSON.parse(Buffer.concat(out).toString()) as number[]).slice(LATENCY_WARMUP) : [];
    return { ...Object.fromEntries(Object.entries(hops).map(([k, a]) => [k, Array.from(a)])) as Record<keyof typeof hops, number[]>, listened: Array.from(listened), publish, pauses };
  });
}

async function sleepingRecords(n: number, gapUs: number, pacing: Pacing, socket: number[]): Promise<BenchRecord[]> {
  const floor = wakeFloor(n, gapUs, pacing, LATENCY_WARMUP);
  // The floor issue 12 names is an eventfd's; a doorbell is a socket and, rung by notifiers of its user, a pipe (2.5).
  const eventfdFloor = wakeFloor(n, gapUs, pacing, LATENCY_WARMUP, 'eventfd');
  const pipeFloor = wakeFloor(n, gapUs, pacing, LATENCY_WARMUP, 'pipe');
  const nodeWake = await nodeWakeUp(n, gapUs, pacing, LATENCY_WARMUP);
  const hops = await sleepingHandOff(n, gapUs, pacing);
  const gap = `${gapUs >= 1000 ? `${gapUs / 1000} ms` : `${gapUs} µs`} apart, producer ${pacing}`;
  const name = `hand-off, consumer asleep, prepared frame ${gap} between frames (publish call to JS callback)`;
  const records = (['p50', 'p99', 'p99.9'] as const).map((p) =>
    compare(name, p, 'µs', percentile(hops.total, p === 'p50' ? 50 : p === 'p99' ? 99 : 99.9), `C one-wake floor (epoll_wait on a socket; sender ${pacing} alike)`, floor[p], false));
  records.push(compare(name, 'p99.9', 'µs', percentile(hops.total, 99.9), `JSON over a Unix socket, a line sent on the same clock (${gap})`, percentile(socket, 99.9), false));
  records.push(compare(name, 'p50', 'µs', percentile(hops.total, 50), `Node's own wake-up: a socket 'data' handler woken by the floor's C sender (${pacing} alike)`, nodeWake.p50, false));
  records.push(compare(name, 'p50', 'µs', percentile(hops.total, 50), `C one-wake floor on an eventfd (epoll_wait; sender ${pacing} alike)`, eventfdFloor.p50, false));
  records.push(compare(name, 'p50', 'µs', percentile(hops.total, 50), `C one-wake floor on a pipe, opened as /proc/PID/fd/N (a doorbell's pipe; sender ${pacing} alike)`, pipeFloor.p50, false));
  // The same consumer fed by the floor's C sender itself: the hand-off without a Node producer's cold start in it.
  const fromC = await sleepingHandOff(n, gapUs, pacing, 'c');
  records.push(compare(`  the same, frames from a C producer (gpr_producer_publish, paced as the floor's sender; ${gap})`, 'p50', 'µs', percentile(fromC.total, 50), `C one-wake floor (epoll_wait on a socket; sender ${pacing} alike)`, floor.p50, false));
  // The same consumer with its thread blocked: the wake-up reaches it without the event loop's callback, promise and microtask.
  const blocked = await sleepingHandOff(n, gapUs, pacing, 'node', 'sync');
  const blockedName = `  the same, consumer blocked in nextSync() (its thread asleep on its doorbell word, a futex; ${gap})`;
  records.push(compare(blockedName, 'p50', 'µs', percentile(blocked.total, 50), `C one-wake floor on an eventfd (epoll_wait; sender ${pacing} alike)`, eventfdFloor.p50, false));
  records.push(compare(blockedName, 'p50', 'µs', percentile(blocked.total, 50), `C one-wake floor (epoll_wait on a socket; sender ${pacing} alike)`, floor.p50, false));
  records.push(compare(blockedName, 'p99.9', 'µs', percentile(blocked.total, 99.9), `JSON over a Unix socket, a line sent on the same clock (${gap})`, percentile(socket, 99.9), false));
  records.push(hop(`  hop: wake-up until nextSync() returns (claim, copy, Frame, ${gap})`, blocked.receive));
  records.push(...(await listenRecords(n, gapUs, pacing, gap, { socket, floor: floor.p50, eventfd: eventfdFloor.p50 })));
  // The README's loop: the async iterator's own promises come on top of next()'s.
  const iterated = await sleepingHandOff(n, gapUs, pacing, 'node', 'iterate');
  const iteratedName = `  the same, consumer in \`for await (const frame of consumer)\` (${gap})`;
  records.push(compare(iteratedName, 'p50', 'µs', percentile(iterated.total, 50), `C one-wake floor (epoll_wait on a socket; sender ${pacing} alike)`, floor.p50, false));
  records.push(compare(iteratedName, 'p50', 'µs', percentile(iterated.total, 50), 'next() in the same run', percentile(hops.total, 50), false));
  records.push(hop(`  hop: wake-up until the loop's body runs (claim, copy, Frame, promises, ${gap})`, iterated.receive));
  records.push(...(await madeRecords(n, gapUs, pacing, gap)));
  records.push(hop(`  hop: publish call until it returns (the frame went into the ring before it, and any yield to the consumer it woke, ${gap})`, hops.publish));
  records.push(hop(`  hop: publish call until the consumer's event loop wakes (publish + doorbell + wake-up, ${gap})`, hops.wake));
  records.push(hop(`  hop: wake-up until next() resolves in JS (claim, copy, Frame, promise, ${gap})`, hops.receive));
  records.push(aside(`  the floor's sleeper woke on its sender's CPU (${gap}): where Linux wakes it decides what a wake-up costs`, 'share', '%', floor.sameCpu));
  // Work done just after a wake-up runs on caches the sleep emptied; the floor does none, a JS consumer's next() does.
  records.push(compare(`  the floor's sleeper reading 256 KiB it read before it slept, just after it wakes (${gap})`, 'p50', 'µs', floor.coldRead, 'the same read again at once', floor.warmRead, false));
  records.push(hop(`  hop: toTable() of the received frame (${gap})`, hops.table));
  records.push(aside(`  the consumer's garbage-collection pauses while its ${n} timed frames came (${gap})`, 'count', '', hops.pauses.length));
  records.push(aside(`  the longest of them (${gap})`, 'max', 'µs', Math.max(0, ...hops.pauses)));
  return records;
}

/**
 * A listen() handler, called from the wake-up itself (no promise, no
 * microtask), against next(): one consumer taking frames by turns in each
 * way, so that both see the same stretch of a noisy machine.
 */
async function listenRecords(n: number, gapUs: number, pacing: Pacing, gap: string, against: { socket: number[]; floor: number; eventfd: number }): Promise<BenchRecord[]> {
  const both = await sleepingHandOff(n, gapUs, pacing, 'node', 'alternate');
  const [listened, next] = [1, 0].map((l) => ({ total: both.total.filter((_, i) => both.listened[i] === l), receive: both.receive.filter((_, i) => both.listened[i] === l) }));
  const name = `  the same, consumer in a listen() handler (called from the wake-up, no promise; ${gap})`;
  return [
    compare(name, 'p50', 'µs', percentile(listened!.total, 50), `C one-wake floor on an eventfd (epoll_wait; sender ${pacing} alike)`, against.eventfd, false),
    compare(name, 'p50', 'µs', percentile(listened!.total, 50), `C one-wake floor (epoll_wait on a socket; sender ${pacing} alike)`, against.floor, false),
    compare(name, 'p50', 'µs', percentile(listened!.total, 50), `next(), taking frames by turns of ${ALTERNATE_EVERY} with it`, percentile(next!.total, 50), false),
    compare(name, 'p99.9', 'µs', percentile(listened!.total, 99.9), `JSON over a Unix socket, a line sent on the same clock (${gap})`, percentile(against.socket, 99.9), false),
    compare(`  hop: wake-up until the listen() handler runs (claim, copy, Frame, ${gap})`, 'p50', 'µs', percentile(listened!.receive, 50), 'until next() resolves, by turns with it', percentile(next!.receive, 50), false),
  ];
}

/** A frame that takes MAKE_US to make, from its making's start to the consumer's JS: Producer.headsUp() as making starts, against none. */
async function madeRecords(n: number, gapUs: number, pacing: Pacing, gap: string): Promise<BenchRecord[]> {
  const makeUs = 30;
  const plain = await sleepingHandOff(n, gapUs, pacing, { makeUs, headsUp: false });
  const early = await sleepingHandOff(n, gapUs, pacing, { makeUs, headsUp: true });
  const name = `  the same, each frame ${makeUs} µs in the making, producer.headsUp() as it begins (making's start to JS callback, ${gap})`;
  return [
    compare(name, 'p50', 'µs', percentile(early.total, 50), 'no headsUp(), in the same run', percentile(plain.total, 50), false),
    // No frame can arrive before it is made: the row's floor.
    compare(name, 'p50', 'µs', percentile(early.total, 50), `the making alone (${makeUs} µs)`, makeUs, false),
  ];
}

/** The C ring alone, two processes spinning: one-way latency percentiles in ns. */
function cRingLatency(): Record<string, number> {
  return JSON.parse(execFileSync(cProgramBuilt('ring_bench'), ['latency', '200000'], { encoding: 'utf8' })) as Record<string, number>;
}

function cRing(): BenchRecord[] {
  const lat = cRingLatency();
  const rate = JSON.parse(execFileSync(cProgramBuilt('ring_bench'), ['rate', '2000000'], { encoding: 'utf8' })) as { recordsPerSecond: number };
  return [
    compare('C ring, one-way across processes', 'p50', 'µs', lat.p50! / 1000, 'TensorPipe shm p50 (published)', 1.7, false),
    compare('C ring, one-way across processes', 'p99', 'µs', lat.p99! / 1000, 'TensorPipe shm p50 (published)', 1.7, false),
    compare('C ring, one-way across processes', 'p50', 'µs', lat.p50! / 1000, 'iceoryx2 (published, ~0.3 µs)', 0.3, false),
    compare('C ring, records per second', 'rate', 'records/s', rate.recordsPerSecond, '1,000,000 (target)', 1e6, true),
  ];
}

async function bigTable(bytes: number): Promise<BenchRecord[]> {
  const { ours, ok } = await withRing('bench-big', { slots: 8 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = child('big', name, bytes);
    const f = await consumer.next({ timeout: 120_000 });
    const table = f.toTable();
    const result = { ours: microsSince(f.tag) / 1000, ok: table.getChild('x')!.get(4096) === 4096 };
    f.release();
    consumer.close();
    await exited(producer);
    return result;
  });
  const path = join(dir, 'big.sock');
  let theirs = 0;
  const server = createServer((s: Socket) => {
    const chunks: Buffer[] = [];
    s.on('data', (c: Buffer) => chunks.push(c));
    s.on('end', () => {
      const all = Buffer.concat(chunks);
      const nl = all.indexOf(10);
      const t = BigInt(all.subarray(0, nl).toString());
      const received = tableFromIPC(all.subarray(nl + 1));
      if (received.getChild('x')!.get(4096) === 4096) theirs = microsSince(t) / 1000;
      s.destroy();
    });
  });
  await new Promise<void>((r) => server.listen(path, r));
  await exited(child('ipc', path, bytes));
  await new Promise((r) => setTimeout(r, 100));
  server.close();
  if (!ok || !theirs) throw new Error('the 1 GiB benchmark read back wrong values');
  return [compare(`${bytes >> 20} MiB table made visible in another process`, 'latency', 'ms', ours, 'tableToIPC over a Unix socket + tableFromIPC', theirs, false)];
}

/** A throughput run: frames/s, and the CPU time each side's main thread spent per frame (µs; the consumer's with one consumer). */
type Throughput = { rate: number; producerUs: number; consumerUs: number };

async function throughput(frames: number, consumers: number, batch: boolean, producer = 'flood', tables = producer === 'flood'): Promise<Throughput> {
  const { timed, sunk } = await withRing('bench-tp', { slots: 1024 }, async (_ring, name) => {
    const sinks = Array.from({ length: consumers }, () => child('sink', name, batch ? 1 : 0, tables ? 1 : 0));
    const reports = sinks.map((c) => new Promise<{ frames: number; cpuUs: number }>((r) => c.stdout!.once('data', (d: Buffer) => r(JSON.parse(d.toString())))));
    await new Promise((r) => setTimeout(r, 1500)); // let the consumers attach before timing
    // The producer times itself, first publish to last release: its process start-up is not throughput.
    const flood = child(producer, name, frames);
    const timed = new Promise<{ seconds: number; cpuUs: number }>((r) => flood.stdout!.once('data', (d: Buffer) => r(JSON.parse(d.toString()))));
    await exited(flood);
    const result = await timed;
    for (const c of sinks) c.send('stop');
    return { timed: result, sunk: await Promise.all(reports) };
  });
  const total = sunk.reduce((a, b) => a + b.frames, 0);
  if (total !== frames + WARMUP_FRAMES) throw new Error(`throughput: ${total} of ${frames + WARMUP_FRAMES} frames consumed`);
  // Each sink counts its CPU after its first WARMUP_FRAMES frames: with one sink, exactly the timed ones.
  return { rate: frames / timed.seconds, producerUs: timed.cpuUs / frames, consumerUs: sunk[0]!.cpuUs / frames };
}

/**
 * Rounds of each publish(table) throughput case. Single runs moved by 30-50%
 * on the 16-core H100 host (where the scheduler put the producer beside a
 * polling consumer), so each case runs this often, the cases alternating, and
 * is reported by its median.
 */
const THROUGHPUT_ROUNDS = 3;

/** Each case (consumers x unbatched / batched) THROUGHPUT_ROUNDS times, alternating; keyed `${consumers}${batch}`. */
async function throughputRounds(counts: number[]): Promise<Map<string, Throughput[]>> {
  const rates = new Map<string, Throughput[]>();
  for (let round = 0; round < THROUGHPUT_ROUNDS; round++)
    for (const consumers of counts)
      for (const batch of [false, true]) {
        const key = `${consumers}${batch}`;
        rates.set(key, [...(rates.get(key) ?? []), await throughput(50_000, consumers, batch)]);
      }
  return rates;
}

/** Where a one-consumer throughput run's time went: each side's CPU per frame (the busier side bounds the rate). */
const cpuRecords = (what: string, t: Throughput): BenchRecord[] => [
  aside(`  hop: producer CPU per frame (${what})`, 'mean', 'µs', t.producerUs),
  aside(`  hop: consumer CPU per frame (${what}; polling for the next frame included)`, 'mean', 'µs', t.consumerUs),
];

/**
 * Frames/s host-child `role` sends down a Unix socket to a server here, timed
 * from the first frame after the warm-up, as gpuring's producer times itself
 * from its first publish after it. `read` hands each frame it has read to
 * `frame`, which runs the receiver's work on it.
 */
async function socketRate(file: string, role: string, frames: number, read: (s: Socket, frame: (work: () => void) => void) => void): Promise<number> {
  const path = join(dir, file);
  let received = 0;
  let started = 0;
  let done!: () => void;
  const all = new Promise<void>((r) => (done = r));
  const frame = (work: () => void) => {
    if (received === WARMUP_FRAMES) started = performance.now();
    work();
    if (++received === frames + WARMUP_FRAMES) done();
  };
  const server = createServer((s: Socket) => read(s, frame));
  await new Promise<void>((r) => server.listen(path, r));
  child(role, path, frames);
  await all;
  const seconds = (performance.now() - started) / 1000;
  server.close();
  return frames / seconds;
}

/** Frames/s of small frame descriptions as JSON lines over a Unix socket, each parsed. */
const socketThroughput = (frames: number) =>
  socketRate('stream.sock', 'stream', frames, (s, frame) => createInterface({ input: s }).on('line', (line) => frame(() => JSON.parse(line))));

/** Frames/s of nested Tables sent as Arrow IPC over a Unix socket (host-child ipc-stream), each read back with tableFromIPC. */
const ipcThroughput = (frames: number) =>
  socketRate('ipc.sock', 'ipc-stream', frames, (s, frame) => {
    let pending: Buffer = Buffer.alloc(0);
    s.on('data', (chunk: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 4 && pending.length >= 4 + pending.readUInt32LE(0)) {
        const message = pending.subarray(4, 4 + pending.readUInt32LE(0));
        frame(() => tableFromIPC(message));
        pending = pending.subarray(4 + message.length);
      }
    });
  });

try {
  const records: BenchRecord[] = [];
  if (want('ring')) {
    progress('C ring alone ...');
    records.push(...cRing());
  }
  if (want('hand-off')) {
    progress('hand-off latency, spin path ...');
    const { latencies: spin } = await gpuringHandOff(3000, 0, 10_000);
    const socket = await socketHandOff(3000, 0);
    const port = await messagePortHandOff(3000);
    records.push(...handOffRecords('spin path', spin, 'JSON over a Unix socket', socket));
    records.push(...handOffRecords('spin path', spin, 'MessagePort between worker threads', port));
    progress('hand-off latency, futex path (2 ms between frames) ...');
    // 3,000 frames, as the sleeping rows: of 500, a p99.9 is the slowest frame, which one stall anywhere decides.
    const { latencies: futex } = await gpuringHandOff(3000, 2, 0);
    const socketGap = await socketHandOff(3000, 2000);
    records.push(...handOffRecords('futex path', futex, 'JSON over a Unix socket', socketGap));
    progress('hand-off latency, consumer spinning, prepared frame ...');
    records.push(...(await spinningRecords(5000, 20)));
  }
  if (want('sleeping')) {
    progress('sleeping consumer, hop by hop, 2 ms and 100 µs between frames ...');
    // 3,000 frames: a p99.9 is then the 4th-worst of its run, not the 2nd.
    for (const [gapUs, pacing] of [[2000, 'asleep'], [100, 'asleep'], [100, 'busy']] as const)
      records.push(...(await sleepingRecords(3000, gapUs, pacing, await socketHandOff(3000, gapUs, pacing, true))));
  }
  const charts: Record<string, Chart> = {};
  if (want('throughput')) {
    progress('throughput ...');
    const baselineRate = await socketThroughput(20000);
    const series: Series[] = [{ label: 'gpuring', points: [] }, { label: 'gpuring, batched', points: [] }, { label: 'JSON lines, socket', points: [] }];
    const rates = await throughputRounds([1, 2, 4]);
    for (const consumers of [1, 2, 4])
      for (const batch of [false, true]) {
        const rate = median(rates.get(`${consumers}${batch}`)!.map((r) => r.rate));
        series[batch ? 1 : 0]!.points.push([consumers, rate]);
        if (batch) series[2]!.points.push([consumers, baselineRate]); // measured with 1 consumer
        records.push(compare(`throughput, publish(table) of 8-column frames, ${consumers} consumer${consumers > 1 ? 's' : ''} taking toTable()${batch ? ', batched' : ''} (median of ${THROUGHPUT_ROUNDS})`, 'rate', 'frames/s', rate, 'JSON lines over a Unix socket, 1 consumer', baselineRate, true));
      }
    // The round of median rate of a batched case: its rate is the case's median, and its CPU explains it.
    const medianRound = (consumers: number) => rates.get(`${consumers}true`)!.sort((a, b) => a.rate - b.rate)[THROUGHPUT_ROUNDS >> 1]!;
    const [oneBatched, fourBatched] = [medianRound(1), medianRound(4)];
    records.push(compare('throughput, publish(table), 4 batched consumers in aggregate (median)', 'rate', 'frames/s', fourBatched.rate, '1 batched consumer (same run, median; target: 4 >= 1)', oneBatched.rate, true));
    // One producer feeds both: what 4 consumers cost it per frame (polling the ring it writes, ringing sleepers) shows here.
    records.push(aside('  hop: producer CPU per frame, 4 batched consumers (the round of median rate; with 1, below)', 'mean', 'µs', fourBatched.producerUs));
    records.push(compare('throughput, publish(table) of 8-column frames, 1 consumer taking toTable(), batched', 'rate', 'frames/s', oneBatched.rate, '100,000 frames/s (target)', 1e5, true));
    records.push(...cpuRecords('publish(table), 1 consumer taking toTable(), batched', oneBatched));
    const loaned = await throughput(50_000, 1, true, 'flood-loan', true);
    records.push(compare('throughput, the same frames written into producer.loan() memory, 1 consumer taking toTable(), batched', 'rate', 'frames/s', loaned.rate, 'publish(table) of pre-built Tables (same run)', oneBatched.rate, true));
    const prepared = await throughput(200_000, 1, true, 'flood-prepared');
    records.push(compare('throughput, prepared frame, publishMany(256) to 1 consumer taking nextBatch()', 'rate', 'frames/s', prepared.rate, '1,000,000 frames/s (target)', 1e6, true));
    records.push(...cpuRecords('prepared frames, publishMany(256), 1 consumer', prepared));
    const nested = await throughput(50_000, 1, true, 'flood-nested', true);
    const nestedName = 'throughput, publish(table) of nested 16-row frames (list, fixed-size list, struct, dictionary, list of structs), 1 consumer taking toTable(), batched';
    records.push(compare(nestedName, 'rate', 'frames/s', nested.rate, 'the same Tables as Arrow IPC over a Unix socket (tableToIPC, tableFromIPC), 1 consumer', await ipcThroughput(20_000), true));
    records.push(...cpuRecords('nested frames, 1 consumer taking toTable(), batched', nested));
    charts['throughput-vs-consumers'] = { title: 'Throughput, 8-column frames, one Node producer', x: { label: 'consumer processes' }, y: { label: 'frames per second' }, series };
  }
  if (want('fan-out')) records.push(...(await fanOutRecords(child, progress)));
  if (want('table')) {
    progress('1 GiB table ...');
    records.push(...(await bigTable(1 << 30)));
  }
  const machine = `${cpus()[0]?.model ?? 'unknown CPU'}, ${cpus().length} cores, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
  report('gpuring host benchmarks', machine, 'npm run bench', only ? null : 'bench-host.md', records, json, charts);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
