#!/usr/bin/env bash
# `npm run test:gpu`: the GPU suites, TypeScript (ava test/gpu) then Python
# (interop/python/tests/test_gpu.py). Each test reports skipped, with the reason,
# where there is no GPU. Fails if either suite fails. Tests in test/gpu/alone take
# most of the GPU's memory: they run after the others, by themselves.
cd "$(dirname "$0")/.."
npx ava --config ava.gpu.config.js "$@"; ts=$?
if [[ $# -eq 0 ]]; then npx ava --config ava.gpu-alone.config.js || ts=1; fi
python3 -m pytest -rsfE -p no:cacheprovider interop/python/tests/test_gpu.py; py=$?
[[ $py -eq 5 ]] && py=0  # pytest: nothing collected (no CuPy here) is not a failure
exit $((ts || py))
