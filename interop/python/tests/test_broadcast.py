"""Broadcast rings (SPEC.md §5.4) from Python: every subscriber, in any
language, receives every frame in order; a killed subscriber gives its share
back; the three on_slow policies."""
import json
import os
import select
import signal
import subprocess
import time

import pyarrow as pa
import pytest

from conftest import node_available, node_child, python_child
from gpuring import Consumer, GpuringError, Producer, Ring
from gpuring import broadcast, layout as L
from gpuring.process import proc_stat

FRAMES = 3000


def _tags(consumer: Consumer) -> list[int] | GpuringError:
    """Tags of the frames ready now, each released at once, or the error met."""
    tags = []
    try:
        while (frame := consumer.try_next()) is not None:
            tags.append(frame.user_tag)
            frame.release()
    except GpuringError as e:
        return e
    return tags


def test_python_and_node_subscribers_each_receive_every_frame_in_order_and_a_killed_one_gives_its_share_back(ring_name):
    Ring.create(ring_name, slots=64, delivery="all").close()
    readers = [python_child("subscribe", ring_name, str(FRAMES))]
    if node_available():
        readers.append(node_child("child.ts", "subscribe", ring_name, str(FRAMES)))
    holder = python_child("hold", ring_name, "1")
    for r in readers:
        line = r.stdout.readline()
        assert line.startswith("ready") or json.loads(line)["ready"], line
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"i": [0]}), user_tag=0)
        assert holder.stdout.readline().split() == ["held", "1"]
        for tag in range(1, 64):
            producer.publish(pa.table({"i": [tag]}), user_tag=tag)
        with pytest.raises(GpuringError) as full:
            producer.publish(pa.table({"i": [64]}), user_tag=64, block=False)
        assert full.value.code == "RING_FULL"  # the holder took frame 0 and keeps it
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        for tag in range(64, FRAMES):
            producer.publish(pa.table({"i": [tag]}), user_tag=tag, timeout=30)
        for r in readers:
            out, err = r.communicate(timeout=60)
            assert r.returncode == 0, err
            last = out.strip().splitlines()[-1]
            assert last == f"in-order {FRAMES}" or json.loads(last) == {"inOrder": FRAMES}, out
        producer.drain(timeout=10)


def test_wait_for_subscribers_returns_once_a_subscriber_process_joined_and_times_out_when_none_does(ring_name):
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer:
        assert producer.subscribers == 0
        with pytest.raises(GpuringError) as late:
            producer.wait_for_subscribers(1, timeout=0.03)
        assert late.value.code == "TIMEOUT"
        reader = python_child("subscribe", ring_name, "1")
        producer.wait_for_subscribers(1, timeout=30)
        assert producer.subscribers == 1
        producer.publish(pa.table({"i": [0]}), user_tag=0)  # it cannot miss it
        out, err = reader.communicate(timeout=60)
        assert reader.returncode == 0 and out.strip().splitlines()[-1] == "in-order 1", err
        producer.drain(timeout=10)
    work_queue = ring_name + "-wq"
    Ring.create(work_queue, slots=8).close()
    try:
        with Producer.open(work_queue) as producer, pytest.raises(GpuringError) as none:
            producer.wait_for_subscribers(1)
        assert none.value.code == "INVALID_ARGUMENT"
    finally:
        Ring.unlink(work_queue)


