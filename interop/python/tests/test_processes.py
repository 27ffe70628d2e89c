"""Python producers and consumers in separate processes: delivery, crash
recovery and damaged segments."""
import os
import signal
import struct
import subprocess
import sys
import time

import pyarrow as pa
import pytest

from all_types import all_types_table
from conftest import break_utf8_offsets, python_child, python_env
from gpuring import Consumer, GpuringError, Producer, Ring
from gpuring import layout as L


def test_child_producer_delivers_every_frame_in_order(ring_name):
    Ring.create(ring_name, slots=8).close()
    child = python_child("produce", ring_name, "300")
    with Consumer.open(ring_name) as consumer:
        for seq in range(300):
            with consumer.next(timeout=30) as frame:
                t = frame.to_arrow().to_pydict()
                assert t == {"seq": [seq], "text": [f"frame {seq} " + "x" * (seq % 7)]}
                del t
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert out.strip() == "drained"


def test_leases_of_a_killed_consumer_are_released_for_it(ring_name):
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer:
        for i in range(3):
            producer.publish(pa.table({"i": [i]}))
        child = python_child("hold", ring_name, "2")
        assert child.stdout.readline().split() == ["held", "1", "2"]
        assert ring.inspect()["slotStates"]["LEASED"] == 2
        child.send_signal(signal.SIGKILL)
        child.wait()
        report = ring.sweep()
        assert (report.found_dead, report.released) == (1, 2)
        assert producer.reap() == 2 and producer.in_flight == 1
        with Consumer.open(ring_name) as consumer, consumer.next(timeout=5) as frame:
            assert frame.to_arrow().column("i").to_pylist() == [2]
        producer.drain(timeout=5)
    ring.close()


def test_frames_held_unconfirmed_by_a_killed_consumer_are_delivered_again(ring_name):
    """next_held (what a bridge forwards with) leaves slots CLAIMED: a killed
    holder's frames go back to the ring, not to their producer."""
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer:
        for i in range(3):
            producer.publish(pa.table({"i": [i]}))
        child = python_child("hold", ring_name, "2", "held")
        assert child.stdout.readline().split() == ["held", "1", "2"]
        assert ring.inspect()["slotStates"]["CLAIMED"] == 2
        child.send_signal(signal.SIGKILL)
        child.wait()
        report = ring.sweep()
        assert (report.found_dead, report.released) == (1, 0)
        with Consumer.open(ring_name) as consumer:
            got = sorted(_take_value(consumer) for _ in range(3))
        assert got == [0, 1, 2]
        producer.drain(timeout=5)
    ring.close()


def _take_value(consumer: Consumer) -> int:
    with consumer.next(timeout=5) as frame:
        return int(frame.to_arrow().column("i")[0].as_py())


def test_next_held_is_refused_on_a_broadcast_ring(ring_name):
    Ring.create(ring_name, delivery="all").close()
    with Consumer.open(ring_name) as consumer, pytest.raises(GpuringError) as e:
        consumer.next_held(timeout=0)
    assert e.value.code == "INVALID_ARGUMENT"


def test_a_producer_waiting_for_space_held_by_a_killed_consumer_sweeps_and_goes_on(ring_name):
    """Nobody else sweeps here: the waiting producer must find the dead holder
    itself (SPEC.md §7: waiters sweep), or it waits until its timeout."""
    Ring.create(ring_name, slots=2).close()
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"i": [0]}))
        child = python_child("hold", ring_name, "1")
        assert child.stdout.readline().split() == ["held", "1"]
        with Consumer.open(ring_name) as consumer:
            producer.publish(pa.table({"i": [1]}))
            consumer.next(timeout=5).release()
            child.send_signal(signal.SIGKILL)
            child.wait()
            producer.publish(pa.table({"i": [2]}), timeout=5)  # needs the killed child's slot
            with consumer.next(timeout=5) as frame:
                assert frame.to_arrow().column("i").to_pylist() == [2]


@pytest.mark.parametrize("block", [True, False], ids=["waits-of-0.1-s", "tries-0.1-s-apart"])
def test_a_producer_waiting_in_short_timeouts_over_and_over_still_sweeps(ring_name, block):
    """Waits of 0.1 s, each shorter than the sweep interval (0.25 s): the interval
    is counted across waits, so the dead holder is found within a few. A producer
    that only tries (block=False) never waits: its tries sweep when one is due."""
    Ring.create(ring_name, slots=2).close()
    with Producer.open(ring_name) as producer:
        child = python_child("hold", ring_name, "2")
        producer.publish(pa.table({"i": [0]}))
        producer.publish(pa.table({"i": [1]}))
        assert child.stdout.readline().split()[0] == "held"
        child.send_signal(signal.SIGKILL)
        child.wait()
        codes = []
        for _ in range(30):
            try:
                producer.publish(pa.table({"i": [2]}), timeout=0.1, block=block)
                break
            except GpuringError as e:
                codes.append(e.code)
                if not block:
                    time.sleep(0.1)
        assert set(codes) <= {"TIMEOUT" if block else "RING_FULL"} and len(codes) < 30, codes


