"""Loading a golden segment image (fixtures/segments) into /dev/shm, as the
fixture test and the segment fuzz test both do (the C tests' segment_image.h).
Images were made under RING (frame bodies name their arenas, and arena names
embed the ring name), with PID namespace 0 and live participants' pids ALIVE:
a loader writes its own namespace, pid and start time. Every offset is
bounds-checked: the fuzz test loads damaged images."""
from __future__ import annotations

import os
import struct

from conftest import FIXTURES
from gpuring.process import pid_namespace, self_start_time

RING = "gpr-fixture-image"
ALIVE = 0xFFFFFFFE
DIR = FIXTURES / "segments"
IMAGES = sorted(p.name[: -len(".expect")] for p in DIR.glob("*.expect"))


def image_bytes(image: str) -> tuple[bytearray, bytearray | None]:
    """The segment image and producer 0's arena (None where the image has none)."""
    arena = DIR / f"{image}.p0g1.a0.bin"
    return bytearray((DIR / f"{image}.segment.bin").read_bytes()), bytearray(arena.read_bytes()) if arena.exists() else None


def adopt(seg: bytearray) -> None:
    """Makes the image ours: our PID namespace where it has none, our pid for ALIVE entries."""
    if len(seg) < 256:
        return
    if struct.unpack_from("<Q", seg, 72)[0] == 0:
        struct.pack_into("<Q", seg, 72, pid_namespace())
    capacity, at = struct.unpack_from("<I", seg, 40)[0], struct.unpack_from("<Q", seg, 56)[0]
    for i in range(capacity):
        p = at + 128 * i
        if p + 128 > len(seg):
            break
        if struct.unpack_from("<I", seg, p + 8)[0] == ALIVE:
            struct.pack_into("<IxxxxQ", seg, p + 8, os.getpid(), self_start_time())


def load(seg: bytearray, arena: bytearray | None) -> None:
    adopt(seg)
    with open(f"/dev/shm/gpuring.{RING}", "wb") as f:
        f.write(seg)
    if arena is not None:
        with open(f"/dev/shm/gpuring.{RING}.p0g1.a0", "wb") as f:
            f.write(arena)


def unload() -> None:
    """Removes the segment and every arena of its ring."""
    for name in os.listdir("/dev/shm"):
        if name == f"gpuring.{RING}" or name.startswith(f"gpuring.{RING}."):
            os.unlink(f"/dev/shm/{name}")
