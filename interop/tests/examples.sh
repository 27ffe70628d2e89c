#!/usr/bin/env bash
# ctest c_examples_host: the C producer and the C consumer in two processes.
# The consumer's checksums must match what the producer's columns hold:
# per frame k of R rows, id = k*R .. k*R+R-1, score = id/4 except where
# id % 7 == 0 (null), name = "row-<id>".
set -euo pipefail
producer=$1 consumer=$2
ring="ex$$"
frames=5 rows=1000
out=$(mktemp)
trap 'rm -f "$out"; kill $pid 2>/dev/null || true' EXIT
"$consumer" "$ring" "$frames" 20000 >"$out" &
pid=$!
"$producer" "$ring" "$frames" "$rows" >/dev/null
wait $pid
python3 - "$out" "$frames" "$rows" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
frames, rows = int(sys.argv[2]), int(sys.argv[3])
assert len(lines) == frames, lines
for k, f in enumerate(lines):
    ids = range(k * rows, (k + 1) * rows)
    want = {
        "id": ("l", 0, float(sum(ids)), None),
        "score": ("g", sum(1 for i in ids if i % 7 == 0), sum(i / 4 for i in ids if i % 7), None),
        "name": ("u", 0, None, sum(len(f"row-{i}") for i in ids)),
    }
    assert f["frame"] == k + 1 and f["tag"] == k and f["rows"] == rows, f
    for c in f["columns"]:
        fmt, nulls, total, chars = want[c["name"]]
        assert (c["format"], c["nulls"], c["memory"]) == (fmt, nulls, "host"), c
        assert c.get("sum") == total and c.get("chars") == chars, (c, total, chars)
print(f"c_examples_host: {frames} frames of {rows} rows checked")
PY
