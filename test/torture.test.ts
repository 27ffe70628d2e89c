// kill -9 torture: Node, Python and C producers and consumers on one ring, each
// killed with SIGKILL at a random moment of its life (attaching, publishing,
// holding a frame, sleeping: on the futex, on a doorbell socket in Node's event
// loop or in asyncio, on its doorbell word in nextSync(); writing a loan in
// place) and replaced, a few hundred times. Then everything
// left is killed, a clean consumer drains the ring, and the run must show
// (SPEC.md §10, Death):
//   - exactly once: no frame reaches two consumers. A frame claimed by a consumer
//     killed before handing it to its user is redelivered; one already handed
//     over (leased) ends with that consumer, so each killed consumer may account
//     for at most the frames it was holding (one; up to 16 for a batch consumer);
//   - nothing else lost: every frame whose publish returned was delivered;
//   - nothing invented or corrupted: every delivered frame was published (or
//     was being published when its producer died) and its columns match its tag;
//   - nothing leaked: no slot in use, no participant entry, no arena left.
// The same run on a broadcast ring (SPEC.md §5.4), half as many kills, must show
// each subscriber's frames of each producer in order with no repeat and no gap
// after the first (a subscriber with onSlow 'block' misses nothing while it
// lives; its first frame of a producer may be one published as it joined, with
// its entry's previous occupant's bit), nothing invented or corrupted, nothing
// leaked. The same again, fewer kills, with subscribers that asked producers to
// drop frames for them when they lag (onSlow 'drop-oldest', 'evict'): in order,
// no repeat, nothing invented or leaked, and no gap the subscriber was not told
// of (FRAMES_MISSED, EVICTED) before it took the frame after it. Half the
// subscribers, chosen at random, join with start 'oldest': they also take the
// frames still in the ring (a lap at most), which may have gaps between them.
// GPURING_TORTURE_KILLS sets the number of kills (default 200); GPURING_TORTURE_SEATS
// (roles, comma-separated, e.g. c-producer,c-consumer) runs only those seats;
// GPURING_TORTURE_SLOTS the ring's slots (default 64; fewer laps the ring faster).
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { finished } from 'node:stream/promises';
import test, { type ExecutionContext } from 'ava';
import { Consumer, GpuringError, type Ring, type RingInspection } from '../lib/index.js';
import { cProgram, exitOf, root, withRing } from './helpers/ring.js';

const KILLS = Number(process.env.GPURING_TORTURE_KILLS ?? 200);
const SLOTS = Number(process.env.GPURING_TORTURE_SLOTS ?? 64);
/** A quarter of the kills land during start-up (attach included); the rest a uniformly random moment within LIFETIME_MS after the process said it is ready. */
const LIFETIME_MS = 1200;
const STARTUP_KILL_MS = 1500;
/** The most frames a batch consumer takes at once (torture-child.mjs consume-batch). */
const BATCH = 16;

type Role =
  | 'node-producer' | 'node-loan-producer' | 'python-producer' | 'python-async-producer' | 'c-producer'
  | 'node-consumer' | 'node-sync-consumer' | 'node-batch-consumer' | 'node-listen-consumer' | 'python-consumer' | 'python-async-consumer' | 'c-consumer';
/** Every way each language waits: Node's event loop (a promise, or a listener) and a blocked thread, Python's futex and asyncio's doorbell socket, C's futex. */
const ROLES: Role[] = [
  'node-producer', 'node-loan-producer', 'python-producer', 'python-async-producer', 'c-producer',
  'node-consumer', 'node-sync-consumer', 'node-batch-consumer', 'node-listen-consumer', 'python-consumer', 'python-async-consumer', 'c-consumer',
];
const SEATS = (process.env.GPURING_TORTURE_SEATS?.split(',') ?? ROLES).map((seat) => {
  if (!ROLES.includes(seat as Role)) throw new Error(`GPURING_TORTURE_SEATS: unknown seat '${seat}' (one of ${ROLES.join(', ')})`);
  return seat as Role;
});

/** What producers do about a broadcast subscriber a ring behind (SPEC.md §5.4). */
type OnSlowPolicy = 'block' | 'drop-oldest' | 'evict';

