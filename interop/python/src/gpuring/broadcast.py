"""Broadcast rings, where every subscriber receives every frame: gpuring/broadcast.h,
step for step (SPEC.md §5.4).

Producers publish as in a work queue, but copy control ``subscribers`` into the
slot's ``pending`` word first; a subscriber reads positions in order from the
``cursor`` in its entry and takes a frame by moving its cursor with a CAS; it
releases by clearing its bit, and whoever clears the last bit hands the slot
back to its producer. A producer that finds the ring full applies each holder's
``on_slow`` policy (block, drop-oldest, evict). A taken frame is never taken back.
"""
from __future__ import annotations

import os
import time

from . import layout as L
from .errors import GpuringError
from .layout import seq_diff, slot_word, word_owner, word_seq, word_state
from .process import running_start_time, self_start_time
from .segment import Segment
from .shared_memory import SharedMemory
from .slot_protocol import FrameRef, notify_data, notify_space, producer_active, _scan_limit


def _bit(index: int) -> int:
    return 1 << index


def _pending(seg: Segment, pos: int) -> int:
    return seg.slot(pos) + L.SLOT["pending"]


def _carries(seg: Segment, pos: int, w: int, bit: int) -> bool:
    """Does the READY frame at ``pos`` (slot word ``w``) carry ``bit``? The word is loaded
    again after ``pending``: a frame gone meanwhile, its slot published a lap on, shows the
    new frame's pending word, which carries every subscriber's bit (see gpr_bc_carries)."""
    return bool(seg.mem.load64(_pending(seg, pos)) & bit) and seg.mem.load64(seg.slot(pos)) == w


ADOPT_WAIT_S = 0.010
"""How long, in all, a subscriber joining at the oldest retained frames waits for the
publishes in flight as it joins (slots WRITING) to end, so as to adopt them too (see
GPR_ADOPT_WAIT_NS)."""


def _await_publish(mem: SharedMemory, at: int, w: int, until: float) -> int:
    """Slot ``at``'s word once it leaves ``w`` (a publish in flight), or ``w`` at ``until``."""
    while (v := mem.load64(at)) == w and time.monotonic() < until:
        os.sched_yield()  # its producer may be waiting for this CPU
    return v


def _adopt_slot(seg: Segment, me: int, at: int, until: float) -> None:
    """A share for ``me`` (joined already) of the READY frame slot ``at`` serves, unless it
    carries the bit (its own) or every share was released; a slot that moved on under the
    CAS is judged again, and a frame the cursor passed meanwhile given back (see
    gpr_bc_adopt_slot)."""
    mem, bit = seg.mem, _bit(me)
    w = mem.load64(at)
    while True:
        if word_state(w) == L.WRITING and time.monotonic() < until:
            w = _await_publish(mem, at, w, until)
            continue
        if word_state(w) != L.READY:
            return
        while (m := mem.load64(at + L.SLOT["pending"])) and not m & bit and not mem.cas64(at + L.SLOT["pending"], m, m | bit):
            pass
        if not m or m & bit:  # released meanwhile, or its own
            return
        if (now := mem.load64(at)) != w:  # recycled under the CAS: the later frame lacked the bit too
            w = now
            continue
        if seq_diff(mem.load64(seg.participant(me, "cursor")) & L.SEQ_MASK, word_seq(w)) > 0:
            _released(seg, me, word_seq(w))
        return


def _adopt_retained(seg: Segment, me: int) -> None:
    """A share of every frame still in the ring for ``me``, which has just joined; a publish
    in flight as it joined is waited for, within ADOPT_WAIT_S in all (see gpr_bc_adopt_retained)."""
    until = time.monotonic() + ADOPT_WAIT_S
    for i in range(seg.slot_count):
        _adopt_slot(seg, me, seg.slots_at + i * L.SLOT_BYTES, until)


PROXY_WAIT_S = 1.0
"""How long a consumer that attached waits, before it subscribes, for a proxy that took its
entry's proxy word before the attach to let go (see GPR_PROXY_WAIT_NS)."""


def _proxy_self(seg: Segment) -> int:
    """A proxy word naming this process: pid << 32 | its start time mod 2^32."""
    if not seg.proxy_self:
        seg.proxy_self = os.getpid() << 32 | (self_start_time() & 0xFFFFFFFF)
    return seg.proxy_self


