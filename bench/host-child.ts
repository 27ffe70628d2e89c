/**
 * The other process of the host benchmarks (bench/host.ts).
 *   gpuring NAME N GAP_MS     publishes N small frames one at a time, each tagged with its publish
 *                             time (CLOCK_MONOTONIC), waiting for its release (and GAP_MS) before the next
 *   prepared NAME N GAP_US PACING [MAKE_US [heads-up]]  publishes a prepared frame N times, GAP_US apart,
 *                             each tagged with the time publish was called; between frames the producer
 *                             is `asleep` (on a timer, or in a futex wait below 1 ms) or `busy` (spinning,
 *                             as one computing its next frame is); prints the times each publish
 *                             returned as one JSON line. With MAKE_US, each frame takes that long to
 *                             "make" (spun) before its publish, and its tag is when making began;
 *                             with `heads-up`, producer.headsUp() is called as it begins
 *   flood-prepared NAME N     publishes a prepared frame N times, 256 per publishMany(), as fast as
 *                             backpressure allows; prints {"seconds", "cpuUs"} from first publish to last release,
 *                             with its main thread's CPU time in µs (after WARMUP_FRAMES more, untimed, each released)
 *   socket PATH N GAP_US PACING  sends the same frame's description as a JSON line (serialized per frame,
 *                             as each frame's differs), waits for an ack, then GAP_US (paced as prepared)
 *   socket-paced PATH N GAP_US PACING  as socket, but sends a line every GAP_US whether or not the last
 *                             was read, as prepared publishes: the baseline of its sleeping rows
 *   big NAME BYTES            writes a BYTES float64 column into arena memory, then publishes it once
 *   ipc PATH BYTES            builds the same table, sends it with tableToIPC over a Unix socket
 *   flood-loan NAME N         as flood, each frame written in place into producer.loan() memory
 *   flood-nested NAME N       as flood, each frame the nested 5-column Table (frames.ts nestedFrame())
 *   ipc-stream PATH N         sends N + WARMUP_FRAMES nested Tables (nestedFrame()) as Arrow IPC streams
 *                             (tableToIPC per frame), each after its byte length (u32), as fast as the socket takes them
 *   flood NAME N              publishes N small frames as fast as backpressure allows, then drains;
 *                             prints {"seconds", "cpuUs"} from first publish to last release, with
 *                             its main thread's CPU time in µs (after WARMUP_FRAMES more, untimed, each released)
 *   sink NAME BATCH TABLE     consumes until told 'stop' (IPC); with BATCH=1 takes every frame already
 *                             waiting after each wake-up (nextBatch); with TABLE=1 builds each frame's
 *                             Table (toTable) before releasing it; prints {"frames", "cpuUs"}: the count, and
 *                             its main thread's CPU time (µs) after its first WARMUP_FRAMES frames (with
 *                             one sink, the timed frames)
 *   stream PATH N             sends N + WARMUP_FRAMES small frame descriptions as JSON lines (serialized
 *                             per frame), as fast as the socket takes them
 *   fan-flood RINGS N         (fan-out) RINGS is a comma-separated list of rings: publishes a prepared
 *                             frame N times into each, 256 per publishMany() per ring in turn; prints
 *                             {"seconds"} from first publish to last release, after WARMUP_FRAMES as flood does
 *   fan-paced RINGS N GAP_US  (fan-out) publishes a prepared frame N times into each ring, GAP_US apart,
 *                             each tagged with the time its first publish was called
 *   latency-sink NAME N       a consumer asleep in next(): prints "ready", then, after N frames, the
 *                             microseconds from each frame's tag to its next() resolving, as JSON
 */
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { Float64, makeData, makeVector, Table, tableToIPC } from 'apache-arrow';
import { Producer } from '../dist/index.js';
import { emptyFrameDescription, nestedFrame, smallFrame, smallFrameDescription, toJson, WARMUP_FRAMES } from './frames.js';

const [role, target, count, gap, pacing, makeUs, headsUp] = process.argv.slice(2);
const n = Number(count);
const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function gpuring(): Promise<void> {
  const producer = Producer.open(target!);
  const table = smallFrame();
  for (let i = 0; i < n; i++) {
    await producer.publish(table, { tag: process.hrtime.bigint() });
    await producer.drain();
    if (Number(gap)) await pause(Number(gap));
  }
  producer.close();
}

/** Blocks this thread for `us` µs in a futex wait, as the C floor's nanosleep() does: below a timer's 1 ms. */
const sleepFor = (us: number) => Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, us / 1000);

const spinFor = (us: number) => {
  const until = process.hrtime.bigint() + BigInt(Math.round(us * 1000));
  while (process.hrtime.bigint() < until);
};

