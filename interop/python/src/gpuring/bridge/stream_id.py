"""A ring's identity across machines and restarts of its bridges: what a sink
keys the frames it has published on, to drop a frame sent again (SPEC.md §14.4)."""
from __future__ import annotations

import hashlib

from .. import layout as L
from ..segment import Segment


def _boot_id() -> bytes:
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            return f.read().strip()
    except OSError:
        return b""


def stream_id(seg: Segment) -> bytes:
    """16 bytes naming this segment: machine boot, name, creation time and creator.
    A ring made again under the same name is another stream."""
    h = L.SEGMENT_HEADER
    return stream_id_of(_boot_id(), seg.name, seg.mem.load64(h["created_unix_ns"]), seg.mem.load32(h["creator_pid"]))


def stream_id_of(boot_id: bytes, name: str, created_unix_ns: int, creator_pid: int) -> bytes:
    return hashlib.sha256(b"%s/%s/%d/%d" % (boot_id, name.encode(), created_unix_ns, creator_pid)).digest()[:16]