def test_on_slow_block_drop_oldest_and_evict(ring_name):
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as fast:
        def publish_keeping_up(first: int, count: int) -> list[int]:
            seen = []
            for tag in range(first, first + count):
                producer.publish(pa.table({"i": [tag]}), user_tag=tag, block=False)
                with fast.next(timeout=5) as frame:
                    seen.append(frame.user_tag)
            return seen

        with Consumer.open(ring_name, on_slow="block") as block:
            assert publish_keeping_up(0, 8) == list(range(8))
            with pytest.raises(GpuringError) as full:
                producer.publish(pa.table({"i": [8]}), block=False)
            assert full.value.code == "RING_FULL"
            assert _tags(block) == list(range(8))
        with Consumer.open(ring_name, on_slow="drop-oldest") as drop:
            assert publish_keeping_up(100, 20) == list(range(100, 120))
            missed = _tags(drop)
            assert isinstance(missed, GpuringError) and missed.code == "FRAMES_MISSED" and missed.missed == 12
            assert _tags(drop) == list(range(112, 120))
            with Consumer.open(ring_name, on_slow="evict") as evict:
                assert publish_keeping_up(200, 9) == list(range(200, 209))
                dropped = _tags(drop)
                assert isinstance(dropped, GpuringError) and dropped.missed == 1
                assert _tags(drop) == list(range(201, 209))
                evicted = _tags(evict)
                assert isinstance(evicted, GpuringError) and evicted.code == "EVICTED" and evicted.missed == 8
                producer.publish(pa.table({"i": [300]}), user_tag=300)
                assert _tags(evict) == [208, 300]
                assert _tags(fast) == [300] and _tags(drop) == [300]
        producer.drain(timeout=5)


def test_a_drop_never_releases_a_frame_behind_the_subscribers_cursor(ring_name):
    """An evicting producer whose finish lost its CAS to the subscriber (which went on
    after its eviction and took the next frame) once went on dropping from the cursor
    as it was then: past the frame the subscriber held, where a CAS succeeds, so the
    frame was released under it and its memory reused (the evict torture caught it)."""
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name, on_slow="evict") as sub:
        producer.publish(pa.table({"i": [1]}), user_tag=1)
        with sub.next(timeout=5) as frame:
            seg, me = producer._seg, sub.index
            cursor = seg.mem.load64(seg.participant(me, "cursor"))
            pos = (cursor - 1) & L.SEQ_MASK
            assert broadcast.holds(seg, me, pos)
            assert broadcast._drop(seg, me, cursor, pos) is None
            assert broadcast.holds(seg, me, pos) and seg.mem.load64(seg.participant(me, "cursor")) == cursor
            assert frame.user_tag == 1
        producer.drain(timeout=5)


def test_an_eviction_stops_at_a_position_still_being_published(ring_name):
    """An eviction drops what the subscriber has not taken in position order and stops
    at a position still being published: that frame may yet carry its bit. It once
    passed such a position and moved the cursor past a frame that then went READY for
    the subscriber: never taken, never counted, a stray share (the evict torture found
    subscribers told of one frame fewer than they lost). C: test_evict_stops_at_a_publish_in_flight."""
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name, on_slow="evict") as slow, \
            Consumer.open(ring_name) as fast:
        seg, me = producer._seg, slow.index
        positions = []
        for tag in (70, 71, 72):
            producer.publish(pa.table({"i": [tag]}), user_tag=tag)
            with fast.next(timeout=5):
                positions.append((seg.mem.load64(seg.participant(fast.index, "cursor")) - 1) & L.SEQ_MASK)
        middle = seg.slot(positions[1])
        ready = seg.mem.load64(middle)
        seg.mem.store64(middle, L.slot_word(positions[1], L.WRITING, L.word_owner(ready)))  # frame 71's publish, not done yet
        cursor = seg.mem.load64(seg.participant(me, "cursor"))
        broadcast._evict(seg, me, cursor, positions[0])
        assert seg.mem.load64(seg.participant(me, "cursor")) == L.CURSOR_EVICTED | positions[1]  # 70 dropped; stopped at 71
        assert seg.mem.load64(broadcast._pending(seg, positions[2])) & broadcast._bit(me)
        seg.mem.store64(middle, ready)  # the publish completes
        with pytest.raises(GpuringError) as evicted:
            slow.try_next()
        assert (evicted.value.code, slow.missed) == ("EVICTED", 1)
        assert _tags(slow) == [71, 72]
        producer.drain(timeout=5)


def test_a_broadcast_ring_holds_at_most_64_participants_and_opens_as_broadcast(ring_name):
    ring = Ring.create(ring_name, slots=8, participants=64, delivery="all")
    assert ring.segment.broadcast
    with pytest.raises(GpuringError) as too_many:
        Ring.create(ring_name + "x", participants=65, delivery="all")
    assert too_many.value.code == "INVALID_ARGUMENT"
    ring.close()
    assert Ring.open(ring_name).segment.broadcast


