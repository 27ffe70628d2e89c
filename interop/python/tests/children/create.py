"""Child: says "go", then creates ring NAME with SLOTS slots and 1024 participant
entries (a large segment takes a while to build), says "made", waits to be killed."""
import sys
import time

from gpuring import Ring

name, slots = sys.argv[1], int(sys.argv[2])
print("go", flush=True)
Ring.create(name, slots=slots, participants=1024)
print("made", flush=True)
time.sleep(600)