def _proxy_alive(v: int) -> bool:
    """Does proxy word ``v`` name a process that runs (pid, not a zombie, that start time), or one we cannot judge?"""
    try:
        started = running_start_time(v >> 32)
    except OSError:
        return True  # cannot tell: never take a live proxy's word
    return started is not None and started & 0xFFFFFFFF == v & 0xFFFFFFFF


def proxy_take(seg: Segment, k: int) -> bool:
    """Takes entry k's proxy word, held by anyone but its occupant while acting on its
    shares or cursor (a release made for it, a drop, a drop's finish): a consumer that
    attaches at k waits for it before subscribing, so nothing judged on an earlier
    occupant lands on the new one's frames (SPEC.md §5.4, Proxies; see
    gpr_bc_proxy_take). False when another live process, or another thread here,
    holds it: leave k for next time."""
    at, me = seg.participant(k, "proxy"), _proxy_self(seg)
    if seg.mem.cas64(at, 0, me):
        return True
    held = seg.mem.load64(at)
    return held not in (0, me) and not _proxy_alive(held) and seg.mem.cas64(at, held, me)


def proxy_give(seg: Segment, k: int) -> None:
    seg.mem.cas64(seg.participant(k, "proxy"), _proxy_self(seg), 0)


def _await_proxies(seg: Segment, me: int) -> None:
    """After the attach stored ACTIVE: waits until no live process holds entry ``me``'s
    proxy word, for up to PROXY_WAIT_S (see gpr_bc_await_proxies)."""
    until, at = time.monotonic() + PROXY_WAIT_S, seg.participant(me, "proxy")
    # Loaded by a seq_cst read-modify-write (adding 0), ordered after our ACTIVE store.
    while (v := seg.mem.add64(at, 0)) and _proxy_alive(v) and time.monotonic() < until:
        time.sleep(0.00002)


def join(seg: Segment, me: int, on_slow: int, oldest: bool = False) -> None:
    """A consumer that attached as entry ``me`` joins the subscribers, once no proxy that
    took the entry's proxy word before the attach still acts for it."""
    _await_proxies(seg, me)
    subscribe(seg, me, on_slow, oldest)


def subscribe(seg: Segment, me: int, on_slow: int, oldest: bool = False) -> None:
    """Joins the subscribers as entry ``me``, or goes on after an eviction from
    where it was evicted. The cursor starts a lap behind the producers' hint,
    before every position a frame carrying the new bit can have. With
    ``oldest`` it also takes a share of the frames still in the ring."""
    mem = seg.mem
    if me == seg.attached_index and seg.takes is None:
        seg.takes = [0] * seg.slot_count
    tail = mem.load64(seg.control("tail")) & L.SEQ_MASK
    while True:  # a CAS: producers move an evicted cursor past the frames they drop (see gpr_bc_subscribe)
        c = mem.load64(seg.participant(me, "cursor"))
        if c & L.CURSOR_DROPPING:  # counted before it clears: wait for it, or take its dropper for dead
            _settle_drop(seg, me, c, DROP_STALE_NS + DROP_WAIT_NS)
            continue
        start = (tail - seg.slot_count) & L.SEQ_MASK
        if c & L.CURSOR_EVICTED and seq_diff(c & L.SEQ_MASK, start) > 0:
            start = c & L.SEQ_MASK
        if mem.cas64(seg.participant(me, "cursor"), c, start):
            break
    mem.store32(seg.participant(me, "subscription"), on_slow + 1)
    mem.or64(seg.control("subscribers"), _bit(me))
    if oldest:
        _adopt_retained(seg, me)


def subscriber_count(seg: Segment) -> int:
    """The subscribers a frame published now goes to (see gpr_ring_subscriber_count)."""
    return bin(seg.mem.load64(seg.control("subscribers"))).count("1") if seg.broadcast else 0


#: How long a participant that finds another's drop half done waits for its dropper to
#: finish it, and after how long, seen unchanged, it takes the dropper for dead and
#: finishes the drop itself (SPEC.md §5.4, Dropping; gpr_bc_settle_drop).
DROP_WAIT_NS = 20_000
DROP_STALE_NS = 20_000_000
_U64 = 0xFFFFFFFFFFFFFFFF


