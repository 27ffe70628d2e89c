"""Host B of a bridge test: creates RING (SLOTS slots), says "created", sleeps
DELAY seconds if given, takes
frames until COUNT distinct ones arrived or WAIT seconds pass without one (the
first may take up to a minute: processes starting and bridges connecting on a
loaded 2-core machine took more than 5 s once), checks each
against what the producer published for its user tag (device frames: on this
host's device, read with CuPy), says "progress N" every
500 frames, and prints one JSON line at the end: the tags in arrival order and
the frames that differed."""
import json
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc

import gpuring
from all_types import all_types_table

FIRST_FRAME_WAIT = 60.0
ring, count, kind, slots, wait = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
gpuring.Ring.create(ring, slots=slots, exist_ok=True).close()  # a test may have made it (broadcast)
print("created", flush=True)
if len(sys.argv) > 6:  # a test looks at the stalled bridge meanwhile
    time.sleep(float(sys.argv[6]))
tags, wrong, distinct = [], [], set()
with gpuring.Consumer.open(ring) as c:
    while len(distinct) < count:  # a repeat (after a killed sink) does not count
        try:
            frame = c.next(timeout=wait if tags else max(wait, FIRST_FRAME_WAIT))
        except gpuring.GpuringError as e:
            if e.code != "TIMEOUT":
                raise
            break
        with frame:
            i = frame.user_tag
            if kind == "device":  # in this host's device memory, all i
                x = frame.to_cupy()["x"] if frame.on_device else None
                if x is None or x.size != 1000 + 4096 * (i % 7) or not bool((x == i).all()):
                    wrong.append(i)
                del x
            elif kind == "big":  # 16 MiB, all i
                v = frame.to_arrow().column("v")
                if len(v) != 2 << 20 or pc.min_max(v).as_py() != {"min": i, "max": i}:
                    wrong.append(i)
                del v
            else:
                want = all_types_table(1 + i % 9) if kind == "all-types" else pa.table({"id": pa.array([i], pa.int64())})
                if not pa.Table.from_batches([frame.to_arrow()]).equals(want):
                    wrong.append(i)
            tags.append(i)
            distinct.add(i)
            if len(tags) % 500 == 0:
                print("progress", len(tags), flush=True)
print(json.dumps({"tags": tags, "wrong": wrong}), flush=True)
