/**
 * Entry point of the child processes tests spawn. Each role prints JSON lines
 * on stdout and exits with 0 when it did what it was told.
 *   publish-all-types NAME ROWS   publishes the every-type table, a slice of it at offset 3 and a zero-row table
 *   publish-wide NAME COLUMNS     publishes a table of COLUMNS columns
 *   stress-produce NAME ID FRAMES publishes FRAMES small frames tagged ID, drains, exits
 *   publish-to-sleeper NAME FRAMES [fail-first] publishes FRAMES small frames, each only once a consumer sleeps
 *                                 waiting for data; with fail-first, each after a publishFrame() that fails (INVALID_ARGUMENT)
 *   stress-consume NAME [SWEEP_MS] consumes and checks frames until told 'stop' (IPC), reports what it saw;
 *                                 with SWEEP_MS, its sweep tick (so a large one leaves only rings to wake it)
 *   heads-up-then-publish NAME FRAMES DELAY_MS for each frame, once a consumer sleeps: headsUp(), DELAY_MS of
 *                                 making (busy under 1 ms, a timer beyond), its publish; reports what each headsUp() returned
 *   take-release NAME COUNT       takes and releases COUNT frames, then exits
 *   take-values NAME COUNT SWEEP_MS takes COUNT frames (sweep tick SWEEP_MS, so a large one leaves only rings
 *                                 to wake it), reports each one's first value of column i
 *   release-then-idle NAME COUNT  takes COUNT frames, releases them all in one job, reports, and then
 *                                 neither takes nor releases anything until killed
 *   hold NAME COUNT               takes COUNT frames, never releases them, reports their tags, waits to be killed
 *   forget-to-close NAME          attaches as producer and consumer, publishes, takes a frame and just returns
 *   leak-frame NAME               takes a frame, drops it without release(), collects garbage until the
 *                                 consumer has ended its lease for it, reports, waits to be killed
 *   subscribe NAME FRAMES         subscribes to a broadcast ring, says it is ready, takes FRAMES frames in
 *                                 batches, reports how many carried tags 0, 1, 2, ... in order
 *   subscribe-idle NAME           subscribes to a broadcast ring, says it is ready, takes nothing, waits to be killed
 *   release-listener NAME MODE FRAMES publishes FRAMES small frames (10 s timeout each) through a 4-slot ring
 *                                 with a 'release' listener that, with MODE throw, throws at the first release
 *                                 (caught by an uncaughtException handler); with uncaught, the same with no
 *                                 handler (an uncaughtExceptionMonitor says what it saw); with close, closes the
 *                                 producer at the second release. Reports publishes, releases, the errors
 *                                 seen (uncaught) and the code the publish failed with, if one did
 *   listen NAME FRAMES MODE       takes FRAMES frames in a listen() handler, checking each, then stops the
 *                                 listener (the consumer left open) and reports their seq numbers in order and
 *                                 the uncaught errors seen; with MODE throw the handler throws at each fifth frame
 *                                 (after releasing it; an uncaughtException handler counts them). Exits by itself
 *   listen-idle NAME              listens, says it is ready, and is sent no frame: the listener alone keeps it alive
 *   create NAME SLOTS             says it goes, creates ring NAME with SLOTS slots and 1024 entries (a segment
 *                                 large enough to take a few ms), says it made it, waits to be killed
 *   subscribe-slow NAME POLICY MS subscribes with onSlow POLICY, says it is ready, and for MS ms takes frames,
 *                                 holding each a random 0-500 µs (busy) before checking that its column v
 *                                 still holds its tag and releasing it, then busy another 0-500 µs; reports
 *                                 frames, losses by code, bad contents and failed releases
 */
import v8 from 'node:v8';
import { runInNewContext } from 'node:vm';
import { makeData, makeVector, Table, Utf8 } from 'apache-arrow';
import { Consumer, type Frame, type GpuringError, Producer, Ring } from '../../lib/index.js';
import { allTypesTable, wideTable } from './all-types.js';
import { describeBatch } from '../../lib/arrow/table-writer.js';
import { hostBuffer } from '../../lib/codec/description.js';

const [role, name, ...args] = process.argv.slice(2);
v8.setFlagsFromString('--expose-gc');
let leakWarned = false;
process.on('warning', (w) => (leakWarned ||= (w as Error & { code?: string }).code === 'GPURING_FRAME_LEAKED'));
const say = (value: unknown) => process.stdout.write(`${JSON.stringify(value)}\n`);

const checkText = (producer: number, seq: number) => `${producer}:${seq}:${(seq * 2654435761) >>> 0}`;

/** A frame whose host buffer lies in no allocation of the producer: publishFrame() rejects it (INVALID_ARGUMENT). */
const strayHostFrame = describeBatch(new Table({ i: makeVector(Int32Array.from([1])) }), { place: (bytes) => hostBuffer('gpuring.nowhere.0', 0, bytes.byteLength) });

