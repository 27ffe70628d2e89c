// `npm pack` runs this first (prepack): the addon built in this checkout
// becomes the package's prebuilt one (and build-arm64/'s, cross-compiled by
// scripts/prebuild-arm64.sh, the linux-arm64 one), prebuilds/<platform>-<arch>/ with the
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
  ship(built, `${process.platform}-${process.arch}`);
  // A cross-compiled arm64 addon (`npm run prebuild:arm64`), when one was built.
  const arm64 = join(root, 'build-arm64', 'gpuring.node');
  if (process.arch !== 'arm64' && existsSync(arm64)) ship(arm64, 'linux-arm64');
}

function ship(addon, platform) {
  const dir = join(prebuilds, platform);
  mkdirSync(dir, { recursive: true });
  copyFileSync(addon, join(dir, 'gpuring.napi.glibc.node'));
}