interface Incarnation {
  role: Role;
  id: number;
  /** Broadcast subscribers: where it joined (SPEC.md §5.4, Subscribe). */
  start: 'newest' | 'oldest';
  log: string;
  proc: ChildProcess;
  /** The last of what it wrote to stderr: why, if it exits by itself. */
  stderr: string;
}

function start(role: Role, name: string, id: number, dir: string, onSlow: OnSlowPolicy, from: Incarnation['start']): Incarnation {
  const log = join(dir, `${role}-${id}.log`);
  const env = { ...process.env, GPURING_TORTURE_ON_SLOW: onSlow, GPURING_TORTURE_START: from };
  const python = (...args: string[]) =>
    spawn('python3', [join(root, 'interop/python/tests/children/torture.py'), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...env, PYTHONPATH: join(root, 'interop/python/src') },
    });
  const node = (...args: string[]) => spawn(process.execPath, [join(root, 'test/helpers/torture-child.mjs'), ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  const c = (...args: string[]) => spawn(cProgram('torture_child'), args, { stdio: ['ignore', 'pipe', 'pipe'], env });
  const proc =
    role === 'node-producer' ? node('produce', name, String(id), log)
    : role === 'node-loan-producer' ? node('produce-loan', name, String(id), log)
    : role === 'node-consumer' ? node('consume', name, log)
    : role === 'node-sync-consumer' ? node('consume-sync', name, log)
    : role === 'node-batch-consumer' ? node('consume-batch', name, log)
    : role === 'node-listen-consumer' ? node('consume-listen', name, log)
    : role === 'python-producer' ? python('produce', name, String(id), log)
    : role === 'python-async-producer' ? python('produce-async', name, String(id), log)
    : role === 'python-async-consumer' ? python('consume-async', name, log)
    : role === 'c-producer' ? c('produce', name, String(id), log)
    : role === 'c-consumer' ? c('consume', name, log)
    : python('consume', name, log);
  const inc = { role, id, start: from, log, proc, stderr: '' };
  proc.stderr!.on('data', (d: Buffer) => (inc.stderr = (inc.stderr + d.toString()).slice(-2000)));
  return inc;
}

/** A log's complete lines: a process killed inside a write that crosses a page of the file leaves the start of a line (a tag cut short reads as a frame never published). */
const lines = (file: string): string[] => {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(0, -1).filter(Boolean);
  } catch {
    return []; // killed before it opened its log
  }
};

/**
 * Runs the seats, killing and replacing one process at a time, until `kills`
 * kills. A process that exits by itself fails the run, once every seat has
 * stopped: no process is left writing into `dir` when the test removes it.
 */
async function torture(name: string, dir: string, kills: number, onSlow?: OnSlowPolicy): Promise<Incarnation[]> {
  const all: Incarnation[] = [];
  let nextId = 1;
  let killed = 0;
  let failure: Error | undefined;
  const seat = async (role: Role): Promise<void> => {
    while (killed < kills && !failure) {
      const from = onSlow && Math.random() < 0.5 ? 'oldest' : 'newest';
      const inc = start(role, name, nextId++, dir, onSlow ?? 'block', from);
      all.push(inc);
      const exited = exitOf(inc.proc);
      const sleep = (ms: number) => new Promise<null>((r) => setTimeout(() => r(null), ms));
      const ready = new Promise<void>((r) => createInterface({ input: inc.proc.stdout! }).once('line', () => r()));
      const killAt = Math.random() < 0.25 ? sleep(Math.random() * STARTUP_KILL_MS) : ready.then(() => sleep(Math.random() * LIFETIME_MS));
      const early = await Promise.race([exited, killAt]);
      if (early) {
        await finished(inc.proc.stderr!).catch(() => undefined); // all it said
        failure ??= new Error(`${role} ${inc.id} exited by itself (${JSON.stringify(early)}) after ${killed} kills: ${inc.stderr}`);
      }
      inc.proc.kill('SIGKILL');
      await exited;
      if (!early) killed++;
    }
  };
  await Promise.all(SEATS.map(seat));
  if (failure) throw failure;
  return all;
}

