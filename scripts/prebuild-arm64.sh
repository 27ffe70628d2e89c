#!/usr/bin/env bash
# `npm run prebuild:arm64`: cross-compiles the addon for linux-arm64 into
# build-arm64/gpuring.node, which `npm pack` then ships as
# prebuilds/linux-arm64/gpuring.napi.glibc.node (native/prebuild.cjs).
#
# The compiler is zig's clang (`pip install ziglang`: one PyPI wheel, no system
# cross toolchain): it targets glibc 2.28 (Debian 10, Ubuntu 20.04, RHEL 8 and
# later) and links its libc++ statically, so the addon needs only glibc and the
# Node-API and libuv symbols Node itself exports. Nothing here can run an arm64
# binary; `npm install` on arm64 loads the prebuild first and builds from
# source if it does not load (native/install.cjs).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -c 'import ziglang' 2>/dev/null || python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore ziglang
node_include=$(node -p "require('path').resolve(process.execPath, '../../include/node')")
addon_api=$(node -p "require('node-addon-api').include_dir")
out=build-arm64
mkdir -p "$out/obj"
flags=(-target aarch64-linux-gnu.2.28 -std=c++17 -O2 -fPIC -DNAPI_VERSION=8 -DNODE_ADDON_API_CPP_EXCEPTIONS
       -DNODE_ADDON_API_CPP_EXCEPTIONS_ALL -DBUILDING_NODE_EXTENSION -I"$addon_api" -Iinterop/include -I"$node_include")
sources=$(node -p "JSON.parse(require('fs').readFileSync('sources.gypi', 'utf8')).sources.join('\n')")
echo "gpuring: cross-compiling $(wc -l <<<"$sources") sources for linux-arm64 (glibc 2.28) ..."
# One compiler per core: the sources are independent.
xargs -P "$(nproc)" -I{} sh -c 'python3 -m ziglang c++ "$@" -c {} -o "'"$out"'/obj/$(basename {} .cc).o"' _ "${flags[@]}" <<<"$sources"
python3 -m ziglang c++ -target aarch64-linux-gnu.2.28 -shared -s "$out"/obj/*.o -o "$out/gpuring.node" \
  -Wl,--allow-shlib-undefined -lpthread -ldl
echo "gpuring: built $out/gpuring.node"
