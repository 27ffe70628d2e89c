"""Host A of a bridge test: creates RING, says "created", publishes COUNT frames
of KIND (ids: one int64 id; all-types: every type, id-many rows), waits until
all were released (the bridge acknowledged them), says "drained"."""
import sys

import pyarrow as pa

import gpuring
from all_types import all_types_table

ring, count, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
gpuring.Ring.create(ring, slots=64).close()
print("created", flush=True)
with gpuring.Producer.open(ring) as p:
    for i in range(count):
        table = all_types_table(1 + i % 9) if kind == "all-types" else pa.table({"id": pa.array([i], pa.int64())})
        p.publish(table, user_tag=i)
    p.drain(timeout=120)
print("drained", flush=True)