def test_start_oldest_also_receives_the_frames_still_in_the_ring(ring_name):
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as first:
        for tag in range(3):
            producer.publish(pa.table({"i": [tag]}), user_tag=tag)
        with Consumer.open(ring_name) as newest, Consumer.open(ring_name, start="oldest") as oldest:
            producer.publish(pa.table({"i": [3]}), user_tag=3)
            assert _tags(oldest) == [0, 1, 2, 3]
            assert _tags(newest) == [3]
            assert _tags(first) == [0, 1, 2, 3]
        producer.drain(timeout=5)


def test_start_oldest_adopts_a_publish_in_flight_as_it_joins(ring_name):
    """A subscriber joining at the oldest frames while a publish is in flight (WRITING,
    its ``subscribers`` loaded before the join) gets that frame too, once READY: it once
    adopted before joining, passed the slot, and the frame came neither way. A publish
    held up past ADOPT_WAIT_S delays the join no longer. C:
    test_oldest_adopts_a_publish_in_flight."""
    Ring.create(ring_name, slots=8, delivery="all").close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as holder:
        seg, held, positions = producer._seg, [], []
        for tag in (80, 81, 82):
            producer.publish(pa.table({"i": [tag]}), user_tag=tag)
            held.append(holder.next(timeout=5))
            positions.append((seg.mem.load64(seg.participant(holder.index, "cursor")) - 1) & L.SEQ_MASK)
        middle, last = seg.slot(positions[1]), seg.slot(positions[2])
        ready, last_ready = seg.mem.load64(middle), seg.mem.load64(last)
        seg.mem.store64(middle, L.slot_word(positions[1], L.WRITING, L.word_owner(ready)))
        pid = os.fork()
        if pid == 0:  # another process completes frame 81's publish while the join waits
            time.sleep(0.002)
            seg.mem.store64(middle, ready)
            os._exit(0)
        with Consumer.open(ring_name, start="oldest") as oldest:
            os.waitpid(pid, 0)
            assert _tags(oldest) == [80, 81, 82]
        seg.mem.store64(last, L.slot_word(positions[2], L.WRITING, L.word_owner(last_ready)))  # never completes
        started = time.monotonic()
        with Consumer.open(ring_name, start="oldest") as oldest:
            assert broadcast.ADOPT_WAIT_S <= time.monotonic() - started < 50 * broadcast.ADOPT_WAIT_S
            seg.mem.store64(last, last_ready)
            assert _tags(oldest) == [80, 81]
        for frame in held:
            frame.release()
        producer.drain(timeout=5)


