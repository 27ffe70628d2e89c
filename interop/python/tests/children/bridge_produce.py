"""Host A of a bridge test: creates RING, says "created", publishes COUNT frames
of KIND, waits until all were released (the bridge acknowledged them), says
"drained". The IPC referee (below) is written before "created". KIND: ids (one int64 id), all-types (every type, 1 + i % 9 rows),
device (CuPy, one float32 column "x" of 1000 + 4096 * (i % 7) values, all i), big (one int64 column "v" of
16 MiB, all i).
Frame i has user tag i. With IPC, the host tables are also written there, in
order, as an Arrow IPC stream (the referee of a Node consumer on host B)."""
import sys

import numpy as np
import pyarrow as pa

import gpuring
from all_types import all_types_table

BIG_VALUES = 2 << 20  # 16 MiB of int64
ring, count, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ipc = sys.argv[4] if len(sys.argv) > 4 else None


def frame(i: int) -> object:
    if kind == "device":
        import cupy
        return {"x": cupy.full(1000 + 4096 * (i % 7), i, dtype=cupy.float32)}
    if kind == "big":
        return pa.table({"v": pa.array(np.full(BIG_VALUES, i, np.int64))})
    return all_types_table(1 + i % 9) if kind == "all-types" else pa.table({"id": pa.array([i], pa.int64())})


gpuring.Ring.create(ring, slots=64, exist_ok=True).close()  # a test may have made it (broadcast)
if ipc:
    tables = [frame(i) for i in range(count)]
    with pa.ipc.new_stream(ipc, tables[0].schema) as w:  # a stream: dictionaries change from table to table
        for t in tables:
            w.write_table(t)
print("created", flush=True)
with gpuring.Producer.open(ring) as p:
    for i in range(count):
        p.publish(frame(i), user_tag=i)
    p.drain(timeout=120)
print("drained", flush=True)