def _write_segment(name: str, data: bytes) -> None:
    with open(f"/dev/shm/gpuring.{name}", "wb") as f:
        f.write(data)


@pytest.mark.parametrize("damage, code", [
    (lambda b: b"not a segment at all" + bytes(300), "SEGMENT_FOREIGN"),
    (lambda b: b[:200], "SEGMENT_TRUNCATED"),
    (lambda b: b[:8] + struct.pack("<I", (L.VERSION_MAJOR + 1) << 16) + b[12:], "SEGMENT_VERSION"),
    (lambda b: b[:16] + struct.pack("<Q", 1) + b[24:], "SEGMENT_LAYOUT"),
    (lambda b: b[:4096], "SEGMENT_TRUNCATED"),
    (lambda b: b[:8] + bytes(4) + b[12:], "SEGMENT_NOT_READY"),
])
def test_damaged_segments_are_refused_with_their_code(ring_name, damage, code):
    Ring.create(ring_name, slots=64).close()
    with open(f"/dev/shm/gpuring.{ring_name}", "rb") as f:
        good = f.read()
    os.unlink(f"/dev/shm/gpuring.{ring_name}")
    _write_segment(ring_name, damage(good))
    with pytest.raises(GpuringError) as e:
        Ring.open(ring_name, timeout=0.05)
    assert e.value.code == code


def test_a_creator_killed_at_any_moment_leaves_no_ring_or_a_ready_one(ring_name):
    """SPEC.md §3.1: never a half-built segment that openers refuse (SEGMENT_NOT_READY)
    until someone removes it. The kills land before, during and after the create."""
    outcomes = []
    for i in range(12):
        child = python_child("create", ring_name, str(1 << 16))
        assert child.stdout.readline() == "go\n"
        time.sleep(i * 0.02)
        child.send_signal(signal.SIGKILL)
        child.wait()
        try:
            Ring.open(ring_name, timeout=0.001).close()
            outcomes.append("ready")
            Ring.unlink(ring_name)
        except GpuringError as e:
            assert e.code == "SEGMENT_NOT_FOUND", f"kill {i}: {e}"
            outcomes.append("none")
    print("a creator killed 12 times:", outcomes)


def test_garbage_slot_reference_is_rejected_and_the_ring_moves_on(ring_name):
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(pa.table({"i": [1]}))
        producer.publish(pa.table({"i": [2]}))
        seg = ring.segment
        ref_at = seg.slot(0) + L.SLOT["ref"] + L.FRAME_REF["body_offset"]
        seg.mem.store64(ref_at, 1 << 40)
        with pytest.raises(GpuringError) as e:
            consumer.next(timeout=1)
        assert e.value.code == "FRAME_BOUNDS"
        with consumer.next(timeout=1) as frame:
            assert frame.to_arrow().column("i").to_pylist() == [2]
        producer.drain(timeout=5)
    ring.close()


def test_errors_have_stable_codes(ring_name):
    with pytest.raises(GpuringError) as e:
        Ring.open(ring_name)
    assert e.value.code == "SEGMENT_NOT_FOUND"
    with pytest.raises(GpuringError) as e:
        Ring.create("bad name!")
    assert e.value.code == "INVALID_ARGUMENT"
    Ring.create(ring_name).close()
    with pytest.raises(GpuringError) as e:
        Ring.create(ring_name)
    assert e.value.code == "SEGMENT_EXISTS"
    with Producer.open(ring_name) as p:
        with pytest.raises(GpuringError) as e:
            p.publish(object())
        assert e.value.code == "INVALID_ARGUMENT"
        with pytest.raises(GpuringError) as e:
            p.publish(pa.table({"nothing": pa.nulls(3)}))  # Arrow's null type is not carried
        assert e.value.code == "INVALID_ARGUMENT" and "'n'" in str(e.value)
    with Consumer.open(ring_name) as c:
        with pytest.raises(GpuringError) as e:
            c.next(timeout=0.05)
        assert e.value.code == "TIMEOUT"


