// binding.gyp builds the same sources as CMake (from sources.gypi), offline,
// and that addon works: a frame crosses a ring through it.
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import test from 'ava';
import { root, uniqueName } from './helpers/ring.js';

test('node-gyp builds the addon from binding.gyp, and it publishes and consumes', (t) => {
  t.timeout(300_000);
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-gyp-'));
  try {
    const files = execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], { cwd: root, encoding: 'utf8' }).split('\n').filter(Boolean);
    for (const f of files) cpSync(join(root, f), join(dir, f), { recursive: true });
    symlinkSync(join(root, 'node_modules'), join(dir, 'node_modules'));
    execFileSync(process.execPath, [join(root, 'node_modules/node-gyp/bin/node-gyp.js'), 'rebuild', '--nodedir', dirname(dirname(process.execPath))], { cwd: dir, stdio: 'pipe' });
    const name = uniqueName('gyp');
    const script = `
      const { Ring } = await import(${JSON.stringify(join(root, 'lib/index.ts'))});
      const { tableFromArrays } = await import('apache-arrow');
      const ring = Ring.create(${JSON.stringify(name)});
      const p = ring.producer(), c = ring.consumer();
      await p.publish(tableFromArrays({ x: Int32Array.of(42) }));
      const f = await c.next({ timeout: 2000 });
      console.log(f.toTable().getChild('x').get(0));
      f.release(); p.close(); c.close(); ring.close(); Ring.unlink(${JSON.stringify(name)});`;
    const out = execFileSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: root,
      env: { ...process.env, GPURING_ADDON: join(dir, 'build/Release/gpuring.node') },
      encoding: 'utf8',
    });
    t.is(out.trim(), '42');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const arm64 = join(root, 'build-arm64/gpuring.node');
// CI cross-compiles it before the tests (`npm run prebuild:arm64`, .ci/run); a checkout may not have.
const arm64Test = existsSync(arm64) || process.env.CI ? test : test.skip;

arm64Test('the linux-arm64 prebuild is an aarch64 addon that needs only glibc 2.28, Node-API and libuv', (t) => {
  t.true(existsSync(arm64), 'build-arm64/gpuring.node: CI builds it with `npm run prebuild:arm64` before the tests');
  const elf = readFileSync(arm64);
  t.is(elf.subarray(0, 4).toString('latin1'), '\x7fELF');
  t.is(elf.readUInt16LE(18), 183, 'e_machine EM_AARCH64');
  const undefinedSymbols = execFileSync('nm', ['-D', '--undefined-only', arm64], { encoding: 'utf8' }).trim().split('\n');
  const strays = undefinedSymbols
    .map((line) => line.trim().split(/\s+/))
    .filter(([type]) => type === 'U')
    .map(([, symbol]) => symbol!)
    .filter((symbol) => {
      if (/^(napi_|node_api_|uv_)/.test(symbol)) return false; // Node exports these
      const glibc = /@GLIBC_(\d+)\.(\d+)/.exec(symbol);
      return !glibc || Number(glibc[1]) * 1000 + Number(glibc[2]) > 2028;
    });
  t.deepEqual(strays, [], 'every other symbol comes from glibc 2.28 or older');
});

test('one license everywhere, shipped in the npm tarball; source maps carry their sources', (t) => {
  const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { license: string };
  const pyproject = readFileSync(join(root, 'interop/python/pyproject.toml'), 'utf8');
  t.is(pkg.license, 'Apache-2.0');
  t.regex(pyproject, /^license = "Apache-2.0"$/m);
  t.regex(readFileSync(join(root, 'LICENSE'), 'utf8'), /Apache License\s+Version 2\.0/);
  t.is(readFileSync(join(root, 'interop/python/LICENSE'), 'utf8'), readFileSync(join(root, 'LICENSE'), 'utf8'), 'the wheel ships the same text');
  const [packed] = JSON.parse(execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] })) as { files: { path: string }[] }[];
  const shipped = packed!.files.map((f) => f.path);
  t.true(shipped.includes('LICENSE'));
  const maps = shipped.filter((f) => f.endsWith('.js.map'));
  t.true(maps.length > 10);
  for (const map of maps) {
    const { sources, sourcesContent } = JSON.parse(readFileSync(join(root, map), 'utf8')) as { sources: string[]; sourcesContent?: string[] };
    t.is(sourcesContent?.length, sources.length, `${map} embeds the TypeScript it maps to (lib/ is not shipped)`);
  }
});

test('the API reference builds from the doc comments, with every exported symbol documented (TypeDoc, pdoc)', (t) => {
  t.timeout(180_000);
  // typedoc.json treats a missing doc comment on anything exported as an error.
  const run = spawnSync('npm', ['run', 'docs'], { cwd: root, encoding: 'utf8' });
  t.is(run.status, 0, `${run.stdout}\n${run.stderr}`);
  for (const page of ['docs/api/node/index.html', 'docs/api/node/classes/Consumer.html', 'docs/api/python/gpuring.html'])
    t.true(existsSync(join(root, page)), page);
  t.regex(readFileSync(join(root, 'docs/api/node/classes/Ring.html'), 'utf8'), /Resolves once ring/, 'doc comments are in it');
});
