// Random bytes written into a live ring (SPEC.md §10a): two producer and two
// consumer processes run while another process writes 1-8 random bytes every
// 2 ms into the segment's control block, its slots and the participant entries
// they use. Every failure must be a typed error (no crash, no other
// exception), and once the writes stop frames must flow again faster than
// timeouts alone would move them: sweeps repair what the damage left (§7 step
// 2), and a participant whose entry was taken fails with DETACHED and is
// opened again (§4, "Losing the entry"). Before that, a hint or a slot
// sequence moved laps away, a slot owned by nobody, or an EMPTY slot producers
// had passed stalled the ring for good, and a producer whose entry was marked
// DEAD went on publishing from arenas a sweep had unlinked. Frames themselves
// are not checked: a damaged slot reference may name another frame's body,
// which §10a allows.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import test from 'ava';
import { exitOf, root, withRing } from './helpers/ring.js';

const SEED = Number(process.env.GPURING_DAMAGE_SEED ?? 20261127);
const SETTLE_MS = 1500;
const DAMAGE_MS = 4000;
const RECOVER_MS = 5000;
const HEADER_BYTES = 256;
const ENTRY_BYTES = 128;
/** The entries the participants and their reopened successors take: writes into the rest would hit nobody. */
const DAMAGED_ENTRIES = 8;

interface Counts { ok: number; codes: Record<string, number>; untyped?: string }

function participant(role: string, name: string): { proc: ChildProcess; last: () => Counts } {
  const seconds = (SETTLE_MS + DAMAGE_MS + RECOVER_MS) / 1000;
  const proc = spawn(process.execPath, ['--import', 'tsx', join(root, 'test/helpers/damage-child.ts'), role, name, String(seconds)], { cwd: root, stdio: ['ignore', 'pipe', 'inherit'] });
  let last: Counts = { ok: 0, codes: {} };
  createInterface({ input: proc.stdout! }).on('line', (line) => (last = JSON.parse(line) as Counts));
  return { proc, last: () => last };
}

/** The control block and the slots: [offset, end) pairs read from the header (SPEC.md §3). */
function regions(fd: number): [number, number][] {
  const h = Buffer.alloc(HEADER_BYTES);
  readSync(fd, h, 0, HEADER_BYTES, 0);
  const control = Number(h.readBigUInt64LE(48)), participants = Number(h.readBigUInt64LE(56)), slots = Number(h.readBigUInt64LE(64));
  const entries = participants + ENTRY_BYTES * Math.min(DAMAGED_ENTRIES, h.readUInt32LE(40));
  return [[control, participants], [slots, slots + h.readUInt32LE(32) * h.readUInt32LE(36)], [participants, entries]];
}

/** Writes seeded random bytes into the control block, the slots and the first entries until `until`. */
async function damage(path: string, until: number): Promise<number> {
  let seed = SEED, writes = 0;
  const random = () => ((seed = (Math.imul(seed, 1103515245) + 12345) & 0x7fffffff), seed / 0x80000000);
  const fd = openSync(path, 'r+');
  try {
    const places = regions(fd);
    while (Date.now() < until) {
      const bytes = Buffer.from(Array.from({ length: 1 + Math.floor(random() * 8) }, () => (random() < 0.3 ? 0xff : random() < 0.3 ? 0 : Math.floor(random() * 256))));
      const [from, to] = places[Math.floor(random() * places.length)]!;
      writeSync(fd, bytes, 0, bytes.length, from + Math.floor(random() * (to - from - bytes.length)));
      writes++;
      await new Promise((r) => setTimeout(r, 2));
    }
  } finally {
    closeSync(fd);
  }
  return writes;
}

test(`random bytes in a live segment (seed ${SEED}): typed errors only, and frames flow again once the writes stop`, async (t) => {
  await withRing('damage', { slots: 16 }, async (_ring, name) => {
    const roles = ['producer', 'producer', 'consumer', 'consumer'];
    const people = roles.map((role) => participant(role, name));
    await new Promise((r) => setTimeout(r, SETTLE_MS));
    const writes = await damage(`/dev/shm/gpuring.${name}`, Date.now() + DAMAGE_MS);
    const atStop = people.map((p) => p.last().ok);
    const exits = await Promise.all(people.map((p) => exitOf(p.proc)));
    const after = people.map((p, k) => p.last().ok - atStop[k]!);
    t.log(`${writes} writes; frames after they stopped: ${roles.map((r, k) => `${r} ${after[k]}`).join(', ')}`);
    t.log(`errors: ${people.map((p) => JSON.stringify(p.last().codes)).join(' ')}`);
    for (const [k, p] of people.entries()) t.deepEqual(exits[k], { code: 0, signal: null }, `${roles[k]} ${k}: ${p.last().untyped ?? 'exited'}`);
    // A consumer woken only by its 200 ms timeouts takes at most a ring (16 frames) per wake-up.
    const floor = (RECOVER_MS / 200) * 16;
    t.true(after[0]! + after[1]! > floor, `producers publish again after the writes stopped, faster than timeouts alone allow (${floor})`);
    t.true(after[2]! + after[3]! > floor, `consumers take frames again after the writes stopped, faster than timeouts alone allow (${floor})`);
  });
});
