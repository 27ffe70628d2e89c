"""The bounded MPMC ring of frame references: gpuring/ring.h, step for step.

Each slot word is seq:48 | state:3 | owner:13. Every claim is one CAS that also
writes the claimer's participant index, so a survivor can repair the slot if
its owner dies (recovery.py). ``tail`` and ``head`` are hints only.
"""
from __future__ import annotations

import os
import struct
import time
from typing import Callable, TypeVar
from dataclasses import dataclass

from . import doorbell, layout as L
from .deadline import deadline_after
from .errors import GpuringError
from .layout import slot_word, seq_diff, word_owner, word_seq, word_state
from .segment import Segment

T = TypeVar("T")

_REF = struct.Struct("<QIIIIQQII")
assert _REF.size == L.REF_BYTES


@dataclass(frozen=True)
class FrameRef:
    """What a slot carries: where the frame body lies. Copied out, then validated."""
    frame_id: int
    producer: int
    producer_gen: int
    body_arena: int
    body_length: int
    body_offset: int
    user_tag: int = 0

    def pack(self) -> bytes:
        return _REF.pack(self.frame_id, self.producer, self.producer_gen, self.body_arena,
                         self.body_length, self.body_offset, self.user_tag, 0, 0)

    @staticmethod
    def unpack(raw: bytes) -> "FrameRef":
        return FrameRef(*_REF.unpack(raw)[:7])


def _ref_at(seg: Segment, pos: int) -> int:
    return seg.slot(pos) + L.SLOT["ref"]


def _hint_advance(seg: Segment, field: str, pos: int) -> None:
    at = seg.control(field)
    if seq_diff(pos, seg.mem.load64(at)) > 0:
        seg.mem.store64(at, pos & L.SEQ_MASK)


def _hint_reload(seg: Segment, field: str, pos: int) -> int:
    """The hint if less than a lap ahead of ``pos``, else pos + 1: a hint moved far
    ahead (damage, a hostile writer) must not send a scan where no slot serves."""
    h = seg.mem.load64(seg.control(field)) & L.SEQ_MASK
    return h if 0 < seq_diff(h, pos + 1) < seg.slot_count else (pos + 1) & L.SEQ_MASK


def _scan_limit(seg: Segment) -> int:
    """Steps a scan over slots may take per call (two laps): values read from
    shared memory must never make a non-blocking call spin."""
    return 2 * seg.slot_count + 2


def notify_data(seg: Segment, doorbells: int | None = None) -> None:
    """Wakes every futex sleeper and up to ``doorbells`` doorbell sleepers (None: all)."""
    seg.mem.notify(seg.control("data_seq"), seg.control("data_waiters"))
    if seg.mem.load32(seg.control("data_doorbells")):
        doorbell.ring(seg, L.BELL_DATA, doorbells)


def notify_published(seg: Segment, rung: int | None) -> None:
    """The DATA notification of a work-queue publish: one doorbell sleeper, or, after
    a heads-up that reached entry ``rung``, that entry again only if it went back to
    sleep and nobody else (gpr_notify_published_rung). Futex sleepers as always."""
    if rung is None or not 0 <= rung < seg.participant_capacity:
        return notify_data(seg, doorbells=1)
    seg.mem.notify(seg.control("data_seq"), seg.control("data_waiters"))
    doorbell.ring_again(seg, rung)


def notify_space(seg: Segment) -> None:
    seg.mem.notify(seg.control("space_seq"), seg.control("space_waiters"))
    if seg.mem.load32(seg.control("space_doorbells")):
        doorbell.ring(seg, L.BELL_SPACE)


