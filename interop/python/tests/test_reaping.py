"""A producer reclaims released frames (SPEC.md §5.2, reap): the oldest first on
every publish, and all of them every FULL_REAP_EVERY publishes, so the memory of
a frame released behind one still held comes back too."""
from __future__ import annotations

import os

import pyarrow as pa
import pytest

from gpuring import Consumer, GpuringError, Producer, Ring
from gpuring.producer import FULL_REAP_EVERY
from gpuring.recovery import arena_path

TABLE = pa.table({"x": pa.array([1, 2, 3], pa.int64())})


def test_frames_released_behind_a_held_one_are_reclaimed_by_the_full_passes(ring_name):
    Ring.create(ring_name, slots=4 * FULL_REAP_EVERY).close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(TABLE)
        oldest = consumer.try_next()
        most = 0
        for _ in range(3 * FULL_REAP_EVERY):
            producer.publish(TABLE)
            consumer.try_next().release()
            most = max(most, producer.in_flight)
        # Oldest-first reaps stop at the held frame; without full passes all 3 x FULL_REAP_EVERY would wait.
        assert most <= FULL_REAP_EVERY + 1
        assert producer.reap() > 0 and producer.in_flight == 1  # the held one
        oldest.release()
        assert producer.reap() == 1 and producer.in_flight == 0


def test_an_arena_header_overwritten_under_its_producer_is_restored_by_the_next_full_reap(ring_name):
    """SPEC.md §9: until then every consumer that maps the arena refuses it (ARENA_INVALID)."""
    Ring.create(ring_name, slots=8).close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        producer.publish(TABLE)
        consumer.try_next().release()
        fd = os.open(arena_path(ring_name, producer.index, producer.generation, 0), os.O_RDWR)
        try:
            header = os.pread(fd, 32, 0)
            os.pwrite(fd, (0xBAD).to_bytes(8, "little"), 0)  # the magic
            with Consumer.open(ring_name) as later:
                producer.publish(TABLE)
                with pytest.raises(GpuringError) as e:
                    later.try_next()
                assert e.value.code == "ARENA_INVALID"
            for _ in range(FULL_REAP_EVERY + 2):
                producer.publish(TABLE)
                consumer.try_next().release()
            assert os.pread(fd, 32, 0) == header
        finally:
            os.close(fd)
        producer.publish(TABLE)
        with Consumer.open(ring_name) as later:
            assert later.try_next().description is not None