def test_arguments_of_the_wrong_type_are_invalid_argument_and_leave_the_ring_working(ring_name):
    """A bad user_tag used to fail while packing the slot reference, after the slot
    was claimed: the slot stayed WRITING under a live producer and the ring stopped."""
    from gpuring import decode_frame, encode_frame
    refused = [lambda: Ring.create(ring_name + "x", slots="a"), lambda: Ring.create(ring_name + "x", participants=1.5),
               lambda: decode_frame(None), lambda: encode_frame(None), lambda: Producer.open(ring_name, arena_size=-1),
               lambda: Producer.open(ring_name, arena_size="x"), lambda: Consumer.open(ring_name, timeout="x")]
    Ring.create(ring_name, slots=4).close()
    table = pa.table({"i": pa.array([7], pa.int32())})
    with Producer.open(ring_name) as p, Consumer.open(ring_name) as c:
        refused += [lambda: p.publish(table, user_tag=-1), lambda: p.publish(table, user_tag=1 << 64),
                    lambda: p.publish(table, user_tag="x"), lambda: p.publish(table, timeout=-1),
                    lambda: p.publish(table, timeout="x"), lambda: c.next(timeout=float("nan")), lambda: p.drain(timeout="x"),
                    # host_space() and publish() of a dict pyarrow cannot convert raised TypeError (an API fuzz found them)
                    lambda: p.host_space("x"), lambda: p.host_space(1.5), lambda: p.host_space(None),
                    lambda: p.publish({"i": 7}), lambda: p.publish({"i": [1, 2], "j": [1]})]
        for call in refused:
            with pytest.raises(GpuringError) as e:
                call()
            assert e.value.code == "INVALID_ARGUMENT"
        for k in range(8):  # twice around the 4 slots
            p.publish(table, user_tag=k)
            with c.next(timeout=5) as frame:
                assert (frame.user_tag, frame.to_arrow().to_pydict()) == (k, {"i": [7]})


def test_a_malformed_frame_description_is_invalid_argument_and_nothing_is_published(ring_name):
    from dataclasses import replace
    from gpuring.description import BufferDescriptor as B, ColumnDescriptor, FrameDescription
    column = ColumnDescriptor("x", "C", 0, [B(), B()])
    valid = FrameDescription(0, [column])
    looped = replace(column, children=[])
    looped.children.append(looped)
    malformed = [replace(valid, columns=None), replace(valid, columns=[None]), replace(valid, dictionaries=None),
                 replace(valid, columns=[replace(column, buffers=None)]), replace(valid, columns=[replace(column, buffers=[None, None])]),
                 replace(valid, columns=[replace(column, children=None)]), replace(valid, columns=[looped]),
                 replace(valid, columns=[replace(column, name=5)]), replace(valid, sync_handle=None),
                 replace(valid, metadata=[("k",)]), replace(valid, columns=[replace(column, buffers=[B(), B(handle=b"x")])])]
    Ring.create(ring_name, slots=4).close()
    with Producer.open(ring_name) as p, Consumer.open(ring_name) as c:
        for d in malformed:
            with pytest.raises(GpuringError) as e:
                p.publish_description(d)
            assert e.value.code == "INVALID_ARGUMENT"
        assert c.try_next() is None
        p.publish_description(valid, user_tag=9)
        with c.next(timeout=5) as frame:
            assert frame.user_tag == 9 and frame.description.columns[0].name == "x"


def test_an_empty_table_of_every_type_arrives_with_its_schema(ring_name):
    empty = all_types_table(0)  # with no rows, its dictionary column infers null values, which are not carried
    table = empty.set_column(empty.schema.get_field_index("dictionary"), "dictionary",
                             pa.array([], pa.dictionary(pa.int32(), pa.string())))
    Ring.create(ring_name).close()
    with Producer.open(ring_name) as p, Consumer.open(ring_name) as c:
        with pytest.raises(GpuringError) as e:
            p.publish(empty)
        assert e.value.code == "INVALID_ARGUMENT" and "'n'" in str(e.value)
        p.publish(table)
        with c.next(timeout=5) as frame:
            got = frame.to_arrow()
    assert got.num_rows == 0 and got.schema == table.schema


