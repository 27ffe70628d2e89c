// The package as users get it: the packed tarball installs into a fresh
// project without a compiler, and the READMEs' programs run there as written:
// every fenced block whose first line names a file
// (`// producer.mjs`, `# consumer.py`) is that file, verbatim. Each pair runs
// twice, consumer first: it must wait for the ring, and a second producer run
// must reuse the ring the first one left.
import { execFileSync, spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
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

/** A PATH with node, npm and sh (npm runs scripts with it) and nothing else: no cmake, no compiler. */
function bareBin(dir: string): string {
  const bin = join(dir, 'bare-bin');
  mkdirSync(bin);
  for (const tool of ['node', 'npm', 'sh']) symlinkSync(execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim(), join(bin, tool));
  return bin;
}

/**
 * A project where `npm install gpuring apache-arrow` was run as the README
 * says, gpuring from the tarball `npm pack` makes, on a PATH without cmake or
 * a compiler: the prebuilt addon must do. `installLog` is what npm printed.
 */
function freshProject(): { dir: string; installLog: string } {
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-readme-'));
  const tarball = execFileSync('npm', ['pack', '--pack-destination', dir], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim().split('\n').at(-1)!;
  writeFileSync(join(dir, 'package.json'), '{ "name": "readme-check", "private": true, "type": "module" }\n');
  const installLog = execFileSync('npm', ['install', '--foreground-scripts', '--prefer-offline', '--no-audit', '--no-fund', join(dir, tarball), 'apache-arrow'], {
    cwd: dir,
    encoding: 'utf8',
    env: { ...process.env, PATH: bareBin(dir) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  return { dir, installLog };
}

let project: ReturnType<typeof freshProject> | undefined;
test.after.always(() => project && rmSync(project.dir, { recursive: true, force: true }));

test.serial('the packed package installs with no compiler on PATH, from its prebuilt addon; without one, loading says how to fix it', (t) => {
  t.timeout(300_000);
  project ??= freshProject();
  t.false(/cmake|gcc|clang|g\+\+/.test(execFileSync('ls', [join(project.dir, 'bare-bin')], { encoding: 'utf8' })));
  t.regex(project.installLog, /gpuring: using the prebuilt addon prebuilds\/linux-x64\/gpuring\.napi\.glibc\.node/);
  const installed = join(project.dir, 'node_modules/gpuring');
  t.false(existsSync(join(installed, 'build')), 'nothing was built at install');
  t.true(existsSync(join(installed, 'LICENSE')));
  const probe = `import { Ring } from 'gpuring'; Ring.create('readme-probe-${process.pid}').close(); Ring.unlink('readme-probe-${process.pid}'); console.log('ok');`;
  t.is(execFileSync(process.execPath, ['--input-type=module', '-e', probe], { cwd: project.dir, encoding: 'utf8' }).trim(), 'ok');
  // Without the prebuild (another platform, say), the error names what was tried and the fix.
  const moved = join(project.dir, 'prebuilds-away');
  renameSync(join(installed, 'prebuilds'), moved);
  try {
    const missing = spawnSync(process.execPath, ['--input-type=module', '-e', probe], { cwd: project.dir, encoding: 'utf8' });
    t.not(missing.status, 0);
    t.regex(missing.stderr, /NATIVE_LOAD[\s\S]*no addon built or prebuilt for this platform[\s\S]*Fix: build it with `npm rebuild gpuring`/);
  } finally {
    renameSync(moved, join(installed, 'prebuilds'));
  }
});

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
  { readme: 'README.md', section: 'Node to Node', ring: 'prices', files: ['consumer.mjs', 'allocate-producer.mjs'], shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', section: 'Node to Node', ring: 'prices', files: ['consumer.mjs', 'loan-producer.mjs'], shows: /\{"id": 2, "px": 9\.75, "sym": "cd"\}.*\{"id": 4, "px": null, "sym": "gh"\}/s },
  { readme: 'README.md', section: 'Python to Node', ring: 'features', files: ['consumer.mjs', 'producer.py'], shows: /\{"id": 3n?, "score": 0\.125\}/ },
  { readme: 'interop/python/README.md', section: '', ring: 'prices', files: ['consumer.py', 'producer.py'], shows: /px: \[9\.5,9\.75,10\]/ },
];

for (const c of cases) {
  test.serial(`${c.readme}${c.section ? `, "${c.section}"` : ''}: ${c.files.join(' and ')} run as written, twice`, async (t) => {
    t.timeout(300_000);
    project ??= freshProject();
    const dir = join(project.dir, `${c.readme}-${c.section}`.replace(/\W+/g, '-'));
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
