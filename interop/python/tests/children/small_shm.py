"""Runs inside a private /dev/shm of a few tens of MiB (test_shared_memory_short.py)
and prints one JSON line of what happened:

    small_shm.py stream RING FRAMES MIB   a slow consumer (a child) checks every frame
    small_shm.py stuck RING MIB           nobody consumes: publishing must fail, not hang
    small_shm.py fallback RING            /dev/shm nearly full: a 64 MiB-arena producer publishes
    small_shm.py reopen RING              Ring.create(exist_ok=True) of a ring there, no room for a copy
    small_shm.py consume RING FRAMES      (the stream's consumer)
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

import gpuring
from gpuring.errors import GpuringError

MiB = 1 << 20


def table(i: int, mib: int) -> object:
    import pyarrow as pa
    values = np.full(mib * MiB // 8, i, np.int64)
    return pa.table({"v": values})


def consume(ring: str, frames: int) -> None:
    seen = []
    with gpuring.Consumer.open(ring) as c:
        for _ in range(frames):
            with c.next(timeout=60) as f:
                v = f.to_arrow().column("v")
                seen.append(int(v[0].as_py()) if v[0].as_py() == v[len(v) - 1].as_py() else -1)
                time.sleep(0.005)
    print(json.dumps({"seen": seen}), flush=True)


def stream(ring: str, frames: int, mib: int) -> dict:
    gpuring.Ring.create(ring, slots=64).close()
    child = subprocess.Popen([sys.executable, __file__, "consume", ring, str(frames)], stdout=subprocess.PIPE, text=True)
    with gpuring.Producer.open(ring) as p:
        for i in range(frames):
            p.publish(table(i, mib), timeout=60)
        p.drain(timeout=60)
    out, _ = child.communicate(timeout=60)
    return {"published": frames, **json.loads(out)}


def stuck(ring: str, mib: int) -> dict:
    gpuring.Ring.create(ring, slots=64).close()
    with gpuring.Producer.open(ring) as p:
        published = 0
        try:
            while published < 1000:
                p.publish(table(published, mib), block=False)
                published += 1
        except GpuringError as e:
            at_once = e.code
        t = time.monotonic()
        try:
            p.publish(table(published, mib), timeout=0.3)
            waited = "published"
        except GpuringError as e:
            waited = str(e)
        return {"published": published, "at_once": at_once, "waited": waited, "seconds": time.monotonic() - t}


def fallback(ring: str) -> dict:
    gpuring.Ring.create(ring, slots=8).close()
    vfs = os.statvfs("/dev/shm")
    free = vfs.f_bavail * vfs.f_frsize
    with open("/dev/shm/filler", "wb") as f:
        os.posix_fallocate(f.fileno(), 0, free - 12 * MiB)
    with gpuring.Producer.open(ring, arena_size=64 * MiB) as p:
        frame_id = p.publish(table(7, 1))
    return {"frame_id": frame_id}


def reopen(ring: str) -> dict:
    """Ring.create(exist_ok=True) of a ring that is there, with no room for a second copy."""
    first = gpuring.Ring.create(ring, slots=1 << 16, participants=1024)
    vfs = os.statvfs("/dev/shm")
    again = gpuring.Ring.create(ring, slots=1 << 16, participants=1024, exist_ok=True)
    info = again.inspect()
    result = {"free_bytes": vfs.f_bavail * vfs.f_frsize, "total_bytes": info["bytes"], "slots": info["slots"]}
    again.close()
    first.close()
    return result


if __name__ == "__main__":
    mode, ring, *rest = sys.argv[1:]
    if mode == "consume":
        consume(ring, int(rest[0]))
    else:
        result = {"stream": lambda: stream(ring, int(rest[0]), int(rest[1])), "stuck": lambda: stuck(ring, int(rest[0])),
                  "fallback": lambda: fallback(ring), "reopen": lambda: reopen(ring)}[mode]()
        print(json.dumps(result), flush=True)