def try_publish(seg: Segment, me: int, ref: FrameRef, rung: int | None = None) -> int | None:
    """Publishes ``ref`` as participant ``me``; its position, or None when full.
    ``rung``: whom this producer's heads-up reached (``doorbell.heads_up``)."""
    packed = ref.pack()  # before claiming a slot: a ref that cannot be written must not leave one WRITING
    seg.check_held(me, ref.producer_gen)
    mem, pos = seg.mem, seg.mem.load64(seg.control("tail")) & L.SEQ_MASK
    for _ in range(_scan_limit(seg)):
        at = seg.slot(pos)
        w = mem.load64(at)
        d = seq_diff(word_seq(w), pos)
        if d == 0 and word_state(w) == L.EMPTY:
            if not mem.cas64(at, w, slot_word(pos, L.WRITING, me + 1)):
                continue
            _hint_advance(seg, "tail", pos + 1)
            mem.write(_ref_at(seg, pos), packed)
            if seg.broadcast:
                from .broadcast import finish_publish  # broadcast.py builds on this module
                finish_publish(seg, me, pos)
            # A CAS from the exact WRITING word: a sweeper may have taken the claim back.
            elif not mem.cas64(at, slot_word(pos, L.WRITING, me + 1), slot_word(pos, L.READY, me + 1)):
                raise GpuringError("FRAME_STATE", "the ring took this producer's slot back (was it judged dead?)")
            else:
                notify_published(seg, rung)  # one consumer can take the frame (SPEC.md §6.1)
            seg.count(me, "published")
            return pos
        if d == 0:
            pos = (pos + 1) & L.SEQ_MASK
        elif d < -seg.slot_count:  # a hint no slot can match: trust the slot
            pos = word_seq(w)
        elif d < 0:
            if seg.broadcast:
                from .broadcast import relieve
                relieve(seg, word_seq(w))  # slow subscribers' policies (SPEC.md §5.4)
            return None
        else:
            pos = _hint_reload(seg, "tail", pos)
    return None  # no free slot within two laps: full for now


def describe_full(seg: Segment) -> str:
    """Who holds the ring up (the slot producers reuse next, a lap behind the tail),
    worded as gpr_ring_describe_full: one unreleased frame fills a ring of any size."""
    tail = seg.mem.load64(seg.control("tail")) & L.SEQ_MASK
    w = seg.mem.load64(seg.slot(tail))
    st, owner = word_state(w), word_owner(w)
    pid = seg.mem.load32(seg.participant(owner - 1, "pid")) if 1 <= owner <= seg.participant_capacity else 0
    why = {L.READY: "not taken yet", L.LEASED: "not released", L.CLAIMED: "being taken",
           L.RELEASED: "not reclaimed"}.get(st, "in use")
    state = L.SLOT_STATES[st] if st < len(L.SLOT_STATES) else "?"
    return (f"ring '{seg.name}' full: next slot {tail & seg.mask} (pos {word_seq(w)}) {state} by participant "
            f"{max(owner - 1, 0)} (pid {pid}), {why}; slots free in order")


def _take(seg: Segment, me: int, pos: int, w: int) -> FrameRef | None:
    if not seg.mem.cas64(seg.slot(pos), w, slot_word(pos, L.CLAIMED, me + 1)):
        return None
    return FrameRef.unpack(seg.mem.read(_ref_at(seg, pos), L.REF_BYTES))


def _take_redelivered(seg: Segment, me: int, upto: int) -> tuple[int, FrameRef] | None:
    mem, at = seg.mem, seg.control("redeliver")
    r = mem.load64(at)
    start = r >> 16
    if start == L.REDELIVER_NONE or r == 0:
        return None
    # Slots hold one lap: a position more than a lap behind ``upto`` cannot be READY.
    pos = start if seq_diff(upto, start) <= seg.slot_count else (upto - seg.slot_count) & L.SEQ_MASK
    while seq_diff(upto, pos) >= 0:
        w = mem.load64(seg.slot(pos))
        if word_seq(w) == pos and word_state(w) == L.READY:
            ref = _take(seg, me, pos, w)
            if ref:
                return pos, ref
        pos = (pos + 1) & L.SEQ_MASK
    mem.cas64(at, r, L.REDELIVER_NONE << 16 | ((r + 1) & 0xFFFF))
    return None


