"""Child: subscribes to a broadcast ring of device frames, says {"ready": true},
reads COUNT frames with to_cupy() and says {"ok": n}: how many held only their
tag's value (JSON lines, as the Node suite's children)."""
import json
import sys

import cupy

from gpuring import Consumer

name, count = sys.argv[1], int(sys.argv[2])
with Consumer.open(name) as consumer:
    print(json.dumps({"ready": True}), flush=True)
    ok = 0
    for _ in range(count):
        with consumer.next(timeout=30) as frame:
            (values,) = frame.to_cupy().values()
            ok += bool((values == frame.user_tag).all())
            del values
    print(json.dumps({"ok": ok}), flush=True)
