"""Child: subscribes to a broadcast ring, says "ready", takes COUNT frames and
says how many carried tags 0, 1, 2, ... in order."""
import sys

from gpuring import Consumer

name, count = sys.argv[1], int(sys.argv[2])
with Consumer.open(name) as consumer:
    print("ready", flush=True)
    in_order = 0
    while in_order < count:
        with consumer.next(timeout=30) as frame:
            if frame.user_tag != in_order:
                break
            in_order += 1
    print("in-order", in_order, flush=True)
