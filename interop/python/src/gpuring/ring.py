"""A named ring: create, open, remove, inspect and repair it."""
from __future__ import annotations

from . import layout as L
from .recovery import SweepReport, sweep
from .segment import Segment


class Ring:
    """A segment, /dev/shm/gpuring.NAME. ``Ring.create`` makes one (it persists
    until ``Ring.unlink``); producers and consumers open it by name."""

    def __init__(self, seg: Segment) -> None:
        self.segment = seg

    @staticmethod
    def create(name: str, slots: int = 1024, participants: int = 64, mode: int = 0o600) -> "Ring":
        return Ring(Segment.create(name, slots, participants, mode))

    @staticmethod
    def open(name: str, timeout: float = 1.0, any_owner: bool = False) -> "Ring":
        return Ring(Segment.open(name, timeout, any_owner))

    @staticmethod
    def unlink(name: str) -> None:
        """Removes the name; processes that have it open keep using it."""
        Segment.unlink(name)

    @property
    def name(self) -> str:
        return self.segment.name

    def sweep(self) -> SweepReport:
        """Finds dead participants and repairs what they held."""
        return sweep(self.segment)

    def inspect(self) -> dict:
        """Slot states and participants, as ``gpuring inspect --json`` reports them."""
        seg = self.segment
        states = [0] * len(L.SLOT_STATES)
        for i in range(seg.slot_count):
            states[L.word_state(seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)) % len(states)] += 1
        participants = []
        for i in range(seg.participant_capacity):
            w = seg.participant_word(i)
            if L.pword_state(w) == L.P_FREE:
                continue
            participants.append({"index": i, "generation": w >> 32,
                                 "state": L.PARTICIPANT_STATES[min(L.pword_state(w), 4)],
                                 "pid": seg.mem.load32(seg.participant(i, "pid")),
                                 "alive": seg.participant_alive(i)})
        return {"name": seg.name, "slots": seg.slot_count, "bytes": seg.size,
                "slotStates": dict(zip(L.SLOT_STATES, states)), "participants": participants,
                "recovered": seg.mem.load64(seg.control("recovered"))}

    def close(self) -> None:
        self.segment.close()

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