def test_a_leftover_bit_of_a_freed_entry_is_released_by_the_next_sweep_that_finds_someone_dead(ring_name):
    """A publish that loaded ``subscribers`` before a sweep cleared a dead subscriber's
    bit can go READY after that sweep looked: the frame carries the bit of an entry
    freed meanwhile (here set by hand on entry 7, which nobody holds)."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(pa.table({"i": [70]}), user_tag=70)
        seg = ring.segment
        slot = next(seg.slots_at + i * 128 for i in range(8)
                    if (seg.mem.load64(seg.slots_at + i * 128) >> 13) & 7 == 2)  # the READY one
        # The bit is set after the child attaches: an attach repairs what its entry's last
        # occupant left (SPEC.md §4, Attach), which would release it first.
        child = python_child("hold", ring_name, "0")
        assert child.stdout.readline().split() == ["held"]
        seg.mem.or64(slot + 8, 1 << 7)  # `pending` (SPEC.md §5.4)
        assert _tags(consumer) == [70]
        assert producer.reap() == 0  # the leftover bit holds it
        child.send_signal(signal.SIGKILL)
        child.wait()
        report = ring.sweep()
        assert (report.found_dead, report.released) == (1, 1)
        assert producer.reap() == 1
    ring.close()


def _ready_position(seg) -> int:
    return next(seg.mem.load64(seg.slots_at + i * 128) >> 16 for i in range(seg.slot_count)
                if (seg.mem.load64(seg.slots_at + i * 128) >> 13) & 7 == 2)


def test_a_subscriber_waits_for_a_proxy_of_its_entry_and_a_proxy_leaves_an_entry_another_acts_for(ring_name):
    """SPEC.md §5.4, Proxies. Another live process holds entry j's proxy word (a sweep or
    producer acting for j, held up): a consumer that attaches at j waits for it before it
    subscribes, so nothing that proxy judged on j's previous occupant lands on a frame the
    new subscriber takes (a release judged on a FREE entry, landing after the new subscriber
    took the frame). Meanwhile sweeps and relieving producers leave j's shares alone; once the holder
    is dead they take the word over and release them."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    seg = ring.segment
    holder = subprocess.Popen(["sleep", "60"])
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        j = consumer.index + 1
        at = seg.participant(j, "proxy")
        held = holder.pid << 32 | (proc_stat(holder.pid)[1] & 0xFFFFFFFF)
        seg.mem.store64(at, held)
        joiner = python_child("hold", ring_name, "0")
        assert select.select([joiner.stdout], [], [], 0.3)[0] == []  # it waits for the proxy
        seg.mem.store64(at, 0)  # the proxy is done
        assert joiner.stdout.readline().split() == ["held"]
        joiner.kill()
        joiner.wait()
        ring.sweep()  # frees j
        assert L.pword_state(seg.participant_word(j)) == L.P_FREE
        seg.mem.store64(at, held)  # a leftover bit of j on a READY frame, the live holder acting for j
        producer.publish(pa.table({"i": [86]}), user_tag=86)
        frame = consumer.next(timeout=5)
        pos = _ready_position(seg)
        seg.mem.or64(seg.slot(pos) + 8, 1 << j)  # `pending`
        frame.release()
        broadcast.relieve(seg, pos)
        assert broadcast.sweep_dead(seg) == 0 and producer.reap() == 0  # left to the holder
        holder.kill()
        holder.wait()
        assert broadcast.sweep_dead(seg) == 1 and producer.reap() == 1  # taken over
        assert seg.mem.load64(at) == 0
    ring.close()