/** The time between frames, `gap` µs: spun (`busy`), or slept in a timer from 1 ms, below it in a futex wait. */
async function paceFor(us: number): Promise<void> {
  if (pacing === 'busy') spinFor(us);
  else if (us >= 1000) await pause(us / 1000);
  else sleepFor(us);
}

async function prepared(): Promise<void> {
  const producer = Producer.open(target!);
  const frame = producer.prepare(emptyFrameDescription());
  // Each publish call's µs, kept as numbers: BigInt stamps kept alive would lengthen this process's scavenges.
  const publishUs = new Float64Array(n);
  const making = Number(makeUs ?? 0);
  for (let i = 0; i < n; i++) {
    await paceFor(Number(gap));
    const tag = process.hrtime.bigint();
    if (headsUp === 'heads-up') producer.headsUp();
    if (making) spinFor(making);
    await frame.publish({ tag });
    publishUs[i] = Number(process.hrtime.bigint() - tag) / 1000;
  }
  await producer.drain();
  producer.close();
  process.stdout.write(`${JSON.stringify(Array.from(publishUs))}\n`);
}

/**
 * µs this process's main thread has run on a CPU (/proc schedstat): not
 * process.cpuUsage(), which adds the compiler and GC threads' time.
 */
const mainThreadCpuUs = () => Number(readFileSync(`/proc/self/task/${process.pid}/schedstat`, 'utf8').split(' ')[0]) / 1000;

/**
 * Publishes WARMUP_FRAMES and waits for their release, then prints {"seconds", "cpuUs"} from just
 * before the first publish of `n` until every frame was released: the wall time, and this process's CPU time.
 */
async function timed(producer: Producer, publishAll: (n: number) => Promise<void>): Promise<void> {
  await publishAll(WARMUP_FRAMES);
  await producer.drain();
  const started = performance.now();
  const cpu = mainThreadCpuUs();
  await publishAll(n);
  await producer.drain();
  process.stdout.write(`${JSON.stringify({ seconds: (performance.now() - started) / 1000, cpuUs: mainThreadCpuUs() - cpu })}\n`);
  producer.close();
}

async function floodPrepared(): Promise<void> {
  const producer = Producer.open(target!);
  const frame = producer.prepare(emptyFrameDescription());
  await timed(producer, async (count) => {
    for (let i = 0; i < count; i += 256) await frame.publishMany(Math.min(256, count - i));
  });
}

/** One producer per ring of the comma-separated `target`, each with a prepared frame. */
function fanProducers() {
  const producers = target!.split(',').map((ring) => Producer.open(ring));
  return { producers, frames: producers.map((p) => p.prepare(emptyFrameDescription())) };
}

async function fanFlood(): Promise<void> {
  const { producers, frames } = fanProducers();
  const publishAll = async (count: number) => {
    for (let i = 0; i < count; i += 256) for (const f of frames) await f.publishMany(Math.min(256, count - i));
  };
  await publishAll(WARMUP_FRAMES);
  await Promise.all(producers.map((p) => p.drain()));
  const started = performance.now();
  await publishAll(n);
  await Promise.all(producers.map((p) => p.drain()));
  process.stdout.write(`${JSON.stringify({ seconds: (performance.now() - started) / 1000 })}\n`);
  for (const p of producers) p.close();
}

async function fanPaced(): Promise<void> {
  const { producers, frames } = fanProducers();
  for (let i = 0; i < n; i++) {
    if (Number(gap) >= 1000) await pause(Number(gap) / 1000);
    else spinFor(Number(gap));
    const tag = process.hrtime.bigint();
    for (const f of frames) await f.publish({ tag });
  }
  await Promise.all(producers.map((p) => p.drain()));
  for (const p of producers) p.close();
}

async function latencySink(): Promise<void> {
  const { Consumer } = await import('../dist/index.js');
  const consumer = Consumer.open(target!);
  process.stdout.write('ready\n');
  const latencies: number[] = [];
  for (let i = 0; i < n; i++) {
    const f = await consumer.next({ timeout: 30_000 });
    latencies.push(Number(process.hrtime.bigint() - f.tag) / 1000);
    f.release();
  }
  consumer.close();
  process.stdout.write(`${JSON.stringify(latencies)}\n`);
}

/**
 * The frame's description as JSON lines, one every GAP_US (paced as prepared).
 * `answered` (role socket): each line waits for the reader's answer before the
 * pause and the next. Otherwise (socket-paced) the lines keep prepared()'s
 * clock: a reader held up (a garbage collection) then finds every line sent
 * meanwhile waiting, each timed from its own send, as a gpuring consumer held
 * up finds the frames published meanwhile; waiting for an answer would let a
 * pause delay one line only.
 */
