// `npm pack` runs this first (prepack): the addon built in this checkout
// becomes the package's prebuilt one, prebuilds/<platform>-<arch>/ with the
// tags node-gyp-build matches (N-API, so any Node with N-API 8; glibc). After
// packing (postpack, `--clean`) the directory goes, so that a checkout never
// loads a prebuild older than its sources.
'use strict';
const { copyFileSync, existsSync, mkdirSync, rmSync } = require('node:fs');
const { join } = require('node:path');

const root = join(__dirname, '..');
const prebuilds = join(root, 'prebuilds');
if (process.argv[2] === '--clean') {
  rmSync(prebuilds, { recursive: true, force: true });
} else {
  const built = join(root, 'build', 'Release', 'gpuring.node');
  if (!existsSync(built)) {
    console.error('gpuring: no build/Release/gpuring.node to ship: run `npm run build:native` before `npm pack`');
    process.exit(1);
  }
  const dir = join(prebuilds, `${process.platform}-${process.arch}`);
  mkdirSync(dir, { recursive: true });
  copyFileSync(built, join(dir, 'gpuring.napi.glibc.node'));
}
