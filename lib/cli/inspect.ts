/** `gpuring inspect NAME`: header, participants (alive or dead), occupancy, leases. */
import type { RingInspection } from '../native.js';
import { Ring } from '../ring.js';
import { bytes, table, type Output } from './output.js';

export function formatInspection(i: RingInspection): string {
  const s = i.slots;
  const lines = [
    `ring ${i.name}: format ${i.version}, layout ${i.layoutHash}, ${bytes(i.totalBytes)} in /dev/shm/gpuring.${i.name}`,
    `created ${new Date(i.createdUnixMs).toISOString()} by pid ${i.creatorPid}`,
    `delivery: ${i.delivery === 'all' ? 'all (a broadcast ring: every subscriber gets every frame)' : 'each (a work queue: one consumer per frame)'}`,
    `slots: ${i.slotCount} (empty ${s.empty}, writing ${s.writing}, ready ${s.ready}, claimed ${s.claimed}, leased ${s.leased}, released ${s.released})`,
    `repaired after dead participants: ${i.recovered} slots; frames redelivered: ${i.redelivered}`,
    `participants: ${i.participants.length} of ${i.participantCapacity}; asleep on doorbells: ${i.doorbells.data} for frames, ${i.doorbells.space} for space`,
  ];
  const o = i.oldest;
  if (o?.blocksProducers) lines.push(`RING FULL: producers wait for slot ${o.slot} (position ${o.position}), ${o.state} by participant ${o.participant ?? '?'}`);
  if (i.participants.length) {
    const rows = [['index', 'pid', 'roles', 'state', 'alive', 'asleep', 'leases', 'published', 'taken', 'released', 'arenas', 'attached']];
    for (const p of i.participants)
      rows.push([
        String(p.index), String(p.pid), p.roles.join('+'), p.state, p.alive ? 'yes' : 'NO', p.asleep.join('+') || '-', String(p.leases),
        String(p.published), String(p.leased), String(p.released), String(p.arenas), new Date(p.attachedUnixMs).toISOString(),
      ]);
    lines.push(table(rows).replace(/^/gm, '  '));
  }
  lines.push(...bridgeLines(i));
  const subscribers = i.participants.filter((p) => p.subscriber);
  if (subscribers.length) {
    const rows = [['subscriber', 'on slow', 'next position', 'held', 'unread', 'missed', 'evicted']];
    for (const { index, subscriber: b } of subscribers)
      rows.push([String(index), b!.onSlow, String(b!.cursor), String(b!.held), String(b!.unread), String(b!.missed), b!.evicted ? 'YES' : 'no']);
    lines.push(table(rows).replace(/^/gm, '  '));
  }
  return lines.join('\n');
}

/** `gpuring bridge` ends attached here (SPEC.md §14), with their lag: a forwarding end's leases are the
 * frames it sent and the far side has not acknowledged; the ready frames wait for it behind them. */
function bridgeLines(i: RingInspection): string[] {
  return i.participants
    .filter((p) => p.roles.includes('bridge') && p.state === 'active')
    .map((p) =>
      p.roles.includes('consumer')
        ? `bridge: participant ${p.index} (pid ${p.pid}) forwards this ring to another machine: ${p.leases} frames in flight ` +
          `(sent, not yet acknowledged), ${i.slots.ready} waiting in the ring, ${p.released} acknowledged`
        : `bridge: participant ${p.index} (pid ${p.pid}) publishes frames from another machine: ${p.published} published`,
    );
}

export function inspectCommand(name: string, out: Output): void {
  const ring = Ring.open(name);
  try {
    const info = ring.inspect();
    out.result(info, () => formatInspection(info));
  } finally {
    ring.close();
  }
}