/** One row: producer id, sequence number, and a string derived from both (built without builders: cheap). */
function stressFrame(producer: number, seq: number): Table {
  const text = new TextEncoder().encode(checkText(producer, seq));
  return new Table({
    producer: makeVector(Int32Array.of(producer)),
    seq: makeVector(Int32Array.of(seq)),
    check: makeVector(makeData({ type: new Utf8(), length: 1, nullCount: 0, valueOffsets: Int32Array.of(0, text.length), data: text })),
  });
}

async function publishAll(tables: Table[]): Promise<void> {
  const producer = Producer.open(name!);
  for (const [i, t] of tables.entries()) await producer.publish(t, { tag: BigInt(i) });
  say({ published: tables.length });
  await producer.drain();
  producer.close();
}

/** A stress frame's producer and seq, and whether its check column matches them. */
function readStress(frame: Frame): { p: number; s: number; ok: boolean } {
  const t = frame.toTable();
  const p = t.getChild('producer')!.get(0) as number;
  const s = t.getChild('seq')!.get(0) as number;
  return { p, s, ok: t.getChild('check')!.get(0) === checkText(p, s) };
}

async function stressConsume(): Promise<void> {
  const consumer = Consumer.open(name!, args[0] ? { sweepInterval: Number(args[0]) } : {});
  const seen: number[] = [];
  let bad = 0;
  process.on('message', () => consumer.close());
  for await (const frame of consumer) {
    const { p, s, ok } = readStress(frame);
    if (!ok) bad++;
    seen.push(p * 1_000_000 + s);
    frame.release();
  }
  say({ seen, bad });
  process.disconnect?.();
}

function listen(frames: number, mode: string): void {
  const consumer = Consumer.open(name!);
  const uncaught: string[] = [];
  process.on('uncaughtException', (e) => uncaught.push(e.message));
  const seen: number[] = [];
  let bad = 0;
  const listener = consumer.listen((frame) => {
    const { s, ok } = readStress(frame);
    if (!ok) bad++;
    seen.push(s);
    frame.release();
    if (seen.length === frames) {
      listener.stop();
      setImmediate(() => say({ seen, bad, uncaught }));
    }
    if (mode === 'throw' && seen.length % 5 === 0) throw new Error(`handler threw at frame ${seen.length}`);
  });
}

async function publishWithListener(mode: string, frames: number): Promise<void> {
  const producer = Producer.open(name!);
  const uncaught: string[] = [];
  if (mode === 'throw') process.on('uncaughtException', (e) => uncaught.push(e.message));
  if (mode === 'uncaught') process.on('uncaughtExceptionMonitor', (e) => say({ monitor: e.message }));
  let published = 0, released = 0, failed: string | undefined;
  producer.on('release', () => {
    released++;
    if (mode !== 'close' && released === 1) throw new Error('the release listener threw');
    if (mode === 'close' && released === 2) producer.close();
  });
  try {
    for (; published < frames; published++) await producer.publish(stressFrame(0, published), { timeout: 10_000 });
    await producer.drain({ timeout: 10_000 });
  } catch (e) {
    failed = (e as GpuringError).code;
  }
  say({ published, released, uncaught, failed });
  producer.close();
}

