// The READMEs' programs, as a user copies them: every fenced block whose first
// line names a file (`// producer.mjs`, `# consumer.py`, `// consumer.c`) is
// that file, verbatim. A C program's first line also says how to build it
// (`build: cc ...`); the tests run that command as written.
import { execSync, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { ExecutionContext } from 'ava';
import { Ring } from '../../lib/index.js';
import { exitOf, root } from './ring.js';

/** The named programs of each `## ` section of a markdown file (before the first: ''): section -> file name -> source. */
export function programs(markdown: string): Map<string, Map<string, string>> {
  const sections = new Map<string, Map<string, string>>();
  let section = '';
  for (const part of readFileSync(join(root, markdown), 'utf8').split(/^(## .*)$/m)) {
    if (part.startsWith('## ')) section = part.slice(3).trim();
    for (const [, body] of part.matchAll(/^```(?:js|python|c)\n([\s\S]*?)^```$/gm)) {
      const name = /^(?:\/\/|#) ([\w-]+\.(?:mjs|py|c))\b/.exec(body!)?.[1];
      if (!name) continue;
      if (!sections.has(section)) sections.set(section, new Map());
      sections.get(section)!.set(name, body!);
    }
  }
  return sections;
}

export type Program = ChildProcess & { output: () => string };

/** Starts a program in `dir` (a C one built first, by the command its first line gives); its stdout and stderr collect in output(). */
export function start(dir: string, file: string, source: string, env: NodeJS.ProcessEnv = process.env): Program {
  let command: [string, string[]];
  if (file.endsWith('.c')) {
    const build = /build: (.*)$/m.exec(source)?.[1];
    if (!build) throw new Error(`${file} does not say how to build it (a "build: ..." first line)`);
    execSync(build, { cwd: dir, stdio: 'pipe' });
    command = [join(dir, file.slice(0, -2)), []];
  } else command = file.endsWith('.py') ? ['python3', [file]] : [process.execPath, [file]];
  const proc = spawn(command[0], command[1], { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d));
  proc.stderr!.on('data', (d: Buffer) => (out += d));
  return Object.assign(proc, { output: () => out });
}

/** Resolves once the program's output matches `text`. */
export async function until(proc: Program, text: RegExp): Promise<void> {
  const end = Date.now() + 60_000;
  while (!text.test(proc.output())) {
    if (Date.now() > end || proc.exitCode !== null) throw new Error(`no ${text} within 60 s; output: ${proc.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** A consumer and a producer program of a README, and what the consumer must print. */
export type ProgramPair = { ring: string; consumer: string; producer: string; shows: RegExp; env?: NodeJS.ProcessEnv };

/**
 * Runs the pair twice in `dir`, consumer first: it must wait for the ring, and
 * a second producer run must reuse the ring the first one left. A consumer
 * that loops forever (a Node `for await`, `for (;;)` or listener) is stopped with SIGINT
 * once it showed what it must; either way it must end cleanly.
 */
export async function runTwice(t: ExecutionContext, dir: string, sources: Map<string, string>, pair: ProgramPair): Promise<void> {
  const running: Program[] = [];
  try {
    for (let run = 1; run <= 2; run++) {
      const consumer = start(dir, pair.consumer, sources.get(pair.consumer)!, pair.env);
      const producer = start(dir, pair.producer, sources.get(pair.producer)!, pair.env);
      running.push(consumer, producer);
      t.is((await exitOf(producer)).code, 0, `producer, run ${run}: ${producer.output()}`);
      if (/for await|for \(;;\)|\.listen\(/.test(sources.get(pair.consumer)!)) {
        await until(consumer, pair.shows);
        consumer.kill('SIGINT');
      }
      const { code, signal } = await exitOf(consumer);
      const out = consumer.output();
      t.deepEqual({ code, signal }, { code: 0, signal: null }, `consumer, run ${run}, ends cleanly: ${out}`);
      t.regex(out, pair.shows, `run ${run}`);
    }
  } finally {
    for (const proc of running) proc.kill('SIGKILL');
    try {
      Ring.unlink(pair.ring);
    } catch {
      /* never created: the failure above says why */
    }
  }
}
