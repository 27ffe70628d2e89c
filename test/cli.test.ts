// The gpuring command line, run as a user would (a separate process).
import { execFile } from 'node:child_process';
import { createInterface } from 'node:readline';
import { existsSync, readdirSync, readFileSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { Consumer, cudaInfo, Producer, Ring } from '../lib/index.js';
import type { WatchView } from '../lib/cli/inspect-watch.js';
import { ProgressBar } from '../lib/cli/progress-bar.js';
import { child, eventually, exitOf, nextLine, root, uniqueName, withRing } from './helpers/ring.js';

const run = async (...args: string[]) => {
  try {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'lib/cli/main.ts', ...args], { cwd: root });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
};

test('create, inspect (human and --json), rm', async (t) => {
  const name = uniqueName('cli');
  const created = await run('create', name, '--slots', '16', '--json');
  t.is(created.code, 0, created.stderr);
  t.is(JSON.parse(created.stdout).slotCount, 16);
  const human = await run('inspect', name);
  const { version_major: major, version_minor: minor } = JSON.parse(readFileSync(join(root, 'schema/layout.json'), 'utf8')).constants;
  t.regex(human.stdout, new RegExp(`ring ${name}: format ${major}\\.${minor}`));
  t.regex(human.stdout, /slots: 16 \(empty 16/);
  const json = JSON.parse((await run('inspect', name, '--json')).stdout);
  t.deepEqual(json.participants, []);
  t.is((await run('create', name)).code, 2, 'creating twice fails');
  const removed = await run('rm', name, '--json');
  t.deepEqual(JSON.parse(removed.stdout), { removed: name, arenas: 0 });
  t.false(existsSync(`/dev/shm/gpuring.${name}`));
  const missing = await run('inspect', name, '--json');
  t.is(missing.code, 2);
  t.is(JSON.parse(missing.stdout).error.code, 'SEGMENT_NOT_FOUND');
});

test('create --delivery all makes a broadcast ring; inspect shows each subscriber process, what it holds and has yet to read', async (t) => {
  const name = uniqueName('cli-bcast');
  const created = await run('create', name, '--slots', '8', '--participants', '8', '--delivery', 'all', '--json');
  t.is(created.code, 0, created.stderr);
  t.is(JSON.parse(created.stdout).delivery, 'all');
  t.is((await run('create', `${name}x`, '--delivery', 'some')).code, 2, 'an unknown delivery is refused');
  const holder = child('hold', name, 1); // subscribes, takes one frame and keeps it
  const idle = child('subscribe-idle', name);
  t.like(await nextLine(idle), { ready: true });
  const ring = Ring.open(name);
  t.true(await eventually(() => ring.inspect().participants.filter((p) => p.subscriber).length === 2), 'both subscribed');
  ring.close();
  const producer = Producer.open(name);
  for (const i of [1, 2, 3]) await producer.publish(new Table({ i: vectorFromArray([i], new Int32()) }));
  await nextLine(holder);
  const json = JSON.parse((await run('inspect', name, '--json')).stdout);
  const subs = (json.participants as { pid: number; leases: number; subscriber?: { held: number; unread: number; onSlow: string } }[]).filter((p) => p.subscriber);
  t.deepEqual(subs.map((p) => [p.pid, p.subscriber!.held, p.subscriber!.unread, p.subscriber!.onSlow, p.leases]).sort(), [[holder.pid, 1, 2, 'block', 1], [idle.pid, 0, 3, 'block', 0]].sort());
  const human = (await run('inspect', name)).stdout;
  t.regex(human, /delivery: all/);
  t.regex(human, /subscriber +on slow +next position +held +unread/);
  for (const p of [holder, idle]) p.kill('SIGKILL');
  producer.close();
  await run('rm', name);
});

test('rm removes the arenas a ring left behind, also when its segment is already gone', async (t) => {
  const name = uniqueName('cli-orphans');
  Ring.create(name, { slots: 4 });
  const producer = Producer.open(name, { arenaBytes: 1 << 20 });
  await producer.publish(new Table({ i: vectorFromArray([1], new Int32()) }));
  producer.close();
  const arenas = () => readdirSync('/dev/shm').filter((f) => f.startsWith(`gpuring.${name}.p`));
  t.is(arenas().length, 1, 'the closed producer\'s arena stays while its frame is unconsumed');
  unlinkSync(`/dev/shm/gpuring.${name}`); // the segment goes first, by hand
  const removed = await run('rm', name, '--json');
  t.is(removed.code, 0, removed.stderr);
  t.deepEqual(JSON.parse(removed.stdout), { removed: name, arenas: 1 });
  t.deepEqual(arenas(), []);
  t.is((await run('rm', name)).code, 2, 'nothing left: SEGMENT_NOT_FOUND');
});

test('demo reports transport speed, latency and verification apart, every value checked', async (t) => {
  const r = await run('demo', '--frames', '40', '--rows', '64', '--json');
  t.is(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  t.true(s.ok);
  t.like(s.transport, { frames: 40 });
  t.true(s.transport.framesPerSecond > 0 && s.transport.bytesPerSecond > 0 && s.transport.bytes > 40 * 64 * 4);
  t.true(s.latency.frames > 0 && s.latency.p50Us > 0 && s.latency.p99Us >= s.latency.p50Us);
  t.deepEqual([s.verification.frames, s.verification.mismatches, s.verification.firstMismatch], [40, 0, null]);
  t.is(r.stderr, '', '--json prints no progress');
  const human = await run('demo', '--frames', '10', '--rows', '8');
  t.regex(human.stdout, /^transport: 10 frames of 8 rows[\s\S]*frames\/s[\s\S]*hand-off latency[\s\S]*p50 [\d.]+ µs, p99[\s\S]*verification: every value of 10 frames[\s\S]*every value matched: ok/);
  t.regex(human.stderr, /verifying every value: 10\/10\n/, 'progress as plain lines when stderr is not a terminal');
  t.true(human.stderr.split('\n').length < 20, 'a few progress lines, not one per frame');
});

test('demo --device needs a usable GPU and says so at once; with one, device columns cross verified', async (t) => {
  const r = await run('demo', '--frames', '20', '--rows', '64', '--device', '0', '--json');
  const s = JSON.parse(r.stdout);
  if (cudaInfo().available && cudaInfo().devices.length > 0) {
    t.is(r.code, 0, r.stderr);
    t.true(s.ok);
    t.is(s.memory, 'device memory on GPU 0');
    t.is(s.verification.frames, 20);
    t.is(s.verification.mismatches, 0);
  } else {
    t.is(r.code, 2);
    t.is(s.error.code, 'CUDA_UNAVAILABLE');
  }
  const bad = await run('demo', '--device', 'x', '--json');
  t.is(JSON.parse(bad.stdout).error.code, 'INVALID_ARGUMENT');
});

test('doctor reports shared memory, limits, the addon and the CUDA driver', async (t) => {
  const r = await run('doctor', '--json');
  const report = JSON.parse(r.stdout);
  const names = report.checks.map((c: { name: string }) => c.name);
  t.true(['/dev/shm', 'open files', 'native addon', 'CUDA driver'].every((n) => names.includes(n)), names.join(', '));
  t.is(r.code, report.ok ? 0 : 1);
  t.regex((await run('doctor')).stdout, /native addon: loaded/);
});

test('--help and -h print the commands, or one command\'s options; unknown commands and options say what was wrong', async (t) => {
  for (const args of [['--help'], ['-h'], ['help']]) {
    const r = await run(...args);
    t.is(r.code, 0, args.join(' '));
    t.regex(r.stdout, /usage: gpuring <command>[\s\S]*inspect NAME[\s\S]*doctor/);
  }
  for (const args of [['create', '--help'], ['create', '-h'], ['help', 'create']]) {
    const r = await run(...args);
    t.is(r.code, 0, args.join(' '));
    t.regex(r.stdout, /usage: gpuring create NAME[\s\S]*--slots N[\s\S]*--if-missing/);
  }
  t.regex((await run('inspect', '--help')).stdout, /--watch/);
  const bogus = await run('frobnicate');
  t.is(bogus.code, 2);
  t.regex(bogus.stderr, /unknown command 'frobnicate'[\s\S]*usage: gpuring/);
  t.is(JSON.parse((await run('frobnicate', '--json')).stdout).error.code, 'INVALID_ARGUMENT');
  const option = await run('create', 'x', '--slot', '4');
  t.is(option.code, 2);
  t.regex(option.stderr, /INVALID_ARGUMENT: Unknown option '--slot' \(see 'gpuring create --help'\)/);
  t.regex((await run('inspect', 'x', '--slots', '4')).stderr, /Unknown option '--slots'/, 'options of another command are refused');
  t.is((await run('create')).code, 2);
  t.regex((await run('create', 'x', '--slots', 'many')).stderr, /--slots must be a positive integer/);
});

test('create --if-missing leaves an existing ring as it is', async (t) => {
  const name = uniqueName('cli-ifmissing');
  try {
    t.is(JSON.parse((await run('create', name, '--slots', '8', '--json')).stdout).slotCount, 8);
    const again = await run('create', name, '--slots', '64', '--if-missing', '--json');
    t.is(again.code, 0, again.stderr);
    t.is(JSON.parse(again.stdout).slotCount, 8, 'the ring that was there, not a new one');
    t.is((await run('create', name)).code, 2, 'without the flag the name is taken');
  } finally {
    Ring.unlink(name);
  }
});

test('inspect --watch shows rates, lease ages and the consumer that holds a full ring up, across processes', async (t) => {
  await withRing('cli-watch', { slots: 4 }, async (_ring, name) => {
    const producer = Producer.open(name, { arenaBytes: 1 << 20 });
    const frame = new Table({ i: vectorFromArray([1], new Int32()) });
    for (let i = 0; i < 4; i++) await producer.publish(frame);
    const holder = child('hold', name, 2);
    try {
      const { index } = await nextLine<{ index: number }>(holder);
      const r = await run('inspect', name, '--watch', '--json', '--count', '3', '--interval', '300');
      t.is(r.code, 0, r.stderr);
      const views = r.stdout.trim().split('\n').map((l) => JSON.parse(l) as WatchView);
      t.is(views.length, 3);
      t.is(views[0]!.rates, null, 'no rate before a second view');
      t.deepEqual(views[2]!.rates, { published: 0, taken: 0, released: 0 });
      const last = views[2]!;
      t.is(last.slots.leased, 2);
      t.like(last.blockedBy, { slot: 0, position: 0, state: 'leased', participant: index, pid: holder.pid, blocksProducers: true });
      const held = last.participants.find((p) => p.index === index)!;
      t.is(held.pid, holder.pid!);
      t.is(held.leases, 2);
      t.true(held.oldestLeaseMs! >= 500, `the lease was seen held for ${held.oldestLeaseMs} ms over three views 300 ms apart`);
      const human = await run('inspect', name);
      t.regex(human.stdout, new RegExp(`RING FULL: producers wait for slot 0 \\(position 0\\), leased by participant ${index}`));
    } finally {
      holder.kill('SIGKILL');
      await exitOf(holder);
      producer.close();
    }
  });
});

test('inspect --watch counts frames per second and stops when the ring is removed', async (t) => {
  const name = uniqueName('cli-watch-rm');
  Ring.create(name, { slots: 1024 });
  const producer = Producer.open(name, { arenaBytes: 1 << 20 });
  const consumer = Consumer.open(name);
  const watch = execFile(process.execPath, ['--import', 'tsx', 'lib/cli/main.ts', 'inspect', name, '--watch', '--json', '--interval', '400'], { cwd: root });
  const lines: WatchView[] = [];
  createInterface({ input: watch.stdout! }).on('line', (l) => lines.push(JSON.parse(l) as WatchView));
  try {
    t.true(await eventually(() => lines.length >= 1, 20_000), 'a first view');
    const frame = new Table({ i: vectorFromArray([1], new Int32()) });
    const seen = lines.length;
    for (let i = 0; i < 200; i++) {
      await producer.publish(frame);
      (await consumer.next()).release();
    }
    t.true(await eventually(() => lines.length >= seen + 3), 'a view that saw the last of them');
    const total = lines.slice(seen).reduce((n, v) => n + (v.rates?.published ?? 0) * (v.intervalMs ?? 0) / 1000, 0);
    t.is(Math.round(total), 200, 'each frame counted once over the views');
    t.true(lines.slice(seen).some((v) => (v.rates?.taken ?? 0) > 0 && (v.rates?.released ?? 0) > 0));
  } finally {
    producer.close();
    consumer.close();
    Ring.unlink(name);
  }
  const [code] = await Promise.all([new Promise((resolve) => watch.on('exit', resolve))]);
  t.is(code, 0, 'the watch ends on its own once the ring is gone');
});

test('the progress bar redraws one line on a terminal and prints a line a quarter elsewhere', (t) => {
  const sink = (isTTY: boolean) => {
    const writes: string[] = [];
    return { writes, stream: { isTTY, write: (s: string) => writes.push(s) } as unknown as NodeJS.WriteStream };
  };
  const tty = sink(true);
  const bar = new ProgressBar(tty.stream, false);
  for (let i = 1; i <= 100; i++) bar.update('step', i, 100);
  t.is(tty.writes.length, 100);
  t.true(tty.writes.every((w) => w.startsWith('\r') && !w.includes('\n')));
  t.regex(tty.writes.at(-1)!, /\[#{30}\] 100% {2}step 100\/100$/);
  bar.finish();
  t.is(tty.writes.at(-1), '\n');
  const log = sink(false);
  const lines = new ProgressBar(log.stream, false);
  for (let i = 1; i <= 100; i++) lines.update('a', i, 100);
  for (let i = 1; i <= 10; i++) lines.update('b', i, 10);
  t.deepEqual(log.writes, ['  a: 1/100\n', '  a: 25/100\n', '  a: 50/100\n', '  a: 75/100\n', '  a: 100/100\n', '  b: 1/10\n', '  b: 3/10\n', '  b: 5/10\n', '  b: 8/10\n', '  b: 10/10\n']);
  const quiet = sink(true);
  new ProgressBar(quiet.stream, true).update('x', 1, 2);
  t.deepEqual(quiet.writes, [], 'silent with --json');
});
