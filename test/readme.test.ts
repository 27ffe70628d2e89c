// The package as users get it: the packed tarball installs into a fresh
// project without a compiler, and the READMEs' programs run there as written:
// every fenced block whose first line names a file
// (`// producer.mjs`, `# consumer.py`) is that file, verbatim. Each pair runs
// twice, consumer first: it must wait for the ring, and a second producer run
// must reuse the ring the first one left.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { programs, runTwice, type ProgramPair } from './helpers/readme-programs.js';
import { root } from './helpers/ring.js';

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
  // npm pack's own scripts would run `prepare` (tsc), rewriting dist/ while tests running beside this one
  // import it (a half-written module fails to load); dist/ is built already, so only the prebuild steps run.
  const prebuild = (...args: string[]) => execFileSync(process.execPath, ['native/prebuild.cjs', ...args], { cwd: root, stdio: 'ignore' });
  prebuild();
  let tarball: string;
  try {
    tarball = execFileSync('npm', ['pack', '--ignore-scripts', '--pack-destination', dir], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim().split('\n').at(-1)!;
  } finally {
    prebuild('--clean');
  }
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
  if (existsSync(join(root, 'build-arm64/gpuring.node'))) t.true(existsSync(join(installed, 'prebuilds/linux-arm64/gpuring.napi.glibc.node')), 'the cross-compiled arm64 addon is shipped too');
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

const cases: (ProgramPair & { readme: string; sections: string[] })[] = [
  { readme: 'README.md', sections: ['Node to Node'], ring: 'prices', consumer: 'consumer.mjs', producer: 'producer.mjs', shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', sections: ['Node to Node'], ring: 'prices', consumer: 'consumer-sync.mjs', producer: 'producer.mjs', shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', sections: ['Node to Node'], ring: 'prices', consumer: 'consumer-listen.mjs', producer: 'producer.mjs', shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', sections: ['Node to Node'], ring: 'prices', consumer: 'consumer.mjs', producer: 'allocate-producer.mjs', shows: /\{"id": 2, "px": 9\.75\}/ },
  { readme: 'README.md', sections: ['Node to Node'], ring: 'prices', consumer: 'consumer.mjs', producer: 'loan-producer.mjs', shows: /\{"id": 2, "px": 9\.75, "sym": "cd"\}.*\{"id": 4, "px": null, "sym": "gh"\}/s },
  { readme: 'README.md', sections: ['Node to Node'], ring: 'ticks', consumer: 'recorder.mjs', producer: 'ticker.mjs', shows: /recorder: 1,2,3\ndashboard: 1,2,3\n/ },
  { readme: 'README.md', sections: ['Python to Node'], ring: 'features', consumer: 'consumer.mjs', producer: 'producer.py', shows: /\{"id": 3n?, "score": 0\.125\}/ },
  { readme: 'README.md', sections: ['C and C++', 'Python to Node'], ring: 'features', consumer: 'consumer.c', producer: 'producer.py', shows: /id 1 score 0\.5\nid 2 score 0\.25\nid 3 score 0\.125\n/ },
  { readme: 'interop/python/README.md', sections: [''], ring: 'prices', consumer: 'consumer.py', producer: 'producer.py', shows: /px: \[9\.5,9\.75,10\]/ },
  { readme: 'interop/python/README.md', sections: [''], ring: 'prices', consumer: 'consumer_async.py', producer: 'producer.py', shows: /px: \[9\.5,9\.75,10\]/ },
];

for (const c of cases) {
  test.serial(`${c.readme}${c.sections[0] ? `, "${c.sections.join('" and "')}"` : ''}: ${c.consumer} and ${c.producer} run as written, twice`, async (t) => {
    t.timeout(300_000);
    project ??= freshProject();
    const dir = join(project.dir, `${c.readme}-${c.sections.join('-')}-${c.producer}-${c.consumer}`.replace(/\W+/g, '-'));
    mkdirSync(dir, { recursive: true });
    symlinkSync(join(project.dir, 'node_modules'), join(dir, 'node_modules')); // as if run from the project's root
    const all = programs(c.readme);
    const sources = new Map(c.sections.flatMap((s) => [...(all.get(s) ?? [])]));
    t.true([c.consumer, c.producer].every((f) => sources.has(f)), `the sections have ${c.consumer} and ${c.producer}: ${[...sources.keys()].join(', ')}`);
    for (const [name, source] of sources) writeFileSync(join(dir, name), source);
    await runTwice(t, dir, sources, c);
  });
}
