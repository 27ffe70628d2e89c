"""Child: takes COUNT frames (with next_held when a third argument says "held"),
never releases them, says so, waits to be killed."""
import sys
import time

from gpuring import Consumer

name, count = sys.argv[1], int(sys.argv[2])
consumer = Consumer.open(name)
take = consumer.next_held if sys.argv[3:] == ["held"] else consumer.next
held = [take(timeout=30) for _ in range(count)]
print("held", " ".join(str(f.frame_id) for f in held), flush=True)
time.sleep(600)
