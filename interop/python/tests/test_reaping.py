"""A producer reclaims released frames (SPEC.md §5.2, reap): the oldest first on
every publish, and all of them every FULL_REAP_EVERY publishes, so the memory of
a frame released behind one still held comes back too."""
from __future__ import annotations

import pyarrow as pa

from gpuring import Consumer, Producer, Ring
from gpuring.producer import FULL_REAP_EVERY

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