async function main(): Promise<void> {
  switch (role) {
    case 'publish-all-types': {
      const t = allTypesTable(Number(args[0]));
      return publishAll([t, t.slice(3, t.numRows - 2), t.slice(0, 0)]);
    }
    case 'publish-wide':
      return publishAll([wideTable(Number(args[0]), 4)]);
    case 'stress-produce': {
      const producer = Producer.open(name!);
      const id = Number(args[0]);
      for (let i = 0; i < Number(args[1]); i++) await producer.publish(stressFrame(id, i));
      await producer.drain();
      producer.close();
      say({ done: true });
      return;
    }
    case 'publish-to-sleeper': {
      const ring = Ring.open(name!);
      const producer = Producer.open(name!);
      for (let i = 0; i < Number(args[0]); i++) {
        while (ring.inspect().doorbells.data === 0) await new Promise((r) => setTimeout(r, 1));
        // A call that rang its heads-up and then failed: the publish after it must still reach a sleeper.
        if (args[1] === 'fail-first') await producer.publishFrame(strayHostFrame).catch(() => undefined);
        await producer.publish(stressFrame(0, i));
      }
      await producer.drain();
      producer.close();
      ring.close();
      return;
    }
    case 'heads-up-then-publish': {
      // For each frame: once a consumer sleeps, headsUp(), then `delay` ms of
      // "making the frame" (a busy wait under 1 ms, so the publish passes the
      // heads-up on; a timer beyond, so it rings afresh), then its publish.
      const ring = Ring.open(name!);
      const producer = Producer.open(name!);
      const delayMs = Number(args[1]);
      const reached: boolean[] = [];
      for (let i = 0; i < Number(args[0]); i++) {
        while (ring.inspect().doorbells.data === 0) await new Promise((r) => setTimeout(r, 1));
        reached.push(producer.headsUp());
        if (delayMs >= 1) await new Promise((r) => setTimeout(r, delayMs));
        else for (const until = performance.now() + delayMs; performance.now() < until;);
        await producer.publish(stressFrame(0, i));
      }
      await producer.drain();
      say({ reached });
      producer.close();
      ring.close();
      return;
    }
    case 'stress-consume':
      return stressConsume();
    case 'take-release': {
      const consumer = Consumer.open(name!);
      for (let i = 0; i < Number(args[0]); i++) (await consumer.next({ timeout: 30_000 })).release();
      consumer.close();
      return;
    }
    case 'take-values': {
      const consumer = Consumer.open(name!, { sweepInterval: Number(args[1]) });
      const values: unknown[] = [];
      for (let i = 0; i < Number(args[0]); i++) {
        const f = await consumer.next({ timeout: 60_000 });
        values.push(f.toTable().getChild('i')!.get(0));
        f.release();
      }
      say({ values });
      consumer.close();
      return;
    }
    case 'release-then-idle': {
      const consumer = Consumer.open(name!);
      const taken: Frame[] = [];
      while (taken.length < Number(args[0])) taken.push(...(await consumer.nextBatch({ max: Number(args[0]) - taken.length, timeout: 30_000 })));
      for (const f of taken) f.release();
      say({ released: taken.length });
      setInterval(() => consumer.closed, 1000);
      return;
    }
    case 'hold': {
      const consumer = Consumer.open(name!);
      const held: Frame[] = []; // kept reachable: a collected frame would have its lease ended for it
      for (let i = 0; i < Number(args[0]); i++) held.push(await consumer.next());
      say({ tags: held.map((f) => String(f.tag)), index: consumer.index });
      setInterval(() => held.length, 1000);
      return;
    }
    case 'leak-frame': {
      const consumer = Consumer.open(name!);
      const gc = runInNewContext('gc') as () => void; // exposed by v8.setFlagsFromString below
      await (async () => void (await consumer.next()))(); // the frame is dropped here, unreleased
      for (let i = 0; i < 200 && !leakWarned; i++) (gc(), await new Promise((r) => setTimeout(r, 10)));
      say({ warned: leakWarned });
      setInterval(() => {}, 1000);
      return;
    }
    case 'forget-to-close': {
      const producer = Producer.open(name!);
      const consumer = Consumer.open(name!);
      await producer.publish(stressFrame(0, 0));
      await consumer.next({ timeout: 5000 });
      say({ ok: true });
      return;
    }
    case 'subscribe': {
      const consumer = Consumer.open(name!);
      say({ ready: true, index: consumer.index });
      let inOrder = 0;
      while (inOrder < Number(args[0])) {
        const batch = await consumer.nextBatch({ max: 512, timeout: 30_000 });
        for (const f of batch) {
          if (f.tag !== BigInt(inOrder)) break;
          inOrder++;
          f.release();
        }
        if (batch.some((f) => !f.released)) break;
      }
      say({ inOrder });
      consumer.close();
      return;
    }
    case 'subscribe-slow': {
      const consumer = Consumer.open(name!, { onSlow: args[0] as 'evict' | 'drop-oldest' });
      say({ ready: true });
      const until = performance.now() + Number(args[1]);
      const seen = { frames: 0, evicted: 0, framesMissed: 0, missed: 0, bad: 0, failedReleases: 0 };
      while (performance.now() < until) {
        let f: Frame;
        try {
          f = await consumer.next({ timeout: 50 });
        } catch (error) {
          const e = error as GpuringError;
          if (e.code === 'EVICTED') seen.evicted++;
          else if (e.code === 'FRAMES_MISSED') seen.framesMissed++;
          else if (e.code !== 'TIMEOUT') throw error;
          seen.missed += e.missed ?? 0;
          continue;
        }
        const hold = performance.now() + Math.random() * 0.5;
        while (performance.now() < hold);
        if (BigInt(f.toTable().getChild('v')!.get(0) as number) !== f.tag) seen.bad++; // released under it and reused?
        try {
          f.release();
        } catch {
          seen.failedReleases++;
        }
        seen.frames++;
        // Busy between frames too: a subscriber that takes its next frame the
        // moment it releases one keeps a waiting producer behind it (its
        // release is the space the producer waits for), and on a machine whose
        // wake-ups are slow it would never fall behind at all.
        const gap = performance.now() + Math.random() * 0.5;
        while (performance.now() < gap);
      }
      consumer.close();
      say(seen);
      return;
    }
    case 'create': {
      try {
        Ring.open(`${name!}-none`); // loads the addon first, so that the kills land in the create itself
      } catch {}
      say({ go: true });
      Ring.create(name!, { slots: Number(args[0]), participants: 1024 }).close();
      say({ made: true });
      setInterval(() => {}, 1000);
      return;
    }
    case 'subscribe-idle': {
      const consumer = Consumer.open(name!);
      say({ ready: true, index: consumer.index });
      setInterval(() => consumer.index, 1000);
      return;
    }
    case 'listen':
      return listen(Number(args[0]), args[1]!);
    case 'listen-idle': {
      const consumer = Consumer.open(name!);
      consumer.listen((frame) => frame.release());
      say({ ready: true, index: consumer.index });
      return;
    }
    case 'release-listener':
      return publishWithListener(args[0]!, Number(args[1]));
    default:
      throw new Error(`unknown role ${role}`);
  }
}

await main();
