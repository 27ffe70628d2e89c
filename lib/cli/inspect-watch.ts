/**
 * `gpuring inspect NAME --watch`: a live view of a ring, one per interval.
 * Rates come from the participants' counters between two views; a lease's age
 * is how long this watcher has seen that frame held (the ring records no claim
 * time), so it reads "at least" and starts at 0 for leases older than the watch.
 */
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import type { ParticipantInfo } from '../native.js';
import type { RingInspection } from '../native.js';
import { segmentPath } from '../options.js';
import { Ring } from '../ring.js';
import { table, type Output } from './output.js';

export interface WatchParticipant {
  index: number;
  pid: number;
  roles: string[];
  state: string;
  alive: boolean;
  asleep: string[];
  /** Frames held (claimed or leased) now, and how long the oldest of them has been seen held. */
  leases: number;
  oldestLeaseMs: number | null;
  /** Frames per second since the previous view (null in the first). */
  rates: { published: number; taken: number; released: number } | null;
}

export interface WatchView {
  name: string;
  unixMs: number;
  slotCount: number;
  slots: RingInspection['slots'];
  /** Milliseconds since the previous view, over which the rates were measured (null in the first). */
  intervalMs: number | null;
  /** All participants together, frames per second (null in the first view). */
  rates: { published: number; taken: number; released: number } | null;
  participants: WatchParticipant[];
  /** The slot every producer waits for, when the ring is full up to it. */
  blockedBy: (NonNullable<RingInspection['oldest']> & { pid: number | null }) | null;
}

type Counters = Pick<ParticipantInfo, 'published' | 'leased' | 'released'>;

/** Turns successive inspections into views; remembers counters and when each lease was first seen. */
export class RingWatcher {
  #previous: { at: number; counters: Map<string, Counters> } | null = null;
  #leaseSeen = new Map<string, number>();

  view(info: RingInspection, at: number): WatchView {
    const seconds = this.#previous ? (at - this.#previous.at) / 1000 : 0;
    const counters = new Map(info.participants.map((p) => [`${p.index}.${p.generation}`, p as Counters]));
    const leaseAge = this.#leaseAges(info, at);
    const participants = info.participants.map((p): WatchParticipant => {
      const before = this.#previous?.counters.get(`${p.index}.${p.generation}`) ?? { published: 0, leased: 0, released: 0 };
      return {
        index: p.index, pid: p.pid, roles: p.roles, state: p.state, alive: p.alive, asleep: p.asleep, leases: p.leases,
        oldestLeaseMs: leaseAge.get(p.index) ?? null,
        rates: this.#previous ? rate(before, p, seconds) : null,
      };
    });
    const rates = this.#previous ? sumRates(participants) : null;
    this.#previous = { at, counters };
    const blocking = info.oldest?.blocksProducers ? info.oldest : null;
    const holder = blocking && info.participants.find((p) => p.index === blocking.participant);
    return {
      name: info.name, unixMs: Date.now(), slotCount: info.slotCount, slots: info.slots, intervalMs: seconds ? seconds * 1000 : null, rates, participants,
      blockedBy: blocking ? { ...blocking, pid: holder?.pid ?? null } : null,
    };
  }

  /** Per participant, the age of the oldest frame it holds, in ms since this watcher first saw it held. */
  #leaseAges(info: RingInspection, at: number): Map<number, number> {
    const seen = new Map<string, number>();
    const ages = new Map<number, number>();
    for (const s of info.heldSlots) {
      const key = `${s.slot}:${s.position}:${s.participant}`;
      const since = this.#leaseSeen.get(key) ?? at;
      seen.set(key, since);
      if (s.participant !== null) ages.set(s.participant, Math.max(ages.get(s.participant) ?? 0, at - since));
    }
    this.#leaseSeen = seen;
    return ages;
  }
}

function rate(before: Counters, now: Counters, seconds: number) {
  const per = (a: number, b: number) => (seconds > 0 ? Math.max(0, b - a) / seconds : 0);
  return { published: per(before.published, now.published), taken: per(before.leased, now.leased), released: per(before.released, now.released) };
}

function sumRates(participants: WatchParticipant[]) {
  const total = { published: 0, taken: 0, released: 0 };
  for (const p of participants) for (const k of ['published', 'taken', 'released'] as const) total[k] += p.rates?.[k] ?? 0;
  return total;
}

const perSecond = (n: number | undefined) => (n === undefined ? '-' : Math.round(n).toLocaleString('en-US'));
const age = (ms: number | null) => (ms === null ? '-' : ms < 1000 ? `>=${Math.round(ms)} ms` : `>=${(ms / 1000).toFixed(1)} s`);

export function formatView(v: WatchView): string {
  const s = v.slots;
  const r = v.rates;
  const lines = [
    `ring ${v.name} at ${new Date(v.unixMs).toISOString()}`,
    `frames/s: published ${perSecond(r?.published)}, taken ${perSecond(r?.taken)}, released ${perSecond(r?.released)}`,
    `slots: ${v.slotCount - s.empty} of ${v.slotCount} in use (writing ${s.writing}, ready ${s.ready}, claimed ${s.claimed}, leased ${s.leased}, released ${s.released})`,
  ];
  const b = v.blockedBy;
  lines.push(b ? `RING FULL: producers wait for slot ${b.slot} (position ${b.position}), ${b.state} by participant ${b.participant ?? '?'} (pid ${b.pid ?? '?'})` : 'not blocked');
  const rows = [['index', 'pid', 'roles', 'alive', 'asleep', 'leases', 'oldest lease', 'published/s', 'taken/s', 'released/s']];
  for (const p of v.participants)
    rows.push([
      String(p.index), String(p.pid), p.roles.join('+'), p.alive ? 'yes' : 'NO', p.asleep.join('+') || '-', String(p.leases),
      age(p.oldestLeaseMs), perSecond(p.rates?.published), perSecond(p.rates?.taken), perSecond(p.rates?.released),
    ]);
  lines.push(v.participants.length ? table(rows).replace(/^/gm, '  ') : '  no participants');
  return lines.join('\n');
}

/**
 * Prints a view every `intervalMs` until SIGINT, `count` views, or the ring's
 * removal. On a terminal each view replaces the last; otherwise views follow
 * one another, and --json prints one JSON line per view.
 */
export async function watchCommand(name: string, intervalMs: number, count: number, out: Output): Promise<boolean> {
  const ring = Ring.open(name);
  const stop = new AbortController();
  const onSignal = () => stop.abort();
  process.once('SIGINT', onSignal);
  const redraw = !out.json && process.stdout.isTTY;
  const watcher = new RingWatcher();
  try {
    for (let shown = 0; shown < count && !stop.signal.aborted; shown++) {
      if (!existsSync(segmentPath(ring.name))) {
        out.progress(`ring ${ring.name} was removed`);
        break;
      }
      const view = watcher.view(ring.inspect(), performance.now());
      if (out.json) process.stdout.write(`${JSON.stringify(view)}\n`);
      else process.stdout.write(`${redraw ? '\x1b[H\x1b[2J' : shown ? '\n' : ''}${formatView(view)}\n`);
      if (shown + 1 < count) await sleep(intervalMs, undefined, { signal: stop.signal }).catch(() => undefined);
    }
    return true;
  } finally {
    process.off('SIGINT', onSignal);
    ring.close();
  }
}
