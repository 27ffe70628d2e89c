// The READMEs' programs run as written, in a fresh project with the packed
// package installed: every fenced block whose first line names a file
// (`// producer.mjs`, `# consumer.py`) is that file, verbatim. Each pair runs
// twice, consumer first: it must wait for the ring, and a second producer run
// must reuse the ring the first one left.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { Ring } from '../lib/index.js';
import { exitOf, root } from './helpers/ring.js';

/** The named programs of each `## ` section of a markdown file (before the first: ''): section -> file name -> source. */
function programs(markdown: string): Map<string, Map<string, string>> {
  const sections = new Map<string, Map<string, string>>();
  let section = '';
  for (const part of readFileSync(join(root, markdown), 'utf8').split(/^(## .*)$/m)) {
    if (part.startsWith('## ')) section = part.slice(3).trim();
    for (const [, body] of part.matchAll(/^```(?:js|python)\n([\s\S]*?)^```$/gm)) {
      const name = /^(?:\/\/|#) ([\w-]+\.(?:mjs|py))\b/.exec(body!)?.[1];
      if (!name) continue;
      if (!sections.has(section)) sections.set(section, new Map());
      sections.get(section)!.set(name, body!);
    }
  }
  return sections;
}

/** A project directory with `npm install gpuring apache-arrow` done from the packed tarball. */
function freshProject(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-readme-'));
  const tarball = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim().split('\n').at(-1)!;
  writeFileSync(join(dir, 'package.json'), '{ "name": "readme-check", "private": true, "type": "module" }\n');
  // The addon this checkout built stands in for the install-time build (the
  // test checks the package and the programs, not the compiler again).
  execFileSync('npm', ['install', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund', join(dir, tarball), 'apache-arrow'], { cwd: dir, stdio: 'ignore' });
  const built = join(dir, 'node_modules/gpuring/build/Release');
  mkdirSync(built, { recursive: true });
  copyFileSync(join(root, 'build/Release/gpuring.node'), join(built, 'gpuring.node'));
  return dir;
}

let project: string | undefined;
test.after.always(() => project && rmSync(project, { recursive: true, force: true }));

type Program = ChildProcess & { output: () => string };

/** Starts a program of the project; its stdout and stderr collect in output(). */
function start(dir: string, file: string): Program {
  const proc = spawn(file.endsWith('.py') ? 'python3' : process.execPath, [file], { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d));
  proc.stderr!.on('data', (d: Buffer) => (out += d));
  return Object.assign(proc, { output: () => out });
}

/** Resolves once the program's output matches `text`. */
async function until(proc: Program, text: RegExp): Promise<void> {
  const end = Date.now() + 60_000;
  while (!text.test(proc.output())) {
    if (Date.now() > end || proc.exitCode !== null) throw new Error(`no ${text} within 60 s; output: ${proc.output()}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const cases = [
  { readme: 'README.md', section: 'Node to Node', ring: 'prices', files: ['consumer.mjs', 'producer.mjs'], shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', section: 'Python to Node', ring: 'features', files: ['consumer.mjs', 'producer.py'], shows: /\{"id": 3n?, "score": 0\.125\}/ },
  { readme: 'interop/python/README.md', section: '', ring: 'prices', files: ['consumer.py', 'producer.py'], shows: /px: \[9\.5,9\.75,10\]/ },
];

for (const c of cases) {
  test.serial(`${c.readme}${c.section ? `, "${c.section}"` : ''}: ${c.files.join(' and ')} run as written, twice`, async (t) => {
    t.timeout(300_000);
    project ??= freshProject();
    const dir = join(project, `${c.readme}-${c.section}`.replace(/\W+/g, '-'));
    mkdirSync(dir, { recursive: true });
    const sources = programs(c.readme).get(c.section) ?? new Map<string, string>();
    t.true(c.files.every((f) => sources.has(f)), `the section has ${c.files.join(' and ')}: ${[...sources.keys()].join(', ')}`);
    for (const [name, source] of sources) writeFileSync(join(dir, name), source);
    const running: Program[] = [];
    try {
      for (let run = 1; run <= 2; run++) {
        const consumer = start(dir, c.files[0]!);
        const producer = start(dir, c.files[1]!);
        running.push(consumer, producer);
        t.is((await exitOf(producer)).code, 0, `producer, run ${run}: ${producer.output()}`);
        if (c.files[0]!.endsWith('.mjs')) {
          await until(consumer, c.shows);
          consumer.kill('SIGINT');
        }
        const { code, signal } = await exitOf(consumer);
        const out = consumer.output();
        t.deepEqual({ code, signal }, { code: 0, signal: null }, `consumer, run ${run}, ends cleanly: ${out}`);
        t.regex(out, c.shows, `run ${run}`);
      }
    } finally {
      for (const proc of running) proc.kill('SIGKILL');
      try {
        Ring.unlink(c.ring);
      } catch {
        /* never created: the failure above says why */
      }
    }
  });
}