/** Tags a consumer incarnation logged (its "MISSED n" lines in `withMissed`), and the BAD ones apart. */
function logged(all: Incarnation[]): {
  consumers: Incarnation[];
  bad: string[];
  tagsOf: (c: Incarnation) => string[];
  withMissed: (c: Incarnation) => string[];
} {
  const consumers = all.filter((i) => i.role.endsWith('consumer'));
  const bad = consumers.flatMap((c) => lines(c.log).filter((line) => line.startsWith('BAD')).map((line) => `${c.role} ${c.id}: ${line}`));
  const withMissed = (c: Incarnation) => lines(c.log).filter((line) => !line.startsWith('BAD'));
  return { consumers, bad, withMissed, tagsOf: (c) => withMissed(c).filter((line) => !line.startsWith('MISSED')) };
}

/** Frames each producer incarnation's publish returned for (its log's line count). */
function publishedBy(all: Incarnation[]): Map<number, number> {
  return new Map(all.filter((i) => i.role.endsWith('producer')).map((p) => [p.id, lines(p.log).length]));
}

const split = (tag: string) => [Number(BigInt(tag) >> 32n), Number(BigInt(tag) & 0xffffffffn)] as const;

/**
 * How many times each frame was delivered, by producer and then seq: one Map
 * keyed by tag holds at most 2^24 entries, and a long run on a fast host
 * delivers more frames than that.
 */
class Deliveries {
  readonly #byProducer = new Map<number, Map<number, number>>();
  size = 0;

  count(tag: string): void {
    const [id, seq] = split(tag);
    let frames = this.#byProducer.get(id);
    if (!frames) this.#byProducer.set(id, (frames = new Map()));
    const times = frames.get(seq) ?? 0;
    frames.set(seq, times + 1);
    if (times === 0) this.size++;
  }

  has(id: number, seq: number): boolean {
    return this.#byProducer.get(id)?.has(seq) ?? false;
  }