def untold(seg: Segment, me: int) -> int:
    """Frames dropped for ``me`` that it has not been told of. ``missed`` may stand below
    ``missed_seen`` after it was told of a count taken back: none, and ``missed_seen``
    comes down to it (see gpr_bc_untold)."""
    missed = seg.mem.load64(seg.participant(me, "missed"))
    told = seg.mem.load64(seg.participant(me, "missed_seen"))
    if (missed - told) & _U64 < 1 << 63:
        return (missed - told) & _U64
    seg.mem.store64(seg.participant(me, "missed_seen"), missed)
    return 0


def take_missed(seg: Segment, me: int) -> int:
    """Frames dropped for ``me`` that it has not been told of; marks them told."""
    count = untold(seg, me)
    seg.mem.add64(seg.participant(me, "missed_seen"), count)
    return count


def _retire(seg: Segment, pos: int, w: int) -> None:
    """The last share of the frame at ``pos`` went: RELEASED for its producer, or EMPTY a lap on."""
    ref = FrameRef.unpack(seg.mem.read(seg.slot(pos) + L.SLOT["ref"], L.REF_BYTES))
    to = (slot_word(pos, L.RELEASED, word_owner(w)) if producer_active(seg, ref) and word_owner(w) == ref.producer + 1
          else slot_word(pos + seg.slot_count, L.EMPTY, 0))
    if seg.mem.cas64(seg.slot(pos), w, to):
        notify_space(seg)


def _takes(seg: Segment, owner: int) -> list[int] | None:
    """The record of this view's takes (Segment.takes) when ``owner`` is the subscriber
    it attached, else None. Read and written under Segment.takes_lock."""
    return seg.takes if owner == seg.attached_index else None


def release_as(seg: Segment, owner: int, pos: int) -> None:
    """Ends subscriber ``owner``'s share of the frame at ``pos`` (its own release, or one made for it)."""
    takes = _takes(seg, owner)
    if takes is None:
        return _release_share(seg, owner, pos)
    with seg.takes_lock:
        try:
            _release_share(seg, owner, pos)
        finally:  # a share a sweeper released for us is gone all the same
            _forget(seg, takes, pos)


def _forget(seg: Segment, takes: list[int], pos: int) -> None:
    if takes[pos & seg.mask] == (pos & L.SEQ_MASK) + 1:
        takes[pos & seg.mask] = 0


def release_strays(seg: Segment, me: int) -> int:
    """SPEC.md §5.4, "Stray shares": releases ``me``'s share of every READY frame its
    cursor passed that carries its bit and that it does not hold (see
    gpr_bc_release_strays); returns how many. Run when this subscriber sweeps."""
    takes = _takes(seg, me)
    if takes is None:
        return 0
    released = 0
    with seg.takes_lock:
        c = seg.mem.load64(seg.participant(me, "cursor"))
        if c & (L.CURSOR_DROPPING | L.CURSOR_EVICTED):
            return 0
        for i in range(seg.slot_count):
            w = seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)
            pos = word_seq(w)
            if word_state(w) != L.READY or seq_diff(c & L.SEQ_MASK, pos) <= 0 or takes[i] == pos + 1:
                continue
            if seg.mem.load64(_pending(seg, pos)) & _bit(me):
                try:
                    _release_share(seg, me, pos)
                    released += 1
                except GpuringError:
                    pass  # released meanwhile, or the slot moved on
    return released


def _release_share(seg: Segment, owner: int, pos: int) -> None:
    """The AND of ``owner``'s bit into the frame's ``pending``, and the slot moved on if it was the last."""
    w = seg.mem.load64(seg.slot(pos))
    if owner >= 64 or word_seq(w) != pos & L.SEQ_MASK or word_state(w) != L.READY:
        raise GpuringError("FRAME_STATE", f"slot {pos & seg.mask} holds no frame of subscriber {owner}")
    was = seg.mem.and64(_pending(seg, pos), ~_bit(owner))
    if not was & _bit(owner):
        raise GpuringError("FRAME_STATE", f"subscriber {owner} does not hold the frame at position {pos}")
    if was & ~_bit(owner) == 0:
        _retire(seg, pos, w)


def _released(seg: Segment, owner: int, pos: int) -> bool:
    try:
        release_as(seg, owner, pos)
        return True
    except GpuringError:
        return False


