"""A named ring: create, open, remove, inspect and repair it."""
from __future__ import annotations

import os
import time
from typing import Any

from . import broadcast, layout as L
from .deadline import deadline_after
from .errors import GpuringError
from .recovery import SweepReport, sweep
from .segment import Segment, check_name, segment_path


class Ring:
    """A segment, /dev/shm/gpuring.NAME. ``Ring.create`` makes one (it persists
    until ``Ring.unlink``); producers and consumers open it by name."""

    def __init__(self, seg: Segment) -> None:
        self.segment = seg

    @staticmethod
    def create(name: str, slots: int = 1024, participants: int = 64, mode: int = 0o600,
               exist_ok: bool = False, delivery: str = "each") -> "Ring":
        """Creates ring ``name``; SEGMENT_EXISTS if the name is taken, unless
        ``exist_ok``, which opens the ring that is there as it is (its own slots,
        participants and mode), so that a producer can be started again.
        ``delivery``: ``"each"`` frame to one consumer (a work queue), or ``"all"``
        subscribers receive every frame (a broadcast ring of at most 64
        participants, SPEC.md §5.4; see ``Consumer.open``'s ``on_slow``). The
        segment is built unnamed and named once whole, so a process killed while
        creating it leaves no ring or a ready one (SPEC.md §3.1)."""
        for _ in range(100):
            try:
                return Ring(Segment.create(name, slots, participants, mode, delivery))
            except GpuringError as e:
                if not exist_ok or e.code != "SEGMENT_EXISTS":
                    raise
            try:
                return Ring.open(name)
            except GpuringError as e:  # removed between the two calls: create it again
                if e.code != "SEGMENT_NOT_FOUND":
                    raise
        raise GpuringError("SEGMENT_NOT_FOUND", f"segment '{name}' kept disappearing while being opened")

    @staticmethod
    def wait_for(name: str, timeout: float | None = None) -> None:
        """Returns once ring ``name`` exists (then open it as usual), so that a
        process may start before the ring's creator; SEGMENT_NOT_FOUND after
        ``timeout`` seconds (None: no limit)."""
        check_name(name)
        deadline = deadline_after(timeout)
        while not os.path.exists(segment_path(name)):
            if deadline is not None and time.monotonic() >= deadline:
                raise GpuringError("SEGMENT_NOT_FOUND", f"no segment named '{name}' after waiting {timeout} s")
            time.sleep(0.01 if deadline is None else max(0.0, min(0.01, deadline - time.monotonic())))

    @staticmethod
    def open(name: str, timeout: float = 1.0, any_owner: bool = False) -> "Ring":
        """Opens an existing ring, waiting up to ``timeout`` seconds for a creator still initializing it; ``any_owner`` joins a ring another user created."""
        return Ring(Segment.open(name, timeout, any_owner))

    @staticmethod
    def unlink(name: str) -> None:
        """Removes the name; processes that have it open keep using it."""
        Segment.unlink(name)

    @property
    def name(self) -> str:
        """The ring's name: its segment is /dev/shm/gpuring.NAME."""
        return self.segment.name

    def sweep(self) -> SweepReport:
        """Finds dead participants and repairs what they held."""
        return sweep(self.segment)

    def inspect(self) -> dict[str, Any]:
        """Slot states and participants (in a broadcast ring, each subscriber's standing),
        as ``gpuring inspect --json`` reports them."""
        seg = self.segment
        states = [0] * len(L.SLOT_STATES)
        for i in range(seg.slot_count):
            states[L.word_state(seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)) % len(states)] += 1
        participants = []
        for i in range(seg.participant_capacity):
            w = seg.participant_word(i)
            if L.pword_state(w) == L.P_FREE:
                continue
            entry: dict[str, Any] = {"index": i, "generation": w >> 32,
                                     "state": L.PARTICIPANT_STATES[min(L.pword_state(w), 4)],
                                     "pid": seg.mem.load32(seg.participant(i, "pid")),
                                     "roles": _role_names(seg.mem.load32(seg.participant(i, "roles"))),
                                     "alive": seg.participant_alive(i),
                                     "asleep": _bell_names(seg.mem.load32(seg.participant(i, "doorbell")))}
            if seg.broadcast and seg.mem.load32(seg.participant(i, "subscription")):
                entry["subscriber"] = broadcast.standing(seg, i)
            participants.append(entry)
        return {"name": seg.name, "slots": seg.slot_count, "bytes": seg.size,
                "delivery": "all" if seg.broadcast else "each",
                "slotStates": dict(zip(L.SLOT_STATES, states)), "participants": participants,
                "doorbells": {"data": seg.mem.load32(seg.control("data_doorbells")),
                              "space": seg.mem.load32(seg.control("space_doorbells"))},
                "recovered": seg.mem.load64(seg.control("recovered"))}

    def close(self) -> None:
        """Unmaps the segment from this process; the ring itself stays (see ``unlink``)."""
        self.segment.close()

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _bell_names(bits: int) -> list[str]:
    """What a participant sleeps on its doorbell for (SPEC.md §6.1), as ``gpuring inspect`` names it."""
    return [n for bit, n in ((L.BELL_DATA, "data"), (L.BELL_SPACE, "space")) if bits & bit]


def _role_names(roles: int) -> list[str]:
    return [n for bit, n in ((L.ROLE_PRODUCER, "producer"), (L.ROLE_CONSUMER, "consumer"), (L.ROLE_BRIDGE, "bridge"))
            if roles & bit]
