#!/usr/bin/env bash
# `npm test`: every suite, then one line "N passed, N failed, N skipped" summing
# them. Needs `npm install` (or `npm ci`) first: that builds the addon.
#   C       ctest: plain, AddressSanitizer+UBSan and ThreadSanitizer builds, bounded fuzz runs
#   TS      ava: codec, API, every type, crashes, bad input, stress, CLI, node-gyp build,
#           the three-language body fuzz and the kill -9 torture run; again on each
#           Node.js named in GPURING_MORE_NODES (paths of node binaries, space-separated)
#   Python  pytest interop/python: fixtures, processes, Node interop with pyarrow as referee
#   GPU     ava test/gpu: skipped, with the reason, where there is no GPU
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0 failed=0 skipped=0
log=$(mktemp -d)

count_tap() { # file -> adds ava TAP totals
  local p f s
  p=$(grep -E '^# pass [0-9]+' "$1" | awk '{print $3}' | tail -1)
  f=$(grep -E '^# fail [0-9]+' "$1" | awk '{print $3}' | tail -1)
  s=$(grep -E '^# skip [0-9]+' "$1" | awk '{print $3}' | tail -1)
  if [[ -z $p && -z $f ]]; then
    # No totals: ava ended early. A test that timed out does that under --tap
    # (ava 7's TAP reporter throws on its timeout event: avajs/ava#3461), so
    # count what did finish and the early end as one failure.
    p=$(grep -cE '^ok [0-9]+ ' "$1"); s=$(grep -cE '^ok [0-9]+ .*# SKIP' "$1"); f=$(grep -cE '^not ok [0-9]+ ' "$1")
    echo "ava ended without its totals (a test timed out?): $((p - s)) passed, $f failed, $s skipped before it; run \`npx ava\` without --tap to see which test hung"
    passed=$((passed + p - s)); failed=$((failed + f + 1)); skipped=$((skipped + s)); return
  fi
  passed=$((passed + ${p:-0})); failed=$((failed + ${f:-0})); skipped=$((skipped + ${s:-0}))
}

echo "== C suites =="
bash scripts/test-c.sh 2>&1 | tee "$log/c.txt"
c=$(grep -E '^c: [0-9]+ passed, [0-9]+ failed' "$log/c.txt" | tail -1)
if [[ -n $c ]]; then
  passed=$((passed + $(echo "$c" | awk '{print $2}'))); failed=$((failed + $(echo "$c" | awk '{print $4}')))
else
  failed=$((failed + 1))
fi

echo "== TypeScript suites =="
npx ava --tap 2>&1 | tee "$log/ts.txt"
count_tap "$log/ts.txt"
# The same addon and suites on other Node.js lines: Node-API keeps the addon's ABI,
# but what Node lends and allows changes between them (buffer.constants.MAX_LENGTH).
for node_bin in ${GPURING_MORE_NODES:-}; do
  echo "== TypeScript suites on Node.js $("$node_bin" --version) =="
  PATH="$(dirname "$node_bin"):$PATH" npx ava --tap 2>&1 | tee "$log/ts-more.txt"
  count_tap "$log/ts-more.txt"
done

echo "== Python suite =="
count_pytest() { # file -> adds pytest's final "N passed, N failed, N skipped, N error" line
  local line n
  line=$(grep -E '^=*.* in [0-9.]+s' "$1" | tail -1)
  [[ -z $line ]] && { failed=$((failed + 1)); return; }
  n=$(echo "$line" | grep -Eo '[0-9]+ passed' | awk '{print $1}'); passed=$((passed + ${n:-0}))
  n=$(echo "$line" | grep -Eo '[0-9]+ failed' | awk '{print $1}'); failed=$((failed + ${n:-0}))
  n=$(echo "$line" | grep -Eo '[0-9]+ errors?' | awk '{print $1}'); failed=$((failed + ${n:-0}))
  n=$(echo "$line" | grep -Eo '[0-9]+ skipped' | awk '{print $1}'); skipped=$((skipped + ${n:-0}))
}
if python3 -c 'import pytest, pyarrow, numpy, build, mypy' 2>/dev/null; then
  python3 -m pytest -rs -p no:cacheprovider interop/python 2>&1 | tee "$log/py.txt"
  count_pytest "$log/py.txt"
else
  echo "Python suite: needs pytest, pyarrow, numpy, build and mypy (python3 -m pip install pytest pyarrow numpy build mypy)"; failed=$((failed + 1))
fi

echo "== GPU suite =="
npx ava --tap --config ava.gpu.config.js 2>&1 | tee "$log/gpu.txt"
count_tap "$log/gpu.txt"
npx ava --tap --config ava.gpu-alone.config.js 2>&1 | tee "$log/gpu-alone.txt"
count_tap "$log/gpu-alone.txt"

echo "== fuzz and torture runs =="
grep -hE '^\[(plain|address)\] fuzz_' "$log/c.txt"
grep -hE '^# +[0-9]+ (bodies \(seed|processes \()' "$log/ts.txt" | sed 's/^# *//'

rm -rf "$log"
echo "$passed passed, $failed failed, $skipped skipped"
[[ $failed -eq 0 ]]
