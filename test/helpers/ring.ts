/** Names, rings and processes for tests. */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { closeSync, existsSync, mkdtempSync, openSync, readSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Consumer, Ring, type CreateOptions } from '../../lib/index.js';
import { CONTROL, ENTRY, HEADER, SLOT, segmentGeometry } from './segment-layout.js';

export const root = fileURLToPath(new URL('../..', import.meta.url));
let counter = 0;

/** A ring name no other test (or earlier run) uses. */
export function uniqueName(prefix: string): string {
  return `t-${prefix}-${process.pid}-${counter++}`.slice(0, 32);
}

/** Creates a ring for one test and removes it (and its arenas) afterwards. */
export async function withRing<T>(prefix: string, options: CreateOptions, fn: (ring: Ring, name: string) => Promise<T>): Promise<T> {
  const name = uniqueName(prefix);
  const ring = Ring.create(name, options);
  try {
    return await fn(ring, name);
  } finally {
    ring.close();
    try {
      Ring.unlink(name);
    } catch {
      /* already removed by the test */
    }
    execFileSync('sh', ['-c', `rm -f /dev/shm/gpuring.${name}.p*`]);
  }
}

function helper(script: string, role: string, args: (string | number)[], env?: NodeJS.ProcessEnv): ChildProcess {
  return spawn(process.execPath, ['--import', 'tsx', join(root, 'test/helpers', script), role, ...args.map(String)], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
    ...(env ? { env: { ...process.env, ...env } } : {}),
  });
}

/**
 * The raw words of ring `name` that decide who takes what (SPEC.md §5, §6.1),
 * read from its segment file: the head and tail hints, the redelivery word,
 * each slot's (position, state, owner) and each entry's doorbell bits. For the
 * message of a test whose ring stopped moving: inspect() says what stands, this
 * says why no scan gets past it.
 */
export function ringWords(name: string): string {
  const fd = openSync(`/dev/shm/gpuring.${name}`, 'r');
  try {
    const at = (offset: number, bytes: number) => {
      const b = Buffer.alloc(bytes);
      readSync(fd, b, 0, bytes, offset);
      return b;
    };
    const g = segmentGeometry(at(0, HEADER.size));
    const control = at(g.control, CONTROL.size);
    const slotBytes = at(g.slots, g.slotCount * SLOT.size);
    const entries = at(g.participants, g.capacity * ENTRY.size);
    const words = Array.from({ length: g.slotCount }, (_, i) => {
      const w = slotBytes.readBigUInt64LE(i * SLOT.size + SLOT.word);
      return `${w >> 16n}:${'EWRCLX??'[Number((w >> 13n) & 7n)]}:${w & 0x1fffn}`;
    });
    const bells = Array.from({ length: g.capacity }, (_, i) => entries.readUInt32LE(i * ENTRY.size + ENTRY.doorbell)).map((b, i) => (b ? `${i}=${b}` : '')).filter(Boolean);
    return `head ${control.readBigUInt64LE(CONTROL.head)} tail ${control.readBigUInt64LE(CONTROL.tail)} redeliver ${control.readBigUInt64LE(CONTROL.redeliver) >> 16n} doorbells data ${control.readUInt32LE(CONTROL.data_doorbells)} space ${control.readUInt32LE(CONTROL.space_doorbells)} [${bells.join(' ')}]; slots (pos:state:owner+1) ${words.join(' ')}`;
  } finally {
    closeSync(fd);
  }
}

/** Runs test/helpers/child.ts ROLE ARGS in a new Node process. */
export function child(role: string, ...args: (string | number)[]): ChildProcess {
  return helper('child.ts', role, args);
}

/** Runs test/helpers/device-child.ts ROLE ARGS (a device producer) in a new Node process. */
export function deviceChild(role: string, ...args: (string | number)[]): ChildProcess {
  return helper('device-child.ts', role, args);
}

/** Like deviceChild, with extra environment (CUDA_VISIBLE_DEVICES, say). */
export function deviceChildWithEnv(env: NodeJS.ProcessEnv, role: string, ...args: (string | number)[]): ChildProcess {
  return helper('device-child.ts', role, args, env);
}

/**
 * The next stdout line of a child, parsed as JSON. Fails when its stdout ends
 * first, not when it exits: a child that prints and dies at once (SIGKILL
 * right after a flush) can be reported exited before its last lines are read.
 */
export function nextLine<T = unknown>(proc: ChildProcess): Promise<T> {
  return new Promise((resolve, reject) => {
    const rl = createInterface({ input: proc.stdout! });
    let read = false;
    rl.once('line', (line) => ((read = true), rl.close(), resolve(JSON.parse(line) as T)));
    rl.once('close', () => read || reject(new Error(`child's output ended (exit ${proc.exitCode ?? proc.signalCode}) before it printed a line`)));
  });
}

export function exitOf(proc: ChildProcess): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve({ code: proc.exitCode, signal: proc.signalCode });
  return new Promise((resolve) => proc.once('exit', (code, signal) => resolve({ code, signal })));
}

let helperDir: string | undefined;

/** The directory of the C programs written from SPEC.md alone (interop/spec-only). */
export const SPEC_ONLY = 'interop/spec-only';

/**
 * Builds a C or C++ program of the repository once per test process:
 * interop/tests/NAME.c, or DIR/NAME.c or .cc. Where no compiler is installed
 * (the GPU machine), the CMake build of the C suite (build-c-plain) is used.
 */
export function cProgram(name: string, dir = 'interop/tests'): string {
  helperDir ??= mkdtempSync(join(tmpdir(), 'gpuring-c-'));
  const out = join(helperDir, name);
  if (existsSync(out)) return out;
  const source = ['.c', '.cc'].map((ext) => join(root, dir, name + ext)).find((f) => existsSync(f));
  if (!source) throw new Error(`no source for ${dir}/${name}`);
  const cxx = source.endsWith('.cc');
  try {
    execFileSync(cxx ? 'c++' : 'cc', [cxx ? '-std=c++17' : '-std=c11', '-O1', '-Wall', '-Wextra', '-Werror', `-I${join(root, 'interop/include')}`, source, '-o', out, '-lpthread', '-lrt', '-ldl']);
    return out;
  } catch (error) {
    const built = join(root, 'build-c-plain', dir === 'interop/tests' ? '' : dir, name);
    if ((error as { code?: string }).code === 'ENOENT' && existsSync(built)) return built;
    throw error;
  }
}

export async function eventually(check: () => boolean, timeoutMs = 10_000): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    if (check()) return true;
    await new Promise((r) => setTimeout(r, 25));
  }
  return check();
}

/** Runs `fn` with a consumer of a new ring that device producer `role` (test/helpers/device-child.ts) publishes into; the producer must exit 0. */
export async function fromDeviceProducer(role: string, args: (string | number)[], fn: (consumer: Consumer) => Promise<void>): Promise<void> {
  await withRing('gpu', { slots: 64 }, async (_ring, name) => {
    const consumer = Consumer.open(name);
    const producer = deviceChild(role, name, ...args);
    try {
      await fn(consumer);
    } finally {
      consumer.close();
    }
    const exit = await exitOf(producer);
    if (exit.code !== 0) throw new Error(`device producer ${role} exited with ${JSON.stringify(exit)}`);
  });
}
