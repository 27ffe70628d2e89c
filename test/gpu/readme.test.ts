// GPU suite (npm run test:gpu): the README's device programs run as written,
// twice, against this checkout's build (the host README test installs the
// packed tarball; this machine may have no registry to install from).
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import { cudaInfo } from '../../lib/index.js';
import { programs, runTwice, type ProgramPair } from '../helpers/readme-programs.js';
import { root } from '../helpers/ring.js';

const info = cudaInfo();
const gpu = info.available && info.devices.length > 0;
const gpuTest = gpu ? test : test.skip;
if (!gpu) console.log(`GPU tests skipped: ${info.available ? 'no CUDA device visible' : info.error}`);

/** A project whose `gpuring` is this checkout, with apache-arrow beside it, as `npm install gpuring apache-arrow` leaves one. */
function linkedProject(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gpuring-readme-gpu-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(root, join(dir, 'node_modules/gpuring'));
  symlinkSync(join(root, 'node_modules/apache-arrow'), join(dir, 'node_modules/apache-arrow'));
  return dir;
}

const pythonEnv = { ...process.env, PYTHONPATH: join(root, 'interop/python/src') };
const f32 = (values: number[]) => values.join(', ');
const cases: (ProgramPair & { section: string })[] = [
  {
    section: 'Node to Node',
    ring: 'tensors',
    consumer: 'device-consumer.mjs',
    producer: 'device-producer.mjs',
    shows: new RegExp(`table \\[ ${f32([1, 2, 3])} \\]\\ncopy \\[ ${f32([4, 5, 6])} \\]\\ncopy of 1 \\[ ${f32([4, 5, 6])} \\]\\ncopy of 2 \\[ ${f32([4, 5, 6])} \\]\\n`),
  },
  { section: 'Python to Node', ring: 'features', consumer: 'consumer.mjs', producer: 'device_producer.py', shows: /embedding[\s\S]*\}/, env: pythonEnv },
];

for (const c of cases) {
  gpuTest(`README.md, "${c.section}": ${c.consumer} and ${c.producer} run as written, twice`, async (t) => {
    t.timeout(240_000);
    const dir = linkedProject();
    try {
      const sources = programs('README.md').get(c.section) ?? new Map<string, string>();
      t.true([c.consumer, c.producer].every((f) => sources.has(f)), `the section has ${c.consumer} and ${c.producer}`);
      for (const [name, source] of sources) writeFileSync(join(dir, name), source);
      await runTwice(t, dir, sources, c);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
