#!/usr/bin/env bash
# Builds and runs the C suites with ctest: plain, AddressSanitizer+UBSan and
# ThreadSanitizer builds. Prints one "c: N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
passed=0; failed=0
for variant in plain address thread; do
  dir=build-c-$variant
  san=""; [[ $variant != plain ]] && san=$variant
  if ! cmake -S . -B "$dir" -DGPURING_ADDON=OFF -DGPURING_C_TESTS=ON -DGPURING_SANITIZE="$san" \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$dir.log" 2>&1 ||
     ! cmake --build "$dir" -j2 >>"$dir.log" 2>&1; then
    cat "$dir.log"; echo "C build ($variant) failed"; failed=$((failed + 1)); continue
  fi
  out=$(cd "$dir" && ctest --output-on-failure 2>&1); echo "$out" | sed "s/^/[$variant] /"
  # The fuzz runs' counts (bodies, images, verdicts) for the summary.
  grep -h '^fuzz_' "$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sed "s/^/[$variant] /"
  summary=$(echo "$out" | grep -Eo '[0-9]+ tests failed out of [0-9]+' | tail -1)
  f=$(echo "$summary" | awk '{print $1}'); t=$(echo "$summary" | awk '{print $6}')
  if [[ -z $t ]]; then failed=$((failed + 1)); continue; fi
  passed=$((passed + t - f)); failed=$((failed + f))
done
echo "c: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