def _unpublished(w: int, pos: int) -> bool:
    """A walk along one subscriber's positions finds slot word ``w`` at ``pos``: is ``pos``
    still being published (not yet claimed, or WRITING)? (see gpr_bc_unpublished)"""
    d = seq_diff(word_seq(w), pos)
    return d < 0 or (d == 0 and word_state(w) in (L.EMPTY, L.WRITING))


def _pass(seg: Segment, pos: int, w: int) -> int:
    """The position such a walk looks at after passing ``pos`` (slot word ``w``): the next,
    or a lap before the slot's own when the slot is more than a lap past ``pos`` (no
    position up to there holds a frame of this subscriber; see gpr_bc_pass)."""
    return (word_seq(w) - seg.slot_count if seq_diff(word_seq(w), pos) > seg.slot_count else pos + 1) & L.SEQ_MASK


def try_claim(seg: Segment, me: int) -> tuple[int, FrameRef] | None:
    """The next frame for subscriber ``me``, or None; raises FRAMES_MISSED or EVICTED
    (bare: the consumer adds the count) when producers dropped frames for it."""
    mem, bit, cursor_at = seg.mem, _bit(me), seg.participant(me, "cursor")
    for _ in range(4):  # a failed cursor CAS: a producer dropped frames for us meanwhile
        cur = mem.load64(cursor_at)
        if cur & L.CURSOR_DROPPING:  # a producer's drop, half done: counted once its mark clears
            if _settle_drop(seg, me, cur, DROP_WAIT_NS) & L.CURSOR_DROPPING:
                return None
            continue
        if cur & L.CURSOR_EVICTED:
            raise GpuringError("EVICTED", "evicted")
        if untold(seg, me):
            raise GpuringError("FRAMES_MISSED", "frames missed")
        pos, lost = cur & L.SEQ_MASK, False
        for _ in range(_scan_limit(seg)):
            w = mem.load64(seg.slot(pos))
            d, st = seq_diff(word_seq(w), pos), word_state(w)
            if d < -seg.slot_count:  # a cursor no slot can match: trust the slot
                pos = word_seq(w)
                continue
            if _unpublished(w, pos):
                break
            if d == 0 and st == L.READY and _carries(seg, pos, w, bit):
                if not _take(seg, me, cur, pos):
                    lost = True
                    break
                return pos, FrameRef.unpack(mem.read(seg.slot(pos) + L.SLOT["ref"], L.REF_BYTES))
            pos = _pass(seg, pos, w)  # not ours: published before we joined, or done
        if lost:
            continue
        if pos != cur & L.SEQ_MASK:
            mem.cas64(cursor_at, cur, pos)  # skipped frames need not be looked at again
        # Only a sweep clears a bit, a DEAD entry's: a live subscriber without its own
        # finds damage, and no frame would carry the bit again (SPEC.md §5.4, Claim).
        if not mem.load64(seg.control("subscribers")) & bit:
            mem.or64(seg.control("subscribers"), bit)
        return None
    return None


def _take(seg: Segment, me: int, cur: int, pos: int) -> bool:
    """The cursor CAS that takes the frame at ``pos``, recorded in the same step
    for release_strays."""
    takes = _takes(seg, me)
    if takes is None:
        return seg.mem.cas64(seg.participant(me, "cursor"), cur, (pos + 1) & L.SEQ_MASK)
    with seg.takes_lock:
        taken = seg.mem.cas64(seg.participant(me, "cursor"), cur, (pos + 1) & L.SEQ_MASK)
        if taken:
            takes[pos & seg.mask] = (pos & L.SEQ_MASK) + 1
    return taken


def unclaim(seg: Segment, me: int, pos: int) -> None:
    """Gives back a frame ``me`` took but never handed over: its cursor goes back
    to it if nothing was taken since, else it is released and counted as missed."""
    takes = _takes(seg, me)
    with seg.takes_lock:
        back = seg.mem.cas64(seg.participant(me, "cursor"), (pos + 1) & L.SEQ_MASK, pos & L.SEQ_MASK)
        if back and takes is not None:
            _forget(seg, takes, pos)
    if back:
        notify_data(seg)
        return
    release_as(seg, me, pos)
    seg.mem.add64(seg.participant(me, "missed"), 1)