def try_claim(seg: Segment, me: int) -> tuple[int, FrameRef] | None:
    """Takes the oldest READY frame (state CLAIMED); None when the ring is empty."""
    if seg.broadcast:
        from .broadcast import try_claim as subscriber_claim
        return subscriber_claim(seg, me)
    mem, pos = seg.mem, seg.mem.load64(seg.control("head")) & L.SEQ_MASK
    for _ in range(_scan_limit(seg)):
        w = mem.load64(seg.slot(pos))
        d, st = seq_diff(word_seq(w), pos), word_state(w)
        if d < -seg.slot_count:  # a hint no slot can match: trust the slot
            pos = word_seq(w)
            continue
        if d == 0 and st == L.READY:
            ref = _take(seg, me, pos, w)
            if ref is None:
                continue
            _hint_advance(seg, "head", pos + 1)
            return pos, ref
        if d < 0 or (d == 0 and st in (L.EMPTY, L.WRITING)):
            break
        pos = (pos + 1) & L.SEQ_MASK if d == 0 else _hint_reload(seg, "head", pos)
    return _take_redelivered(seg, me, pos)


def transition(seg: Segment, pos: int, state: int, owner: int, to_word: int) -> None:
    if not seg.mem.cas64(seg.slot(pos), slot_word(pos, state, owner), to_word):
        raise GpuringError("FRAME_STATE", f"slot {pos & seg.mask} is not {L.SLOT_STATES[state]} by participant {owner - 1}")


def confirm(seg: Segment, me: int, pos: int) -> bool:
    """Leases a claimed frame; False if the claim was taken back (SPEC.md §5.2,
    Confirm): the frame is READY again for any consumer."""
    # A broadcast claim (the cursor CAS) is final.
    if not seg.broadcast and not seg.mem.cas64(seg.slot(pos), slot_word(pos, L.CLAIMED, me + 1), slot_word(pos, L.LEASED, me + 1)):
        return False
    seg.count(me, "leased")
    return True


def mark_redeliver(seg: Segment, pos: int) -> None:
    mem, at = seg.mem, seg.control("redeliver")
    while True:
        r = mem.load64(at)
        start = r >> 16
        lowest = pos if start == L.REDELIVER_NONE or r == 0 or seq_diff(pos, start) < 0 else start
        if mem.cas64(at, r, lowest << 16 | ((r + 1) & 0xFFFF)):
            break
    mem.add64(seg.control("redelivered"), 1)
    notify_data(seg)


def unclaim_as(seg: Segment, owner: int, pos: int, state: int) -> None:
    """Hands a frame back for another consumer (``owner`` is a participant index)."""
    if seg.broadcast:
        from .broadcast import unclaim
        return unclaim(seg, owner, pos)
    producer = FrameRef.unpack(seg.mem.read(_ref_at(seg, pos), L.REF_BYTES)).producer
    transition(seg, pos, state, owner + 1, slot_word(pos, L.READY, producer + 1))
    mark_redeliver(seg, pos)


def recycle_word(seg: Segment, pos: int, w: int) -> bool:
    if seg.mem.cas64(seg.slot(pos), w, slot_word(pos + seg.slot_count, L.EMPTY, 0)):
        notify_space(seg)
        return True
    return False


def producer_active(seg: Segment, ref: FrameRef) -> bool:
    if ref.producer >= seg.participant_capacity:
        return False
    w = seg.participant_word(ref.producer)
    return L.pword_state(w) == L.P_ACTIVE and w >> 32 == ref.producer_gen


def release_as(seg: Segment, owner: int, pos: int, state: int) -> None:
    """Ends a lease: RELEASED for its producer to reclaim, or EMPTY if that producer is gone."""
    if seg.broadcast:
        from .broadcast import release_as as release_share
        return release_share(seg, owner, pos)
    ref = FrameRef.unpack(seg.mem.read(_ref_at(seg, pos), L.REF_BYTES))
    to = (slot_word(pos, L.RELEASED, ref.producer + 1) if producer_active(seg, ref)
          else slot_word(pos + seg.slot_count, L.EMPTY, 0))
    transition(seg, pos, state, owner + 1, to)
    notify_space(seg)


def release(seg: Segment, me: int, pos: int) -> None:
    release_as(seg, me, pos, L.LEASED)
    seg.count(me, "released")