def test_an_attach_releases_its_entrys_leftover_shares_itself_while_a_proxy_holds_its_word(ring_name):
    """SPEC.md §4, Attach: a consumer attaching at entry j releases j's bit from every READY
    frame (the shares j's previous occupant left) itself, not through j's proxy word, which
    a live process holds here. Left there, the frame, published before it joined, would
    come to it (see test_broadcast.c test_attach_releases_leftovers_under_a_proxy)."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    seg = ring.segment
    holder = subprocess.Popen(["sleep", "60"])
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        j = consumer.index + 1
        producer.publish(pa.table({"i": [87]}), user_tag=87)
        frame = consumer.next(timeout=5)
        pending = seg.slot(_ready_position(seg)) + 8
        seg.mem.or64(pending, 1 << j)  # j's previous occupant's share
        at = seg.participant(j, "proxy")
        seg.mem.store64(at, holder.pid << 32 | (proc_stat(holder.pid)[1] & 0xFFFFFFFF))
        joiner = python_child("hold", ring_name, "0")
        deadline = time.monotonic() + 10
        while L.pword_state(seg.participant_word(j)) != L.P_ACTIVE and time.monotonic() < deadline:
            time.sleep(0.001)  # until it attached (and so repaired j's leftovers); it waits for the proxy
        seg.mem.store64(at, 0)
        assert joiner.stdout.readline().split() == ["held"]
        assert not seg.mem.load64(pending) & (1 << j)
        joiner.kill()
        joiner.wait()
        holder.kill()
        holder.wait()
        frame.release()
        assert producer.reap() == 1  # nobody else held it
    ring.close()


def test_a_share_of_a_free_entry_is_released_by_a_sweep_with_nobody_dead(ring_name):
    """SPEC.md §7 step 3: a share of an entry that is FREE (its freer's own sweep left
    it: the entry's proxy word held elsewhere, or a publish in flight) is released by
    the next sweep though no entry is dead (see test_broadcast.c
    test_leftover_share_with_nobody_dead)."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    seg = ring.segment
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        free_entry = 7
        assert L.pword_state(seg.participant_word(free_entry)) == L.P_FREE
        producer.publish(pa.table({"i": [88]}), user_tag=88)
        frame = consumer.next(timeout=5)
        seg.mem.or64(seg.slot(_ready_position(seg)) + 8, 1 << free_entry)  # `pending`
        frame.release()
        assert producer.reap() == 0  # the leftover share holds it
        report = ring.sweep()
        assert report.found_dead == 0 and report.released == 1
        assert producer.reap() == 1
    ring.close()


def test_a_ready_frame_whose_last_releaser_died_half_way_is_moved_on_by_the_next_sweep(ring_name):
    """A releaser killed between clearing the last bit of ``pending`` and moving the
    slot on leaves a READY frame nobody holds (SPEC.md §5.4, Release)."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(pa.table({"i": [71]}), user_tag=71)
        seg = ring.segment
        slot = next(seg.slots_at + i * 128 for i in range(8)
                    if (seg.mem.load64(seg.slots_at + i * 128) >> 13) & 7 == 2)
        seg.mem.and64(slot + 8, ~(1 << consumer.index))  # the release's first half only
        assert producer.reap() == 0 and consumer.try_next() is None
        child = python_child("hold", ring_name, "0")
        assert child.stdout.readline().split() == ["held"]
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert ring.sweep().found_dead == 1
        assert producer.reap() == 1
    ring.close()


def test_a_drop_its_producer_left_half_done_is_finished_by_the_subscribers_next_claim(ring_name):
    """A producer killed between moving a drop-oldest subscriber's cursor past a frame
    (marked DROPPING) and releasing its share (SPEC.md §5.4): while the mark is fresh
    its dropper may be alive, about to count the loss and clear it; once seen unchanged
    for DROP_STALE_NS the subscriber's next claim finishes the drop, which counts once,
    even when the dropper was only slow and finishes it too."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Producer.open(ring_name) as producer, Consumer.open(ring_name, on_slow="drop-oldest") as slow:
        producer.publish(pa.table({"i": [80]}), user_tag=80)
        producer.publish(pa.table({"i": [81]}), user_tag=81)
        seg = ring.segment
        at = seg.participant(slow.index, "cursor")
        pos = next(seg.mem.load64(seg.slots_at + i * 128) >> 16 for i in range(8)
                   if (seg.mem.load64(seg.slots_at + i * 128) >> 13) & 7 == 2)  # frame 80's position
        marked = L.CURSOR_DROPPING | (pos + 1)
        seg.mem.store64(at, marked)  # the drop's first half
        assert _tags(slow) == []  # fresh: its dropper's to finish
        time.sleep((broadcast.DROP_STALE_NS + 5_000_000) / 1e9)
        missed = _tags(slow)
        assert isinstance(missed, GpuringError) and missed.code == "FRAMES_MISSED" and missed.missed == 1
        broadcast._finish_drop(seg, slow.index, marked)  # the dropper, back from a long stall
        assert broadcast.untold(seg, slow.index) == 0  # counted once
        assert _tags(slow) == [81]
        producer.drain(timeout=5)
    ring.close()


def _flows(producer: Producer, consumer: Consumer, tags: range) -> None:
    """Each frame of ``tags`` published, then taken by ``consumer``, in order."""
    for k in tags:
        producer.publish(pa.table({"i": [k]}), user_tag=k, timeout=5)
        with consumer.next(timeout=5) as frame:
            assert frame.user_tag == k


def test_a_subscriber_whose_cursor_was_moved_far_behind_gets_the_next_frames(ring_name):
    """A cursor 2^40 positions behind (damage, SPEC.md §5.4 Claim) goes to the slot's
    lap at once, where it used to crawl there a scan's few positions per claim."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Consumer.open(ring_name) as consumer, Producer.open(ring_name) as producer:
        _flows(producer, consumer, range(3))
        at = ring.segment.participant(consumer.index, "cursor")
        ring.segment.mem.store64(at, (ring.segment.mem.load64(at) - (1 << 40)) & L.SEQ_MASK)
        _flows(producer, consumer, range(3, 19))
    ring.close()


def test_a_subscriber_whose_bit_was_cleared_is_a_subscriber_again_once_it_finds_the_ring_empty(ring_name):
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Consumer.open(ring_name) as consumer, Producer.open(ring_name) as producer:
        _flows(producer, consumer, range(1))
        ring.segment.mem.store64(ring.segment.control("subscribers"), 0)
        assert producer.subscribers == 0
        assert consumer.try_next() is None
        assert producer.subscribers == 1
        _flows(producer, consumer, range(1, 17))
    ring.close()


def test_a_live_producer_whose_subscription_was_overwritten_does_not_hold_the_ring(ring_name):
    """Its entry's `subscription` holds a value no policy has and its bit is set in
    `subscribers` (damage, SPEC.md §5.4): it is no subscriber, so its shares are
    released as a leftover bit's, where they used to hold every frame while it lived."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Consumer.open(ring_name) as consumer, Producer.open(ring_name) as producer:
        _flows(producer, consumer, range(1))
        ring.segment.mem.store32(ring.segment.participant(producer.index, "subscription"), 4)  # the first value no policy has
        ring.segment.mem.or64(ring.segment.control("subscribers"), 1 << producer.index)
        assert producer.subscribers == 2
        _flows(producer, consumer, range(1, 25))  # three rings: the damaged share would stop the first
    ring.close()


def test_a_subscriber_whose_entry_state_was_overwritten_gives_the_entry_up(ring_name):
    """Its state word says ACTIVE with another generation (SPEC.md §4, "Giving up a
    damaged entry"): it fails with DETACHED and marks the entry DEAD, so that a sweep
    clears its bit, which would otherwise hold every frame (policy block)."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    with Consumer.open(ring_name) as reader, Producer.open(ring_name) as producer:
        lost = Consumer.open(ring_name)
        at = ring.segment.participant(lost.index)
        ring.segment.mem.store64(at, ring.segment.mem.load64(at) ^ (0x5A << 40))
        with pytest.raises(GpuringError) as e:
            lost.try_next()
        assert e.value.code == "DETACHED"
        assert L.pword_state(ring.segment.participant_word(lost.index)) == L.P_DEAD
        _flows(producer, reader, range(24))  # three rings: the lost bit would stop the first
        lost.close()
    ring.close()


def test_a_share_set_again_after_its_release_is_released_by_its_subscriber_and_a_held_one_is_not(ring_name):
    """SPEC.md §5.4, "Stray shares": damage sets a subscriber's bit again in the
    ``pending`` of a frame it took and released. Nothing else would release it
    (a taken frame is never taken back), so the ring stops a lap later unless the
    subscriber's own sweep releases it; a frame it still holds keeps its share."""
    ring = Ring.create(ring_name, slots=8, delivery="all")
    seg = ring.segment
    with Consumer.open(ring_name) as victim, Consumer.open(ring_name) as other, Producer.open(ring_name) as producer:
        producer.publish(pa.table({"i": [0]}), user_tag=0)
        held = victim.next(timeout=5)
        kept = other.next(timeout=5)
        slot = seg.slot(next(p for p in range(64) if seg.mem.load64(seg.slot(p)) >> 16 == p
                             and (seg.mem.load64(seg.slot(p)) >> 13) & 7 == L.READY))
        held.release()
        seg.mem.or64(slot + 8, 1 << victim.index)  # the stray share
        kept.release()
        producer.publish(pa.table({"i": [1]}), user_tag=1)
        mine = victim.next(timeout=5)  # held across the sweeps below
        assert broadcast.release_strays(victim._seg, victim.index) == 1
        assert broadcast.release_strays(victim._seg, victim.index) == 0
        with pytest.raises(GpuringError):
            victim.next(timeout=0.6)  # waits long enough to sweep twice
        mine_slot = next(seg.slot(p) for p in range(64) if seg.mem.load64(seg.slot(p)) >> 16 == p
                         and (seg.mem.load64(seg.slot(p)) >> 13) & 7 == L.READY)
        assert seg.mem.load64(mine_slot + 8) & (1 << victim.index), "the frame it holds keeps its share"
        assert mine.to_arrow().column("i").to_pylist() == [1]
        mine.release()
        other.next(timeout=5).release()
        for k in range(2, 26):  # three rings
            producer.publish(pa.table({"i": [k]}), user_tag=k, timeout=5)
            for c in (victim, other):
                with c.next(timeout=5) as f:
                    assert f.user_tag == k
    ring.close()


def test_a_stray_share_is_released_by_the_sweeps_of_a_waiting_subscriber(ring_name):
    """As above, with no call made for it: the subscriber waits (next) while the ring
    is full behind the stray share, and its sweep releases it."""
    ring = Ring.create(ring_name, slots=4, delivery="all")
    seg = ring.segment
    with Consumer.open(ring_name) as victim, Producer.open(ring_name) as producer:
        producer.publish(pa.table({"i": [0]}), user_tag=0)
        frame = victim.next(timeout=5)
        slot = next(seg.slot(p) for p in range(64) if seg.mem.load64(seg.slot(p)) >> 16 == p
                    and (seg.mem.load64(seg.slot(p)) >> 13) & 7 == L.READY)
        frame.release()  # the last share: the slot went RELEASED, then reaped
        producer.reap()
        for k in range(1, 4):
            producer.publish(pa.table({"i": [k]}), user_tag=k)
            victim.next(timeout=5).release()
        producer.publish(pa.table({"i": [4]}), user_tag=4)  # in frame 0's slot again
        assert seg.mem.load64(slot) >> 16 == 4
        taken = victim.next(timeout=5)
        taken.release()
        # The stray: frame 4's share set again after its release, and the slot put back READY.
        producer_word = L.slot_word(4, L.READY, producer.index + 1)
        seg.mem.store64(slot + 8, 1 << victim.index)
        seg.mem.store64(slot, producer_word)
        for k in range(5, 8):
            producer.publish(pa.table({"i": [k]}), user_tag=k)
        with pytest.raises(GpuringError) as full:
            producer.publish(pa.table({"i": [8]}), block=False)
        assert full.value.code == "RING_FULL"
        tags = []
        for _ in range(3):
            with victim.next(timeout=5) as f:
                tags.append(f.user_tag)
        assert tags == [5, 6, 7]
        with pytest.raises(GpuringError):
            victim.next(timeout=0.6)  # asleep, it sweeps and finds the stray share
        producer.publish(pa.table({"i": [8]}), user_tag=8, timeout=5)
        with victim.next(timeout=5) as f:
            assert f.user_tag == 8
    ring.close()


def test_a_claimed_word_in_a_broadcast_ring_is_damage_that_a_sweep_repairs(ring_name):
    """Subscribers never store CLAIMED or LEASED (SPEC.md §7 step 2, Consensus): such
    a word naming a live subscriber would otherwise stay for good and fill the ring."""
    ring = Ring.create(ring_name, slots=4, delivery="all")
    seg = ring.segment
    with Consumer.open(ring_name) as consumer, Producer.open(ring_name) as producer:
        _flows(producer, consumer, range(1))
        producer.publish(pa.table({"i": [1]}), user_tag=1)
        at = next(seg.slot(p) for p in range(64) if seg.mem.load64(seg.slot(p)) >> 16 == p
                  and (seg.mem.load64(seg.slot(p)) >> 13) & 7 == L.READY)
        pos = seg.mem.load64(at) >> 16
        seg.mem.store64(at, L.slot_word(pos, L.CLAIMED, consumer.index + 1))
        assert ring.sweep().corrupt == 1
        assert (seg.mem.load64(at) >> 13) & 7 == L.EMPTY
        assert consumer.try_next() is None  # the damaged frame is gone
        _flows(producer, consumer, range(2, 14))  # three rings more
    ring.close()
