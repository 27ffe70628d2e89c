"""The golden segment images (fixtures/segments: fresh, mid-stream, a dead
participant, a garbage slot record, damaged headers) observed through the
Python API. The C and TypeScript suites observe the same images and must see
the same lines (fixtures/README.md defines the loading rules and the lines)."""
import os
import struct

import pytest

from conftest import FIXTURES
from gpuring import Consumer, GpuringError, Ring
from gpuring.process import pid_namespace, self_start_time

RING = "gpr-fixture-image"  # frame bodies name their arenas, so images keep the name they were made with
ALIVE = 0xFFFFFFFE
DIR = FIXTURES / "segments"
IMAGES = sorted(p.name[: -len(".expect")] for p in DIR.glob("*.expect"))


def load(image: str) -> None:
    seg = bytearray((DIR / f"{image}.segment.bin").read_bytes())
    if len(seg) >= 256:
        if struct.unpack_from("<Q", seg, 72)[0] == 0:
            struct.pack_into("<Q", seg, 72, pid_namespace())
        capacity, at = struct.unpack_from("<I", seg, 40)[0], struct.unpack_from("<Q", seg, 56)[0]
        for i in range(capacity):
            p = at + 128 * i
            if p + 128 > len(seg):
                break
            if struct.unpack_from("<I", seg, p + 8)[0] == ALIVE:
                struct.pack_into("<IxxxxQ", seg, p + 8, os.getpid(), self_start_time())
    with open(f"/dev/shm/gpuring.{RING}", "wb") as f:
        f.write(seg)
    arena = DIR / f"{image}.p0g1.a0.bin"
    if arena.exists():
        with open(f"/dev/shm/gpuring.{RING}.p0g1.a0", "wb") as f:
            f.write(arena.read_bytes())


def unload() -> None:
    for name in (f"gpuring.{RING}", f"gpuring.{RING}.p0g1.a0"):
        if os.path.exists(f"/dev/shm/{name}"):
            os.unlink(f"/dev/shm/{name}")


def observe_frames(lines: list[str]) -> None:
    with Consumer.open(RING) as consumer:
        for _ in range(20):
            try:
                frame = consumer.try_next()
            except GpuringError as e:
                lines.append(f"error {e.code}")
                continue
            if frame is None:
                lines.append("empty")
                break
            with frame:
                seq = frame.to_arrow().column("seq")[0].as_py()
                lines.append(f"frame {frame.frame_id} {frame.user_tag} {seq}")
                del seq


def observe() -> str:
    try:
        ring = Ring.open(RING, timeout=0.05)
    except GpuringError as e:
        return f"open {e.code}\n"
    lines = ["open OK"]
    with ring:
        seen = ring.inspect()
        lines.append("states " + " ".join(f"{k}={v}" for k, v in seen["slotStates"].items()))
        for p in seen["participants"]:
            lines.append(f"participant {p['index']} {p['generation']} {p['state']} {'alive' if p['alive'] else 'dead'}")
            if "subscriber" in p:
                sub = p["subscriber"]
                lines.append(f"subscriber {p['index']} held={sub['held']} unread={sub['unread']} missed={sub['missed']}")
        r = ring.sweep()
        lines.append(f"sweep found_dead={r.found_dead} released={r.released} redelivered={r.redelivered} recycled={r.recycled}")
        observe_frames(lines)
    return "\n".join(lines) + "\n"


def test_there_are_segment_images():
    for name in ("fresh", "mid-stream", "dead-participant", "garbage-slot", "damaged-hints", "corrupt-foreign", "corrupt-namespace",
                 "broadcast-mid-stream", "broadcast-dead-subscriber"):
        assert name in IMAGES


@pytest.mark.parametrize("image", IMAGES)
def test_segment_image_is_observed_as_its_expect_file_says(image):
    load(image)
    try:
        assert observe() == (DIR / f"{image}.expect").read_text()
    finally:
        unload()