def reap(seg: Segment, me: int, pos: int) -> bool:
    """Producer side: True once the frame at ``pos`` was released (its memory is free again)."""
    w = seg.mem.load64(seg.slot(pos))
    if word_seq(w) != pos & L.SEQ_MASK:
        return True  # recycled by a sweeper
    if word_state(w) != L.RELEASED or word_owner(w) != me + 1:
        return False
    recycle_word(seg, pos, w)
    return True


SWEEP_EVERY = 0.25  # seconds of waiting between sweeps (SPEC.md §7: waiters sweep)
# How long a waiter polls before it sleeps: a wake-up costs tens of µs, so a frame (or
# space) that comes within this is taken sooner by polling (200 tries before, about as
# long; 50 µs lost latency and throughput in bench:remote on the 16-core H100 host).
# Only with 4 CPUs or more: on fewer, a polling waiter takes the CPU from the very
# process it waits for (bench:remote, 2-core box: 1 MiB frames 1.23-1.41 GB/s without
# polling against 0.86-1.08 with it).
SPIN_S = 1e-3 if len(os.sched_getaffinity(0)) >= 4 else 0.0  # the CPUs this process may run on


def sweep_if_due(seg: Segment, now: float) -> float:
    """Sweeps when SWEEP_EVERY seconds passed since this view's last sweep (its
    first wait starts the clock); returns when the next one is due. The clock is
    the view's, not one wait's: a caller waiting with timeouts shorter than
    SWEEP_EVERY, over and over, must still sweep, or a ring that a dead
    participant holds up would stay stuck for it."""
    from .recovery import sweep  # recovery builds on this module

    if seg.sweep_due == 0.0:
        seg.sweep_due = now + SWEEP_EVERY
    elif now >= seg.sweep_due:
        sweep(seg)
        if seg.takes is not None and seg.attached_index is not None:  # a subscriber's own repair (SPEC.md §5.4)
            from .broadcast import release_strays  # broadcast.py builds on this module
            release_strays(seg, seg.attached_index)
        seg.sweep_due = now + SWEEP_EVERY
    return seg.sweep_due


def try_sweeping(seg: Segment, attempt: Callable[[], T | None]) -> T | None:
    """One attempt, with no wait; when it finds nothing, a sweep if one is due
    (sweep_if_due). A caller that only ever tries never waits, so without this
    nobody in its process would repair the dead peer's slot it is stuck behind."""
    result = attempt()
    if result is None:
        sweep_if_due(seg, time.monotonic())
    return result


def wait_for(seg: Segment, which: str, attempt: Callable[[], T | None], timeout: float | None) -> T:
    """Runs attempt() until it returns something, polling for up to SPIN_S first,
    then sleeping on the futex word ``{which}_seq``. Raise the waiter count, read
    seq, try once more, only then sleep: a wake-up cannot fall between the last try
    and the sleep. Sweeps every SWEEP_EVERY seconds of waiting (sweep_if_due): what
    we wait for may be held by a dead participant (a WRITING slot, a lease), and
    nobody else may be sweeping."""
    deadline = deadline_after(timeout)
    polled_until = time.monotonic() + SPIN_S
    while True:
        result = attempt()
        if result is not None:
            return result
        if time.monotonic() >= polled_until:
            break
    mem = seg.mem
    seq_at, waiters_at = seg.control(f"{which}_seq"), seg.control(f"{which}_waiters")
    while True:
        next_sweep = sweep_if_due(seg, time.monotonic())
        mem.add32(waiters_at, 1)
        try:
            seen = mem.load32(seq_at)
            result = attempt()
            if result is not None:
                return result
            now = time.monotonic()
            left = None if deadline is None else deadline - now
            if left is not None and left <= 0:
                raise GpuringError("TIMEOUT", f"no {'frame' if which == 'data' else 'space'} within {timeout} s")
            # Sleep in slices, so that a Ctrl-C reaches Python promptly and sweeps come on time.
            nap = min(0.1, max(next_sweep - now, 0.001))
            mem.futex_wait(seq_at, seen, nap if left is None else min(left, nap))
        finally:
            mem.add32(waiters_at, -1)