@pytest.mark.parametrize("values, index, to, says", [
    (["ab", "cd"], None, 99, "value offsets [0, 99]"),          # the last offset past the data
    (["ab", "cd", "e"], 1, 64 << 20, "value offset 2 is 4"),   # ends fine, value 0 is not
])
def test_value_offsets_outside_their_data_are_refused_before_pyarrow_reads_them(ring_name, values, index, to, says):
    """Every offset of the slice is checked, not only its ends: pyarrow read 64 MiB
    past the data for [0, 64 MiB, 4, 5] before."""
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(pa.table({"s": pa.array(values)}))
        break_utf8_offsets(ring_name, producer, values, index=index, to=to)
        with consumer.next(timeout=5) as frame:
            with pytest.raises(GpuringError) as e:
                frame.to_arrow()
            assert e.value.code == "FRAME_BOUNDS" and says in str(e.value)
    ring.close()


def test_offsets_changed_in_shared_memory_after_the_check_do_not_reach_pyarrow(ring_name):
    """pyarrow reads the private copy of the offsets that was checked: a producer
    (or anyone) rewriting them afterwards cannot make it read past the data."""
    values = ["ab", "cd", "e"] * 3
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for _ in range(2):  # the first frame of a shape is imported through the C data interface, later ones not
            producer.publish(pa.table({"s": pa.array(values)}))
            with consumer.next(timeout=5) as frame:
                got = frame.to_arrow()
                break_utf8_offsets(ring_name, producer, values, index=1, to=64 << 20)
                assert got.column("s").to_pylist() == values
    ring.close()


def _rewrite_in_arena(ring: str, producer: Producer, pattern: bytes, at: int, value: bytes) -> None:
    """Overwrites ``value`` at byte ``at`` of the first copy of ``pattern`` in the producer's arena."""
    with open(f"/dev/shm/gpuring.{ring}.p{producer.index}g{producer.generation}.a0", "r+b") as f:
        found = f.read().rfind(pattern)
        assert found > 0, "the pattern is not in the arena"
        f.seek(found + at)
        f.write(value)


def test_dictionary_indices_outside_the_dictionary_are_refused_and_those_under_nulls_ignored(ring_name):
    """SPEC.md §8.2: pyarrow looks values up with the indices it is given."""
    column = pa.array(["x", "y", "x", None, "y", "x", "y"]).dictionary_encode()
    pattern = column.indices.buffers()[1].to_pybytes()[:4 * len(column)]
    ring = Ring.create(ring_name, slots=4)
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for row, expect in ((3, None), (2, "dictionary index 99")):
            producer.publish(pa.table({"d": column}))
            _rewrite_in_arena(ring_name, producer, pattern, 4 * row, (99).to_bytes(4, "little"))
            with consumer.next(timeout=5) as frame:
                if expect is None:  # under a null: any value
                    assert frame.to_arrow().column("d").to_pylist() == column.to_pylist()
                else:
                    with pytest.raises(GpuringError) as e:
                        frame.to_arrow()
                    assert e.value.code == "FRAME_BOUNDS" and expect in str(e.value)
    ring.close()


def test_unlink_removes_the_arenas_left_behind_also_when_the_segment_is_gone(ring_name):
    Ring.create(ring_name, slots=4).close()
    with Producer.open(ring_name) as producer:
        producer.publish(pa.table({"i": pa.array([1], pa.int32())}))
    arenas = lambda: [f for f in os.listdir("/dev/shm") if f.startswith(f"gpuring.{ring_name}.p")]  # noqa: E731
    assert len(arenas()) == 1
    os.unlink(f"/dev/shm/gpuring.{ring_name}")
    Ring.unlink(ring_name)
    assert arenas() == []
    with pytest.raises(GpuringError) as e:
        Ring.unlink(ring_name)
    assert e.value.code == "SEGMENT_NOT_FOUND"


def test_create_exist_ok_opens_the_ring_that_is_there(ring_name):
    Ring.create(ring_name, slots=8).close()
    with pytest.raises(GpuringError) as e:
        Ring.create(ring_name)
    assert e.value.code == "SEGMENT_EXISTS"
    with Ring.create(ring_name, slots=64, exist_ok=True) as ring:
        assert ring.inspect()["slots"] == 8


def test_wait_for_returns_once_another_process_creates_the_ring(ring_name):
    with pytest.raises(GpuringError) as e:
        Ring.wait_for(ring_name, timeout=0.05)
    assert e.value.code == "SEGMENT_NOT_FOUND"
    child = subprocess.Popen([sys.executable, "-c", f"import time, gpuring; time.sleep(0.2); gpuring.Ring.create({ring_name!r}, slots=4).close()"],
                             env=python_env())
    Ring.wait_for(ring_name, timeout=30)
    assert child.wait(timeout=30) == 0
    with Consumer.open(ring_name) as consumer:
        assert consumer.try_next() is None
