// tsx runs the tests and benchmarks without checking their types, so a call
// whose options the library no longer takes (or never took) would pass
// silently: tsc checks them against lib/ here.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import test from 'ava';
import { root } from './helpers/ring.js';

test('the tests and benchmarks type-check against the library', (t) => {
  t.timeout(180_000);
  const tsc = spawnSync(process.execPath, [join(root, 'node_modules/typescript/bin/tsc'), '-p', join(root, 'tsconfig.check.json')], { cwd: root, encoding: 'utf8' });
  t.is(tsc.status, 0, `${tsc.stdout}${tsc.stderr}`);
});