def _finish_drop(seg: Segment, k: int, c: int) -> int:
    """Finishes the drop cursor ``c`` (DROPPING) names: releases k's share of the frame
    just before its position, counts it as missed, and only then clears the mark, so
    that a subscriber that finds its cursor clear finds the loss counted too. When the
    clearing CAS fails, one that took this dropper for dead finished it and counted
    too: this count is taken back. The cursor as it is now (see gpr_bc_finish_drop)."""
    _released(seg, k, ((c & L.SEQ_MASK) - 1) & L.SEQ_MASK)
    done = c & ~L.CURSOR_DROPPING
    seg.mem.add64(seg.participant(k, "missed"), 1)
    if seg.mem.cas64(seg.participant(k, "cursor"), c, done):
        return done
    seg.mem.add64(seg.participant(k, "missed"), _U64)
    return seg.mem.load64(seg.participant(k, "cursor"))


def _settle_drop(seg: Segment, k: int, c: int, wait_ns: int) -> int:
    """Another's drop, marked in the cursor ``c`` of subscriber ``k``: waits up to
    ``wait_ns`` for its dropper to clear the mark; a mark this view has seen unchanged
    for DROP_STALE_NS is one whose dropper died half-way, finished here. The cursor as
    it is now, DROPPING still set if neither (see gpr_bc_settle_drop)."""
    now = time.monotonic_ns()
    until = now + wait_ns
    mark, since = seg.drop_marks.get(k, (None, now))
    if mark != c:
        seg.drop_marks[k] = (c, now)
        since = now
    while now - since < DROP_STALE_NS:
        if now >= until:
            return c
        latest = seg.mem.load64(seg.participant(k, "cursor"))
        if latest != c:
            return latest
        now = time.monotonic_ns()
    return _finish_drop(seg, k, c)


def _drop(seg: Segment, k: int, c: int, pos: int) -> int | None:
    """Drops the frame at ``pos`` for subscriber ``k`` (cursor ``c``, EVICTED kept): the
    cursor moves past it first by CAS, marked DROPPING, then the drop is finished. The
    cursor this drop leaves (the one a next drop expects, not the cursor as it is now),
    or None if the CAS lost, or if ``c`` is past ``pos`` or names a drop half done: a
    frame behind the cursor may be one the subscriber holds (see gpr_bc_drop)."""
    if c & L.CURSOR_DROPPING or seq_diff(pos, c & L.SEQ_MASK) < 0:
        return None
    marked = L.CURSOR_DROPPING | (c & L.CURSOR_EVICTED) | ((pos + 1) & L.SEQ_MASK)
    if not seg.mem.cas64(seg.participant(k, "cursor"), c, marked):
        return None
    _finish_drop(seg, k, marked)
    return marked & ~L.CURSOR_DROPPING


def _drop_through(seg: Segment, k: int, c: int, last: int) -> None:
    """Drops for subscriber ``k`` (cursor ``c``) each frame it has not taken, in position
    order from its cursor through ``last``; stops at a position still being published
    (EMPTY or WRITING there, or a lap behind), whose frame may yet carry its bit, or at
    the first drop whose CAS fails (see gpr_bc_drop_through)."""
    mem, bit, pos = seg.mem, _bit(k), c & L.SEQ_MASK
    for _ in range(_scan_limit(seg)):
        if seq_diff(last, pos) < 0:
            return
        w = mem.load64(seg.slot(pos))
        if _unpublished(w, pos):
            return
        if word_seq(w) == pos and word_state(w) == L.READY and _carries(seg, pos, w, bit):
            moved = _drop(seg, k, c, pos)
            if moved is None:
                return  # it went on meanwhile
            c = moved
        pos = _pass(seg, pos, w)


def _evict(seg: Segment, k: int, c: int, q: int) -> None:
    """Drops every frame subscriber ``k`` has not taken, oldest first; its cursor says
    EVICTED until it has learnt so. It stays a subscriber (see gpr_bc_evict)."""
    evicted = L.CURSOR_EVICTED | (c & L.SEQ_MASK)
    if not seg.mem.cas64(seg.participant(k, "cursor"), c, evicted):
        return
    _drop_through(seg, k, evicted, q + seg.slot_count - 1)
    notify_data(seg)


