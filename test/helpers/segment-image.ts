/**
 * Loads a golden segment image (fixtures/segments) into /dev/shm the way
 * fixtures/README.md prescribes, and observes it through the public API as
 * the lines NAME.expect holds.
 */
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Consumer, GpuringError, Ring } from '../../lib/index.js';

export const imageRing = 'gpr-fixture-image';
const ALIVE = 0xfffffffe;
const PARTICIPANT_BYTES = 128;

/** Field 22 of /proc/self/stat: this process's start time in clock ticks since boot. */
function selfStartTime(): bigint {
  const stat = readFileSync('/proc/self/stat', 'utf8');
  return BigInt(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!);
}

/** An image's segment bytes and producer 0's arena (null where it has none), to load as they are or damaged. */
export function imageBytes(dir: string, image: string): { segment: Buffer; arena: Buffer | null } {
  const arena = join(dir, `${image}.p0g1.a0.bin`);
  return { segment: Buffer.from(readFileSync(join(dir, `${image}.segment.bin`))), arena: existsSync(arena) ? Buffer.from(readFileSync(arena)) : null };
}

/** Our PID namespace where the image has none, our pid and start time for ALIVE entries; offsets bounds-checked (images may be damaged). */
function adopt(seg: Buffer): void {
  if (seg.length < 256) return;
  if (seg.readBigUInt64LE(72) === 0n) seg.writeBigUInt64LE(statSync('/proc/self/ns/pid', { bigint: true }).ino, 72);
  const capacity = seg.readUInt32LE(40);
  const at = Number(seg.readBigUInt64LE(56));
  for (let i = 0; i < capacity && at + PARTICIPANT_BYTES * (i + 1) <= seg.length; i++) {
    const p = at + PARTICIPANT_BYTES * i;
    if (seg.readUInt32LE(p + 8) !== ALIVE) continue;
    seg.writeUInt32LE(process.pid, p + 8);
    seg.writeBigUInt64LE(selfStartTime(), p + 16);
  }
}

export function loadImageBytes({ segment, arena }: { segment: Buffer; arena: Buffer | null }): void {
  adopt(segment);
  writeFileSync(`/dev/shm/gpuring.${imageRing}`, segment);
  if (arena) writeFileSync(`/dev/shm/gpuring.${imageRing}.p0g1.a0`, arena);
}

export function loadImage(dir: string, image: string): void {
  loadImageBytes(imageBytes(dir, image));
}

/** Removes the segment and every arena of its ring (a producer of a damaged image may have made more). */
export function unloadImage(): void {
  for (const f of readdirSync('/dev/shm')) if (f === `gpuring.${imageRing}` || f.startsWith(`gpuring.${imageRing}.`)) rmSync(`/dev/shm/${f}`, { force: true });
}

function codeOf(error: unknown): string {
  if (error instanceof GpuringError) return error.code;
  throw error;
}

function observeFrames(lines: string[]): void {
  const consumer = Consumer.open(imageRing);
  try {
    for (let i = 0; i < 20; i++) {
      let f;
      try {
        f = consumer.tryNext();
      } catch (error) {
        lines.push(`error ${codeOf(error)}`);
        continue;
      }
      if (!f) {
        lines.push('empty');
        break;
      }
      lines.push(`frame ${f.id} ${f.tag} ${f.toTable().getChild('seq')!.get(0)}`);
      f.release();
    }
  } finally {
    consumer.close();
  }
}

export function observeImage(): string {
  let ring: Ring;
  try {
    ring = Ring.open(imageRing, { openTimeout: 50 });
  } catch (error) {
    return `open ${codeOf(error)}\n`;
  }
  const lines = ['open OK'];
  try {
    const seen = ring.inspect();
    const s = seen.slots;
    lines.push(`states EMPTY=${s.empty} WRITING=${s.writing} READY=${s.ready} CLAIMED=${s.claimed} LEASED=${s.leased} RELEASED=${s.released}`);
    for (const p of seen.participants) {
      lines.push(`participant ${p.index} ${p.generation} ${p.state.toUpperCase()} ${p.alive ? 'alive' : 'dead'}`);
      if (p.subscriber) lines.push(`subscriber ${p.index} held=${p.subscriber.held} unread=${p.subscriber.unread} missed=${p.subscriber.missed}`);
    }
    const r = ring.sweep();
    lines.push(`sweep found_dead=${r.foundDead} released=${r.released} redelivered=${r.redelivered} recycled=${r.recycled}`);
    observeFrames(lines);
  } finally {
    ring.close();
  }
  return `${lines.join('\n')}\n`;
}