  /** [producer, seq, times] of each frame delivered. */
  *entries(): Generator<[number, number, number]> {
    for (const [id, frames] of this.#byProducer) for (const [seq, times] of frames) yield [id, seq, times];
  }
}

/** Nothing left behind: no slot in use, no participant entry, no arena. */
function assertNothingLeft(t: ExecutionContext, ring: Ring, name: string): RingInspection {
  const state = ring.inspect();
  if (state.slots.empty !== state.slotCount) {
    // Kept for a post-mortem: copied back to /dev/shm/gpuring.NAME, `gpuring inspect NAME` reads it.
    const copy = join(tmpdir(), `gpuring-torture-${name}-${process.pid}.segment`);
    copyFileSync(`/dev/shm/gpuring.${name}`, copy);
    t.log(`segment left with slots in use: copied to ${copy}`);
  }
  t.deepEqual(state.slots, { ...state.slots, writing: 0, ready: 0, claimed: 0, leased: 0, released: 0 }, 'no slot left in use');
  t.deepEqual(state.participants, [], 'no participant entry left');
  t.deepEqual(readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${name}.`)), [], 'no arena left');
  return state;
}

/** Drains what is left with a fresh consumer; its tags. */
async function drain(name: string): Promise<string[]> {
  const consumer = Consumer.open(name);
  const tags: string[] = [];
  try {
    for (;;) {
      const frame = await consumer.next({ timeout: 3000 });
      tags.push(String(frame.tag));
      frame.release();
    }
  } catch (error) {
    if (!(error instanceof GpuringError) || error.code !== 'TIMEOUT') throw error;
  } finally {
    consumer.close();
  }
  return tags;
}

test(`kill -9 torture: ${KILLS} kills of Node, Python and C producers and consumers; exactly-once, nothing leaked`, async (t) => {
  t.timeout(15 * 60_000);
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-torture-'));
  try {
    await withRing('torture', { slots: SLOTS, participants: 32 }, async (ring, name) => {
      const all = await torture(name, dir, KILLS);
      const final = await drain(name);
      ring.sweep();

      const delivered = new Deliveries();
      const count = (tag: string) => delivered.count(tag);
      const { consumers, bad, tagsOf } = logged(all);
      for (const c of consumers) tagsOf(c).forEach(count);
      final.forEach(count);
      t.deepEqual(bad, [], 'every delivered frame holds what its producer wrote');

      const producedBy = publishedBy(all); // producer id -> frames whose publish returned
      const published = [...producedBy.values()].reduce((a, b) => a + b, 0);
      const lost: string[] = [];
      for (const [id, n] of producedBy)
        for (let seq = 0; seq < n; seq++) if (!delivered.has(id, seq)) lost.push(`producer ${id} frame ${seq}`);
      const couldHold = consumers.reduce((n, c) => n + (c.role === 'node-batch-consumer' ? BATCH : 1), 0);
      t.true(lost.length <= couldHold, `${lost.length} published frames never logged, more than the ${consumers.length} killed consumers could have held (${couldHold}): ${lost.slice(0, 10).join(', ')}`);

      const invented: string[] = [];
      const duplicated: string[] = [];
      for (const [id, seq, times] of delivered.entries()) {
        // seq == published count: the publish its producer was killed in may have completed.
        if (!producedBy.has(id) || seq > producedBy.get(id)!) invented.push(`producer ${id} frame ${seq}`);
        if (times > 1) duplicated.push(`producer ${id} frame ${seq} x${times}`);
      }
      t.deepEqual(invented, [], 'no frame delivered that was not published');
      t.deepEqual(duplicated.slice(0, 10), [], 'no frame delivered twice');

      const state = assertNothingLeft(t, ring, name);
      const byRole = SEATS.filter((r, i) => SEATS.indexOf(r) === i).map((r) => `${all.filter((i) => i.role === r).length} ${r}s`);
      t.true(published > KILLS, `frames flowed between kills (${published} published)`);
      t.log(`${all.length} processes (${byRole.join(', ')}), ${KILLS}+ kills: ${published} frames published, ${delivered.size} delivered once and none twice, ${lost.length} ended with the consumer killed holding them, ${final.length} drained at the end; sweeps repaired ${state.recovered} slots, redelivered ${state.redelivered} claimed frames`);
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

/**
 * One subscriber incarnation's log, in order: frames of each producer that go
 * backwards or repeat, or come without one published, and gaps. With 'block' no
 * gap may follow a subscriber's second frame of a producer; with a policy that
 * drops, every frame after a gap must come after the subscriber was told of at
 * least as many lost frames (MISSED lines) as its gaps hold so far. A
 * subscriber that started at the oldest frames may find gaps among and after
 * the lap it adopted: frames every other subscriber had released before it
 * joined, and a publish in flight as it joined that stayed WRITING longer than
 * the join waits for it (its producer killed there, SPEC.md §5.4 Adopting).
 */
function subscriberFaults(c: Incarnation, log: string[], producedBy: Map<number, number>, roleOf: Map<number, Role>, onSlow: OnSlowPolicy) {
  const faults: string[] = [];
  const skipped: string[] = []; // tags of frames a 'block' subscriber went past
  const last = new Map<number, [seq: number, count: number]>(); // producer id -> the last seq this subscriber got, how many
  let told = 0;
  let gaps = 0;
  let deliveries = 0;
  for (const line of log) {
    if (line.startsWith('MISSED')) {
      told += Number(line.slice('MISSED '.length));
      continue;
    }
    const [id, seq] = split(line);
    deliveries++;
    if (!producedBy.has(id) || seq > producedBy.get(id)!) faults.push(`${c.role} ${c.id}: frame ${id}:${seq} was never published`);
    const [before, count] = last.get(id) ?? [undefined, 0];
    last.set(id, [seq, count + 1]);
    if (before === undefined) continue;
    if (seq <= before) faults.push(`${c.role} ${c.id}: ${roleOf.get(id)} ${id}'s frame ${seq} after ${before}`);
    // A subscriber's first frame of a producer may be one published as it joined, carrying
    // the bit of its entry's previous occupant (SPEC.md §5.4, Subscribe): a gap may follow it.
    // One that started at the oldest frames adopted at most a lap of them, with gaps between
    // them and after them (frames released by all, or a publish killed in flight as it joined).
    if (seq <= before + 1 || count === 1 || (c.start === 'oldest' && count <= SLOTS)) continue;
    gaps += seq - before - 1;
    if (onSlow === 'block') {
      faults.push(`${c.role} ${c.id} (start '${c.start}'): ${roleOf.get(id)} ${id}'s frame ${seq} after ${before}, its frame ${count + 1} of that producer`);
      for (let gone = before + 1; gone < seq && skipped.length < 10; gone++) skipped.push(String((BigInt(id) << 32n) | BigInt(gone)));
    }
    else if (gaps > told) faults.push(`${c.role} ${c.id}: ${roleOf.get(id)} ${id}'s frame ${seq} after ${before}, ${gaps} frames skipped so far, told of ${told}`);
  }
  return { faults, deliveries, told, skipped };
}

/**
 * Which subscribers did get the frames some subscriber went past: tells a frame
 * nobody got (lost as a whole: its publish, or its slot) from shares lost one
 * subscriber at a time (its bit, or its cursor).
 */
function whoGot(tags: string[], consumers: Incarnation[], tagsOf: (c: Incarnation) => string[]): string[] {
  return [...new Set(tags)].map((tag) => {
    const [id, seq] = split(tag);
    const got = consumers.filter((c) => tagsOf(c).includes(tag)).map((c) => `${c.role} ${c.id} (start '${c.start}')`);
    return `frame ${id}:${seq} reached ${got.length} subscriber(s)${got.length ? `: ${got.join(', ')}` : ''}`;
  });
}

for (const onSlow of ['block', 'drop-oldest', 'evict'] as const) {
  const kills = Math.ceil(onSlow === 'block' ? KILLS / 2 : KILLS / 4);
  const promise = onSlow === 'block' ? 'without gap after the first' : `without a gap they were not told of (onSlow '${onSlow}')`;
  test(`kill -9 torture on a broadcast ring: ${kills} kills; each subscriber gets each producer's frames in order without repeat, and ${promise}, nothing leaked`, async (t) => {
    t.timeout(15 * 60_000);
    const dir = mkdtempSync(join(tmpdir(), 'gpuring-torture-'));
    try {
      await withRing(`torture-bc-${onSlow}`, { slots: SLOTS, participants: 32, delivery: 'all' }, async (ring, name) => {
        const all = await torture(name, dir, kills, onSlow);
        await drain(name);
        ring.sweep();
        const { consumers, bad, withMissed, tagsOf } = logged(all);
        t.deepEqual(bad, [], 'every delivered frame holds what its producer wrote');
        const producedBy = publishedBy(all);
        const roleOf = new Map(all.map((i) => [i.id, i.role]));
        const each = consumers.map((c) => subscriberFaults(c, withMissed(c), producedBy, roleOf, onSlow));
        const faults = each.flatMap((e) => e.faults);
        const deliveries = each.reduce((n, e) => n + e.deliveries, 0);
        const told = each.reduce((n, e) => n + e.told, 0);
        const skipped = each.flatMap((e) => e.skipped);
        if (skipped.length) t.log(whoGot(skipped, consumers, tagsOf).join('\n'));
        t.deepEqual(faults.slice(0, 10), [], `in order, no repeat, nothing invented, ${promise}`);
        const state = assertNothingLeft(t, ring, name);
        const published = [...producedBy.values()].reduce((a, b) => a + b, 0);
        t.true(published > kills && deliveries > 0, `frames flowed (${published} published, ${deliveries} deliveries)`);
        // C producers outrun Python subscribers many times over: a run that dropped nothing did not test the policy.
        if (onSlow !== 'block') t.true(told > 0, 'frames were dropped for lagging subscribers, and they were told');
        const oldest = consumers.filter((c) => c.start === 'oldest').length;
        t.log(`${all.length} processes, ${kills}+ kills: ${published} frames published, ${deliveries} deliveries to ${consumers.length} subscribers (${oldest} from the oldest frame), each in order, ${promise}; ${told} frames dropped for subscribers that lagged; sweeps repaired ${state.recovered} slots`);
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
