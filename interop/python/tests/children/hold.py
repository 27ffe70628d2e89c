"""Child: takes COUNT frames, never releases them, says so, waits to be killed."""
import sys
import time

from gpuring import Consumer

name, count = sys.argv[1], int(sys.argv[2])
consumer = Consumer.open(name)
held = [consumer.next(timeout=30) for _ in range(count)]
print("held", " ".join(str(f.frame_id) for f in held), flush=True)
time.sleep(600)
