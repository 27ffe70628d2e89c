// `npm install gpuring` runs this. It keeps the prebuilt addon the package
// ships (prebuilds/<platform>-<arch>/, made by `npm pack`) when that loads on
// this machine, so no compiler is needed; otherwise, or with
// `npm install --build-from-source`, it builds the addon with cmake-js.
'use strict';
const { spawnSync } = require('node:child_process');
const { join } = require('node:path');

const root = join(__dirname, '..');
const fromSource = ['true', 'gpuring'].includes(process.env.npm_config_build_from_source ?? '');

function prebuiltLoads() {
  process.env.PREBUILDS_ONLY = '1'; // only prebuilds/: a build/ left in a checkout is no prebuild
  let path;
  try {
    path = require('node-gyp-build').path(root);
    require(path);
    console.log(`gpuring: using the prebuilt addon ${path.slice(root.length + 1)}`);
    return true;
  } catch (error) {
    console.log(`gpuring: no prebuilt addon loads here (${String(error.message).split('\n')[0]}); building it from source with cmake-js`);
    return false;
  }
}

if (fromSource || !prebuiltLoads()) {
  const cmakeJs = require.resolve('cmake-js/bin/cmake-js');
  const built = spawnSync(process.execPath, [cmakeJs, 'compile', '--out', 'build'], { cwd: root, stdio: 'inherit' });
  if (built.status !== 0) {
    console.error('gpuring: building the addon failed. It needs cmake (3.20+) and a C++17 compiler; see the output above.');
    process.exit(built.status ?? 1);
  }
}
