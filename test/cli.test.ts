// The gpuring command line, run as a user would (a separate process).
import { execFile } from 'node:child_process';
import { existsSync, readdirSync, unlinkSync } from 'node:fs';
import { promisify } from 'node:util';
import test from 'ava';
import { Int32, Table, vectorFromArray } from 'apache-arrow';
import { cudaInfo, Producer, Ring } from '../lib/index.js';
import { root, uniqueName } from './helpers/ring.js';

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
  t.regex(human.stdout, new RegExp(`ring ${name}: format 2\\.0`));
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

test('demo streams verified frames between two processes', async (t) => {
  const r = await run('demo', '--frames', '40', '--rows', '64', '--json');
  t.is(r.code, 0, r.stderr);
  const s = JSON.parse(r.stdout);
  t.true(s.ok);
  t.is(s.received, 40);
  t.is(s.mismatches, 0);
  t.true(s.framesPerSecond > 0);
  const human = await run('demo', '--frames', '10', '--rows', '8');
  t.regex(human.stdout, /every value matched: ok/);
  t.regex(human.stderr, /10\/10 frames received and verified|producer process -> consumer process/);
});

test('demo --device needs a usable GPU and says so at once; with one, device columns cross verified', async (t) => {
  const r = await run('demo', '--frames', '20', '--rows', '64', '--device', '0', '--json');
  const s = JSON.parse(r.stdout);
  if (cudaInfo().available && cudaInfo().devices.length > 0) {
    t.is(r.code, 0, r.stderr);
    t.true(s.ok);
    t.is(s.memory, 'device memory on GPU 0');
    t.is(s.received, 20);
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

test('bad usage prints help and fails', async (t) => {
  const r = await run('frobnicate');
  t.is(r.code, 1);
  t.regex(r.stderr, /usage: gpuring/);
  t.is((await run('create')).code, 2);
  t.regex((await run('create', 'x', '--slots', 'many')).stderr, /--slots must be a positive integer/);
});
