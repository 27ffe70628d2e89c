"""What a bridge reports while it runs: frames and bytes across, frames in
flight, the link, as human-readable lines or JSON lines (``--json``)."""
from __future__ import annotations

import json
import sys
import time
from typing import Any, TextIO


class BridgeStats:
    def __init__(self, ring: str, role: str, out: TextIO | None = None, as_json: bool = False) -> None:
        self.ring, self.role = ring, role
        self.frames = self.bytes = self.in_flight = self.repeats = 0
        self.peer: str | None = None
        self._out, self._json = out, as_json
        self._last_ack = time.monotonic()

    def event(self, what: str, **fields: Any) -> None:
        if self._out is None:
            return
        if self._json:
            line = json.dumps({"event": what, "ring": self.ring, "role": self.role, **fields})
        else:
            line = f"bridge ({self.role} of ring '{self.ring}'): {what}" + "".join(f", {k} {v}" for k, v in fields.items())
        print(line, file=self._out, flush=True)

    def linked(self, peer: str, peer_ring: str) -> None:
        self.peer = peer
        self.event("linked", peer=peer, peer_ring=peer_ring)

    def unlinked(self) -> None:
        if self.peer is not None:
            self.event("link ended", peer=self.peer, in_flight=self.in_flight)
        self.peer, self.in_flight = None, 0  # frames in flight are sent again on the next link

    def sent(self, nbytes: int) -> None:
        self.in_flight += 1
        self.bytes += nbytes

    def acked(self) -> None:
        self.in_flight -= 1
        self.frames += 1
        self._last_ack = time.monotonic()

    def received(self, nbytes: int, repeat: bool) -> None:
        self.frames += 1
        self.bytes += nbytes
        self.repeats += repeat

    def damaged(self, why: str) -> None:
        self.event("damaged frame released, not forwarded", error=why)

    def summary(self) -> dict[str, Any]:
        return {"frames": self.frames, "bytes": self.bytes, "in_flight": self.in_flight, "repeats_dropped": self.repeats,
                "seconds_since_ack": round(time.monotonic() - self._last_ack, 3), "peer": self.peer}

    def progress(self) -> None:
        self.event("progress", **self.summary())


def stderr_stats(ring: str, role: str, as_json: bool) -> BridgeStats:
    return BridgeStats(ring, role, sys.stderr, as_json)
