"""The golden segment images (fixtures/segments: fresh, mid-stream, a dead
participant, a garbage slot record, damaged headers) observed through the
Python API. The C and TypeScript suites observe the same images and must see
the same lines (fixtures/README.md defines the loading rules and the lines)."""
import pytest

from gpuring import Consumer, GpuringError, Ring
from segment_image import DIR, IMAGES, RING, image_bytes, load, unload


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
    load(*image_bytes(image))
    try:
        assert observe() == (DIR / f"{image}.expect").read_text()
    finally:
        unload()
