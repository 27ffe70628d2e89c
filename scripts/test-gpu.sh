#!/usr/bin/env bash
# `npm run test:gpu`: the GPU suites, TypeScript (ava test/gpu) then Python
# (interop/python/tests/test_gpu.py). Each test reports skipped, with the reason,
# where there is no GPU. Fails if either suite fails.
cd "$(dirname "$0")/.."
npx ava --config ava.gpu.config.js "$@"; ts=$?
python3 -m pytest -rs -p no:cacheprovider interop/python/tests/test_gpu.py; py=$?
[[ $py -eq 5 ]] && py=0  # pytest: nothing collected (no CuPy here) is not a failure
exit $((ts || py))