async function socketLines(answered: boolean): Promise<void> {
  const s = connect(target!);
  await new Promise((r) => s.once('connect', r));
  const acks = answered ? createInterface({ input: s })[Symbol.asyncIterator]() : undefined;
  const frame = smallFrameDescription();
  for (let i = 0; i < n; i++) {
    if (Number(gap)) await paceFor(Number(gap));
    s.write(`${toJson({ t: process.hrtime.bigint(), frame })}\n`);
    await acks?.next();
  }
  s.end();
}

function bigColumn(values: Float64Array): Table {
  for (let i = 0; i < values.length; i += 4096) values[i] = i;
  return new Table({ x: makeVector(makeData({ type: new Float64(), length: values.length, nullCount: 0, data: values })) });
}

async function big(): Promise<void> {
  const producer = Producer.open(target!);
  const bytes = Number(count);
  const a = producer.allocate(bytes);
  const table = bigColumn(new Float64Array(a.bytes.buffer, a.bytes.byteOffset, bytes / 8));
  await producer.publish(table, { tag: process.hrtime.bigint() });
  await producer.drain();
  producer.close();
}

async function ipc(): Promise<void> {
  const table = bigColumn(new Float64Array(Number(count) / 8));
  const s = connect(target!);
  s.write(`${process.hrtime.bigint()}\n`);
  s.end(tableToIPC(table));
  await new Promise((r) => s.on('close', r));
}

/** publish() of `table` N times as fast as backpressure allows, timed (see timed()). */
async function floodWith(table: Table): Promise<void> {
  const producer = Producer.open(target!);
  await timed(producer, async (count) => {
    for (let i = 0; i < count; i++) await producer.publish(table);
  });
}

/** The nested frames as Arrow IPC down a socket: what Node processes exchange Arrow tables with otherwise. */
async function ipcStream(): Promise<void> {
  const s = connect(target!);
  const table = nestedFrame();
  const length = new Uint32Array(1);
  for (let i = 0; i < n + WARMUP_FRAMES; i++) {
    const bytes = tableToIPC(table);
    length[0] = bytes.length;
    s.write(new Uint8Array(length.buffer.slice(0)));
    if (!s.write(bytes)) await new Promise((r) => s.once('drain', r));
  }
  s.end();
  await new Promise((r) => s.on('close', r));
}

/** The same 8-column frames as flood(), each written in place into a loan of arena memory (no Table, no copy). */
async function floodLoan(): Promise<void> {
  const producer = Producer.open(target!);
  const schema = smallFrame().schema;
  await timed(producer, async (count) => {
    for (let i = 0; i < count; i++) {
      const loan = producer.loan(schema, 1);
      loan.columns.forEach((column, c) => ((column.values as Int32Array)[0] = c));
      await loan.publish();
    }
  });
}

async function sink(): Promise<void> {
  const { Consumer } = await import('../dist/index.js');
  const consumer = Consumer.open(target!);
  const batch = Number(count) === 1;
  const tables = Number(gap) === 1;
  let frames = 0;
  let cpu = 0; // main-thread CPU when it had taken WARMUP_FRAMES (the producer drains them before it times)
  process.on('message', () => consumer.close());
  try {
    for (;;) {
      const got = batch ? await consumer.nextBatch() : [await consumer.next()];
      for (const f of got) (tables && f.toTable(), f.release());
      frames += got.length;
      if (frames === WARMUP_FRAMES) cpu = mainThreadCpuUs();
    }
  } catch (error) {
    if ((error as { code?: string }).code !== 'CLOSED') throw error;
  }
  process.stdout.write(`${JSON.stringify({ frames, cpuUs: frames > WARMUP_FRAMES ? mainThreadCpuUs() - cpu : 0 })}\n`);
  process.disconnect?.();
}

async function stream(): Promise<void> {
  const s = connect(target!);
  const frame = smallFrameDescription();
  for (let i = 0; i < n + WARMUP_FRAMES; i++) if (!s.write(`${toJson(frame)}\n`)) await new Promise((r) => s.once('drain', r));
  s.end();
  await new Promise((r) => s.on('close', r));
}

const roles: Record<string, () => Promise<void>> = { gpuring, prepared, 'flood-prepared': floodPrepared, 'flood-loan': floodLoan, socket: () => socketLines(true), 'socket-paced': () => socketLines(false), big, ipc, flood: () => floodWith(smallFrame()), 'flood-nested': () => floodWith(nestedFrame()), 'ipc-stream': ipcStream, sink, stream, 'fan-flood': fanFlood, 'fan-paced': fanPaced, 'latency-sink': latencySink };
const run = roles[role ?? ''];
if (!run) throw new Error(`host-child: no role ${String(role)} (see the comment at the top)`);
await run();
