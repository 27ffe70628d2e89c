"""Child: publishes COUNT one-row frames (seq, text derived from seq), drains, exits 0."""
import sys

import pyarrow as pa

from gpuring import Producer

name, count = sys.argv[1], int(sys.argv[2])
with Producer.open(name) as producer:
    for seq in range(count):
        producer.publish(pa.table({"seq": pa.array([seq], pa.int64()), "text": [f"frame {seq} " + "x" * (seq % 7)]}), timeout=30)
    producer.drain(timeout=30)
print("drained", flush=True)
