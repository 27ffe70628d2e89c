"""A consumer that stays open lets go of the arenas of producers that left,
once no frame can refer to them (SPEC.md §9): their producer is gone and their
file removed. Until then, every producer that came and went kept its arenas'
memory in /dev/shm for as long as the consumer lived."""
from __future__ import annotations

import time

import pyarrow as pa

from gpuring import Consumer, Producer, Ring
from gpuring.slot_protocol import SWEEP_EVERY


def mapped_arenas(name: str) -> list[str]:
    """This process's mappings of ring ``name``'s arena files, removed or not."""
    with open("/proc/self/maps") as maps:
        return [line.strip() for line in maps if f"/gpuring.{name}.p" in line]


def poll_for(consumer: Consumer, seconds: float) -> None:
    """Polls that find nothing sweep and let go, as waits do."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert consumer.try_next() is None
        time.sleep(0.01)


def test_a_consumer_that_stays_open_lets_go_of_departed_producers_arenas_but_not_of_one_whose_frame_it_holds(ring_name):
    Ring.create(ring_name, slots=16).close()
    with Consumer.open(ring_name) as consumer:
        held = []
        for k in range(3):
            producer = Producer.open(ring_name, arena_size=1 << 20)
            for v in (k, 10 + k):
                producer.publish(pa.table({"v": pa.array([v], pa.int64())}))
            consumer.next(timeout=5).release()
            held.append(consumer.next(timeout=5))  # the last frame stays leased as its producer leaves
            producer.close()
        poll_for(consumer, 3 * SWEEP_EVERY)
        assert len(mapped_arenas(ring_name)) >= 3, "arenas of frames still held stay mapped"
        assert [f.to_arrow().column("v")[0].as_py() for f in held] == [10, 11, 12]
        for f in held:
            f.release()
        poll_for(consumer, 3 * SWEEP_EVERY)
        assert mapped_arenas(ring_name) == []
