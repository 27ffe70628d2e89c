"""Where the slots of one sweep's window agree the ring is (SPEC.md §7 step 2;
gpuring/recovery.h ``gpr_sweep_consensus``).

Healthy sequences lie within two laps of each other: occupied slots serve
positions producers passed, EMPTY ones positions they have yet to reach. A
sequence laps away from the rest is damage even when it is congruent to its
index, and so is a hint laps away: scans move one position per step from a
hint, so either left alone stalls the ring for good.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import layout as L
from .layout import seq_diff, word_owner, word_seq, word_state
from .segment import Segment
from .slot_protocol import notify_data, notify_space


def consistent(seg: Segment, i: int, w: int) -> bool:
    """A word the protocol can write: sequence congruent to the index, a known
    state (in a broadcast ring never CLAIMED or LEASED: a subscriber's claim is
    its cursor), an owner in the table, and an owner exactly when not EMPTY."""
    st = word_state(w)
    return ((word_seq(w) & seg.mask) == i and st <= L.RELEASED and not (seg.broadcast and st in (L.CLAIMED, L.LEASED))
            and word_owner(w) <= seg.participant_capacity and (st == L.EMPTY) == (word_owner(w) == 0))


def orphaned(seg: Segment, w: int) -> bool:
    """A consistent word whose owner's entry is FREE or in a damaged state
    (5-7): nobody will ever move it (an entry is freed only once no slot refers
    to it, and a slot names an entry only after it went ACTIVE)."""
    if word_state(w) == L.EMPTY:
        return False
    st = L.pword_state(seg.participant_word(word_owner(w) - 1))
    return st == L.P_FREE or st > L.P_FREEING


@dataclass
class Consensus:
    median: int     # the centre: the median consistent sequence (from ``tail``) when more than
    #                 half of the window lies within two laps of it; else 0 (the tail hint)
    tail: int       # the tail hint, masked
    reset_base: int  # no producer is past it: a slot reset there is never behind them
    restart: int    # at most a lap before the producers: where a bogus tail hint is put
    hi_used: int | None = None  # the greatest occupied sequence near the centre, from ``tail``
    tail_hint: int = 0  # the hints as read, unmasked: judged, and CAS'd from, as read
    head_hint: int = 0
    words: list[int] = field(default_factory=list)  # the window's words as read, in window order

    def outlier(self, seg: Segment, w: int) -> bool:
        """A sequence more than four laps from the window's centre."""
        return abs(seq_diff(word_seq(w), self.tail) - self.median) > 4 * seg.slot_count

    def passed(self, w: int) -> bool:
        """An EMPTY slot serving a position before an occupied one: producers
        passed it (a tail hint moved forward within a lap sends them past), so
        nobody will fill it. Healthy, that is only a claim about to happen at a
        lower position than one just made; moving it on costs that claim one
        position, never a frame."""
        return (self.hi_used is not None and word_state(w) == L.EMPTY
                and seq_diff(word_seq(w), self.tail) < self.hi_used)

    def hint_bogus(self, seg: Segment, h: int) -> bool:
        centre = (self.tail + self.median) & L.SEQ_MASK
        return abs(seq_diff(h & L.SEQ_MASK, centre)) > 2 * seg.slot_count


def consensus(seg: Segment, start: int, window: int) -> Consensus:
    tail_hint = seg.mem.load64(seg.control("tail"))
    tail = tail_hint & L.SEQ_MASK
    c = Consensus(0, tail, tail, tail, None, tail_hint, seg.mem.load64(seg.control("head")))
    seen = []
    for k in range(window):
        i = (start + k) & seg.mask
        w = seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)
        c.words.append(w)
        if consistent(seg, i, w):
            seen.append((seq_diff(word_seq(w), tail), word_state(w)))
    if not seen:
        return c
    seen.sort()
    lap = seg.slot_count
    c.median = seen[len(seen) // 2][0]
    # A healthy window always has a majority; without one, damage is all over
    # and the tail hint is the centre the slots are brought back to.
    if 2 * sum(abs(d - c.median) <= 2 * lap for d, _ in seen) <= window:
        c.median = 0
    near = [(d, st) for d, st in seen if abs(d - c.median) <= 2 * lap]
    hi = max((d for d, st in near if st != L.EMPTY), default=None)
    # Producers are at or before every EMPTY sequence they have not passed, and past every occupied one.
    lo = min((d for d, st in near if st == L.EMPTY and (hi is None or d > hi)), default=None)
    if hi is None and lo is None:
        return c  # nothing near the centre
    c.hi_used = hi
    if lo is not None:
        base = lo
    else:
        assert hi is not None
        base = 0 if abs(c.median) <= 2 * lap and hi + 1 < 0 else hi + 1  # a sane hint may be further on
    c.reset_base = (tail + base) & L.SEQ_MASK
    c.restart = (tail + (hi + 1 if hi is not None else base - lap)) & L.SEQ_MASK
    return c


def still(seg: Segment, start: int, c: Consensus) -> bool:
    """Did nothing move while ``c`` was read: both hints and every word of the
    window read again equal what it read? Only then is it one picture of the
    ring; a slow or preempted sweeper holds words from several laps of a busy
    ring, on which healthy slots look damaged (see gpr_window_still; SPEC.md §7
    step 2, "A still window")."""
    mem = seg.mem
    if mem.load64(seg.control("tail")) != c.tail_hint or mem.load64(seg.control("head")) != c.head_hint:
        return False
    return all(mem.load64(seg.slots_at + ((start + k) & seg.mask) * L.SLOT_BYTES) == w for k, w in enumerate(c.words))


def repair_hints(seg: Segment, c: Consensus) -> int:
    """Puts a hint laps away from the consensus back: the tail where producers
    resume; on a work-queue ring the head a lap before that, so that a claim
    scan passes every READY frame within its step bound. Each judged as the
    consensus read it, and by a CAS from that value (a live store wins)."""
    fixed = 0
    hints = [("tail", c.tail_hint, c.restart)]
    if not seg.broadcast:
        hints.append(("head", c.head_hint, c.restart - seg.slot_count))
    for name, h, to in hints:
        if c.hint_bogus(seg, h) and seg.mem.cas64(seg.control(name), h, to & L.SEQ_MASK):
            fixed += 1
    if fixed:
        notify_space(seg)
        notify_data(seg)
    return fixed
