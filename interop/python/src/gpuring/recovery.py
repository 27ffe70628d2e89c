"""Finding dead participants and repairing what they held (gpuring/recovery.h).

Any participant may sweep at any time; every repair is a CAS from the exact word
the dead owner left. WRITING of a dead producer is skipped, CLAIMED of a dead
consumer redelivered, LEASED released on its behalf, RELEASED of a dead
producer (or of one that lost its entry) recycled. A dead entry and its arenas
are freed once nothing refers to it.
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

from . import doorbell, layout as L
from .process import pid_running
from .errors import GpuringError
from .layout import slot_word, word_owner, word_seq, word_state
from .slot_consensus import Consensus, consensus, consistent, orphaned, repair_hints, still
from .slot_protocol import FrameRef, recycle_word, release_as, unclaim_as, notify_space
from .segment import Segment


@dataclass
class SweepReport:
    found_dead: int = 0
    freed: int = 0
    skipped: int = 0
    redelivered: int = 0
    released: int = 0
    recycled: int = 0
    corrupt: int = 0


DAMAGE_WINDOW = 4096


def arena_path(segment: str, index: int, gen: int, arena: int) -> str:
    return f"/dev/shm/gpuring.{segment}.p{index}g{gen}.a{arena}"


def _orphaned(w: int) -> bool:
    """An ATTACHING or FREEING word whose process is gone: nobody will finish it."""
    return L.pword_state(w) in (L.P_ATTACHING, L.P_FREEING) and not pid_running(L.pword_pid(w))


def _mark(seg: Segment, rep: SweepReport) -> list[int]:
    """DEAD for gone ACTIVE entries, half-attached ones and damaged ones (states 5-7,
    or ACTIVE with pid bits, which an ACTIVE word never carries; the occupant, if
    alive, fails with DETACHED). For entries to free (DEAD, or FREEING by a dead
    freer) the state word seen here; 0 for the others."""
    dead = []
    for i in range(seg.participant_capacity):
        w = seg.participant_word(i)
        st = L.pword_state(w)
        if ((st == L.P_ACTIVE and (L.pword_pid(w) or not seg.participant_alive(i))) or (st == L.P_ATTACHING and _orphaned(w))
                or st > L.P_FREEING):
            if seg.mem.cas64(seg.participant(i), w, L.pword(w >> 32, 0, L.P_DEAD)):
                rep.found_dead += 1
            w = seg.participant_word(i)
            st = L.pword_state(w)
        dead.append(w if st == L.P_DEAD or (st == L.P_FREEING and _orphaned(w)) else 0)
    return dead


def _still_dead(seg: Segment, dead: list[int], owner: int) -> bool:
    """Is ``owner`` (index + 1, from a slot word loaded just before) an entry this
    sweep marked, still in the very state it marked? Another sweeper may have
    freed it since and a new participant attached there, whose slot words look
    exactly like the dead one's (see gpr_is_dead_owner; SPEC.md §7, Acting on a
    marked entry)."""
    return 1 <= owner <= seg.participant_capacity and dead[owner - 1] != 0 \
        and seg.participant_word(owner - 1) == dead[owner - 1]


def _ref(seg: Segment, pos: int) -> FrameRef:
    return FrameRef.unpack(seg.mem.read(seg.slot(pos) + L.SLOT["ref"], L.REF_BYTES))


def _ref_producer(seg: Segment, pos: int) -> int:
    return _ref(seg, pos).producer + 1


def refers_to(seg: Segment, index: int) -> bool:
    """Whether a slot holds a frame that may be read from producer ``index``'s
    arenas: READY (its owner), CLAIMED or LEASED (its reference's producer), of
    any generation (gpr_ring_refers_to)."""
    for i in range(seg.slot_count):
        w = seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)
        st = word_state(w)
        producer = word_owner(w) if st == L.READY else _ref_producer(seg, word_seq(w)) if st in (L.CLAIMED, L.LEASED) else 0
        if producer == index + 1:
            return True
    return False


def _sweep_orphan(seg: Segment, i: int) -> int:
    """Moves on slot ``i`` when it holds a RELEASED frame published under
    another generation of its owner's entry than the entry holds now: its
    producer lost the entry (SPEC.md §4) and will not reap it, though the entry
    may never look dead while that process lives (§7 step 3). 1 if it did."""
    w = seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)
    owner = word_owner(w)
    if word_state(w) != L.RELEASED or not 1 <= owner <= seg.participant_capacity:
        return 0
    if _ref(seg, word_seq(w)).producer_gen == seg.participant_word(owner - 1) >> 32:
        return 0
    return int(recycle_word(seg, word_seq(w), w))


def _sweep_slot(seg: Segment, i: int, dead: list[int], refs: list[int], rep: SweepReport) -> None:
    def is_dead(owner: int) -> bool:
        return _still_dead(seg, dead, owner)

    at = seg.slots_at + i * L.SLOT_BYTES
    w = seg.mem.load64(at)
    pos, st, owner = word_seq(w), word_state(w), word_owner(w)
    try:
        if st == L.WRITING and is_dead(owner):
            rep.skipped += recycle_word(seg, pos, w)
        elif st == L.CLAIMED and is_dead(owner):
            unclaim_as(seg, owner - 1, pos, L.CLAIMED)
            rep.redelivered += 1
        elif st == L.LEASED and is_dead(owner):
            release_as(seg, owner - 1, pos, L.LEASED)
            rep.released += 1
        elif st == L.RELEASED and is_dead(owner):
            rep.recycled += recycle_word(seg, pos, w)
    except GpuringError:
        pass  # a live participant moved the slot first
    w = seg.mem.load64(at)
    st = word_state(w)
    producer = 0
    if L.READY <= st <= L.LEASED:
        producer = word_owner(w) if st == L.READY else _ref_producer(seg, word_seq(w))
    elif st == L.RELEASED:
        producer = word_owner(w)
    if is_dead(producer):
        refs[producer - 1] += 1


def sweep_leftovers(seg: Segment, index: int, attaching: int) -> None:
    """Repairs the slots that still name entry ``index``, which the caller is
    attaching (SPEC.md §4, Attach), as a sweep repairs a dead owner's: the entry
    was FREE, so they are leftovers of an occupant that lost it. Left alone, the
    new occupant would hold them without knowing, and a lease nobody will
    release stalls the ring."""
    # Only slots whose word names the entry need a repair: picked from one copy of
    # the slot array, an attach to a 65,536-slot ring costs about 17 ms, where a
    # Python loop over every slot cost 170 ms.
    words = memoryview(seg.mem.read(seg.slots_at, seg.slot_count * L.SLOT_BYTES)).cast("Q")[::L.SLOT_BYTES // 8]
    named = [i for i, w in enumerate(words) if word_owner(w) == index + 1]
    if seg.broadcast:
        from .broadcast import leave, release_leftovers  # broadcast.py builds on slot_protocol, as this module does
        leave(seg, index)
        release_leftovers(seg, index)
    dead = [attaching if k == index else 0 for k in range(seg.participant_capacity)]  # our own word: it holds
    _sweep_owners(seg, dead, [0] * seg.participant_capacity, SweepReport(), named)


def _sweep_owners(seg: Segment, dead: list[int], refs: list[int], rep: SweepReport, slots: Iterable[int]) -> None:
    """Repairs the broadcast shares and, of ``slots``, every slot the entries marked in ``dead`` held."""
    if seg.broadcast:
        from .broadcast import sweep_dead  # broadcast.py builds on slot_protocol, as this module does
        rep.released += sweep_dead(seg)
    for i in slots:
        _sweep_slot(seg, i, dead, refs, rep)


def _sweep_corrupt(seg: Segment, i: int, w: int, c: Consensus) -> bool:
    """A word no participant can have written, one nobody will move, one laps
    away from the window's consensus, or an EMPTY one producers passed is reset
    to EMPTY for a position producers have yet to reach. ``w`` is the word the
    consensus read: judged on the same picture, and CAS'd from."""
    at = seg.slots_at + i * L.SLOT_BYTES
    if consistent(seg, i, w) and not orphaned(seg, w) and not c.outlier(seg, w) and not c.passed(w):
        return False
    nxt = (c.reset_base + ((i - c.reset_base) & seg.mask)) & L.SEQ_MASK
    if not seg.mem.cas64(at, w, slot_word(nxt, L.EMPTY, 0)):
        return False
    notify_space(seg)
    return True


def _free(seg: Segment, index: int, w: int) -> bool:
    """One sweeper wins the entry (from ``w``, the DEAD or orphaned FREEING word
    its refs were counted for, to FREEING naming its pid) before freeing it."""
    mine = L.pword(w >> 32, os.getpid(), L.P_FREEING)
    if not seg.mem.cas64(seg.participant(index), w, mine):
        return False
    arenas = min(seg.mem.load32(seg.participant(index, "arena_count")), L.MAX_ARENAS)
    for a in range(arenas):
        try:
            os.unlink(arena_path(seg.name, index, w >> 32, a))
        except (FileNotFoundError, PermissionError):
            pass  # gone, or a name another user squatted (skipped when created: arena.py)
    doorbell.clear(seg, index, L.BELL_ALL)
    if seg.broadcast:
        from .broadcast import leave  # only while FREEING: nobody can attach and subscribe here
        leave(seg, index)
    seg.mem.store64(seg.participant(index, "doorbell_key"), 0)
    seg.mem.store64(seg.participant(index, "doorbell_pipe_ino"), 0)
    seg.mem.store32(seg.participant(index, "pid"), 0)
    return seg.mem.cas64(seg.participant(index), mine, L.pword(w >> 32, 0, L.P_FREE))


def sweep(seg: Segment) -> SweepReport:
    """Finds dead participants and repairs everything they held."""
    rep = SweepReport()
    dead = _mark(seg, rep)
    refs = [0] * seg.participant_capacity
    # A window of slots, round robin (gpuring/recovery.h): a sweep costs the same on any ring size.
    window = min(seg.slot_count, DAMAGE_WINDOW)
    centre = consensus(seg, seg.damage_cursor, window)
    if still(seg, seg.damage_cursor, centre):  # one picture of the ring, or none judged
        for k, w in enumerate(centre.words):
            rep.corrupt += _sweep_corrupt(seg, (seg.damage_cursor + k) & seg.mask, w, centre)
        rep.corrupt += repair_hints(seg, centre)
    for k in range(window):
        rep.recycled += _sweep_orphan(seg, (seg.damage_cursor + k) & seg.mask)
    start, seg.damage_cursor = seg.damage_cursor, (seg.damage_cursor + window) & seg.mask
    if any(dead):
        _sweep_owners(seg, dead, refs, rep, range(seg.slot_count))
        for i, d in enumerate(dead):
            if d and refs[i] == 0 and _free(seg, i, d):
                rep.freed += 1
    elif seg.broadcast:
        from .broadcast import sweep_window  # broadcast.py builds on slot_protocol, as this module does
        rep.released += sweep_window(seg, start, window)
    repaired = rep.skipped + rep.redelivered + rep.released + rep.recycled + rep.corrupt
    if repaired:
        seg.mem.add64(seg.control("recovered"), repaired)
    return rep


def detach(seg: Segment, index: int, gen: int) -> bool:
    """Leaves the segment as if dead: taken frames are handed back or released.
    False, touching nothing, when the entry had been taken from us (SPEC.md §4)."""
    word = L.pword(gen, 0, L.P_ACTIVE)
    if seg.participant_word(index) != word:
        return False  # someone else's now, perhaps: its bells are not ours to clear
    doorbell.clear(seg, index, L.BELL_ALL)
    if not seg.mem.cas64(seg.participant(index), word, L.pword(gen, 0, L.P_DEAD)):
        return False
    sweep(seg)
    return True