def _subscribed(seg: Segment, k: int) -> bool:
    """Entry k is attached and joined with a policy, or a consumer joining (attached, its
    subscribe not yet done): either may take a frame carrying its bit, so its share is its
    own to release. A `subscription` no policy has is damage and means nobody (see
    gpr_bc_subscribed)."""
    if k >= seg.participant_capacity or L.pword_state(seg.participant_word(k)) != L.P_ACTIVE:
        return False
    subscription = seg.mem.load32(seg.participant(k, "subscription"))
    return (1 <= subscription <= len(L.ON_SLOW)
            or (subscription == 0 and bool(seg.mem.load32(seg.participant(k, "roles")) & L.ROLE_CONSUMER)))


def _relieve_one(seg: Segment, k: int, q: int) -> None:
    if k >= seg.participant_capacity:
        _released(seg, k, q)  # damage: no entry there will ever subscribe
    elif proxy_take(seg, k):
        try:
            _act_for(seg, k, q)
        finally:
            proxy_give(seg, k)


def _act_for(seg: Segment, k: int, q: int) -> None:
    """What a producer that needs the slot of position q + slot_count does about
    subscriber k, which still holds the frame at q, as its proxy."""
    if not _subscribed(seg, k):
        _released(seg, k, q)  # a bit left over from an earlier occupant
        return
    c = seg.mem.load64(seg.participant(k, "cursor"))
    if c & L.CURSOR_DROPPING:  # another producer's drop
        c = _settle_drop(seg, k, c, DROP_WAIT_NS)
        if c & L.CURSOR_DROPPING:
            return  # not done yet: look again next time
    if seq_diff(c & L.SEQ_MASK, q) > 0:
        return  # it took the frame at q and holds it
    policy = L.ON_SLOW[(seg.mem.load32(seg.participant(k, "subscription")) - 1) % 3]
    if c & L.CURSOR_EVICTED or policy == "drop-oldest":  # evicted: published to it around or after its eviction
        _drop_through(seg, k, c, q)
    elif policy == "evict":
        _evict(seg, k, c, q)


def relieve(seg: Segment, q: int) -> None:
    """A producer needs the slot still serving the frame at ``q``: applies each holder's policy."""
    w = seg.mem.load64(seg.slot(q))
    if word_seq(w) != q & L.SEQ_MASK or word_state(w) != L.READY:
        return
    m = seg.mem.load64(_pending(seg, q))
    if m == 0:  # every share released; its last releaser died before moving it on
        _retire(seg, q, w)
    while m:
        k = (m & -m).bit_length() - 1
        m &= m - 1
        _relieve_one(seg, k, q)


def finish_publish(seg: Segment, me: int, pos: int) -> None:
    """After the reference is written (slot WRITING by ``me``): the frame goes to the
    subscribers attached now (READY), or straight to RELEASED when there are none."""
    subscribers = seg.mem.load64(seg.control("subscribers"))
    seg.mem.store64(_pending(seg, pos), subscribers)
    to = slot_word(pos, L.READY if subscribers else L.RELEASED, me + 1)
    if not seg.mem.cas64(seg.slot(pos), slot_word(pos, L.WRITING, me + 1), to):
        raise GpuringError("FRAME_STATE", "the ring took this producer's slot back (was it judged dead?)")
    if subscribers:
        notify_data(seg)  # every subscriber: not one sleeper per frame


def holds(seg: Segment, me: int, pos: int) -> bool:
    """Does subscriber ``me`` hold the frame at ``pos`` (taken, not released)?"""
    w = seg.mem.load64(seg.slot(pos))
    c = seg.mem.load64(seg.participant(me, "cursor"))
    return (word_seq(w) == pos & L.SEQ_MASK and word_state(w) == L.READY
            and bool(seg.mem.load64(_pending(seg, pos)) & _bit(me)) and seq_diff(c & L.SEQ_MASK, pos) > 0)


def release_leftovers(seg: Segment, index: int) -> None:
    """The attach of entry ``index`` (ATTACHING, its bit out of ``subscribers``) releases
    the entry's bit from every READY frame carrying it, the shares its previous occupant
    left: itself, not through the entry's proxy word, which a proxy holding it would leave
    to it. Left, they would come to the new subscriber, frames published before it joined,
    with gaps between them (see gpr_bc_release_leftovers)."""
    if index >= 64:
        return
    for i in range(seg.slot_count):
        w = seg.mem.load64(seg.slots_at + i * L.SLOT_BYTES)
        if word_state(w) == L.READY and _carries(seg, word_seq(w), w, _bit(index)):
            _released(seg, index, word_seq(w))


def leave(seg: Segment, index: int) -> None:
    """Entry ``index`` leaves ``subscribers``: done only by its freer (holding
    FREEING) and its attacher (holding ATTACHING), never on a DEAD entry another
    sweeper may free and a new subscriber join meanwhile (see gpr_bc_leave)."""
    if index < 64:
        seg.mem.and64(seg.control("subscribers"), ~_bit(index))


def sweep_dead(seg: Segment) -> int:
    """Half-done drops of live subscribers whose mark went stale are finished (see
    gpr_bc_finish_dead_drops); then every READY frame with no share left is moved
    on, and the shares held by entries that are not live subscribers now are
    released: dead ones', and bits left over from an entry freed while a publish
    that had loaded ``subscribers`` earlier was in flight (see gpr_bc_sweep_slot).
    Returns how many shares."""
    for k in range(min(seg.participant_capacity, 64)):  # drops their dead producers left half done
        if not seg.mem.load64(seg.participant(k, "cursor")) & L.CURSOR_DROPPING or not proxy_take(seg, k):
            continue
        try:
            c = seg.mem.load64(seg.participant(k, "cursor"))
            if c & L.CURSOR_DROPPING and _subscribed(seg, k):
                _settle_drop(seg, k, c, 0)
        finally:
            proxy_give(seg, k)
    return sweep_window(seg, 0, seg.slot_count)


def sweep_window(seg: Segment, start: int, window: int) -> int:
    """Sweep step 3 over ``window`` slots from ``start``: every slot when an entry is
    dead, else the window step 2 checked. A READY frame with a share of an entry that
    is no subscriber now, or with no share left, goes through _sweep_ready; one whose
    shares all name subscribers costs no proxy word (see gpr_bc_sweep_window).
    Returns how many shares."""
    live = sum(_bit(k) for k in range(min(seg.participant_capacity, 64)) if _subscribed(seg, k))
    released = 0
    for k in range(window):
        w = seg.mem.load64(seg.slots_at + ((start + k) & seg.mask) * L.SLOT_BYTES)
        if word_state(w) == L.READY:
            m = seg.mem.load64(_pending(seg, word_seq(w)))
            if m == 0 or m & ~live:
                released += _sweep_ready(seg, w)
    return released


def _sweep_ready(seg: Segment, w: int) -> int:
    """The READY frame of slot word ``w``: moved on when no share is left, and the shares
    of entries that are not subscribers now released, each as that entry's proxy (see
    gpr_bc_sweep_slot). Returns how many shares."""
    pos, released = word_seq(w), 0
    m = seg.mem.load64(_pending(seg, pos))
    if m == 0 and seg.mem.load64(seg.slot(pos)) == w:
        _retire(seg, pos, w)  # its last releaser died between clearing its bit and moving the slot on
    while m:
        k = (m & -m).bit_length() - 1
        m &= m - 1
        if k >= seg.participant_capacity:
            released += _released(seg, k, pos)  # damage: no entry there will ever subscribe
        elif proxy_take(seg, k):
            try:
                if not _subscribed(seg, k) and _released(seg, k, pos):  # as of now
                    released += 1
            finally:
                proxy_give(seg, k)
    return released


def standing(seg: Segment, k: int) -> dict[str, object]:
    """Where subscriber ``k`` stands (for inspect): as gpr_bc_standing, with its policy, cursor and losses."""
    c = seg.mem.load64(seg.participant(k, "cursor"))
    held = unread = 0
    for i in range(seg.slot_count):
        at = seg.slots_at + i * L.SLOT_BYTES
        w = seg.mem.load64(at)
        if word_state(w) != L.READY or not seg.mem.load64(at + L.SLOT["pending"]) & _bit(k):
            continue
        if seq_diff(c & L.SEQ_MASK, word_seq(w)) > 0:
            held += 1
        else:
            unread += 1
    subscription = seg.mem.load32(seg.participant(k, "subscription"))
    return {"onSlow": L.ON_SLOW[subscription - 1] if 1 <= subscription <= 3 else "damaged",
            "cursor": c & L.SEQ_MASK, "evicted": bool(c & L.CURSOR_EVICTED), "held": held, "unread": unread,
            "missed": seg.mem.load64(seg.participant(k, "missed"))}
