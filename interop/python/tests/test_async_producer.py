"""Producers inside an asyncio event loop: ``publish_async`` and ``drain_async``
sleep the loop on the producer's doorbell (SPEC.md §6.1) while the ring is full
or frames are out, woken by the releases of consumers in other processes
(Python, Node), and leave nothing behind when they time out or are cancelled."""
import asyncio
import subprocess
import sys

import pyarrow as pa
import pytest

from conftest import node_available, node_child, python_env
from gpuring import Consumer, GpuringError, Producer, Ring

CONSUME = """
import sys, gpuring
with gpuring.Consumer.open(sys.argv[1]) as c:
    print("open", flush=True)
    sys.stdin.readline()  # go
    for _ in range(int(sys.argv[2])):
        with c.next(timeout=30) as f:
            print(f.to_arrow().column("i").to_pylist()[0], flush=True)
"""


def _python_consumer(ring: str, frames: int) -> subprocess.Popen:
    """A Python consumer in its own process: it prints "open", waits for a line, then takes FRAMES frames, printing each one's i."""
    child = subprocess.Popen([sys.executable, "-c", CONSUME, ring, str(frames)], env=python_env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "open"
    return child


def _asleep(ring: Ring, index: int) -> list[str]:
    return next(p for p in ring.inspect()["participants"] if p["index"] == index)["asleep"]


def _free_bytes(producer: Producer) -> int:
    """Bytes free in the producer's arenas (a peek at its allocator: what a failed publish must give back)."""
    return sum(length for a in producer._pool.arenas if a for _, length in a.free)


async def _until(check, seconds: float = 10.0) -> bool:
    for _ in range(int(seconds * 1000)):
        if check():
            return True
        await asyncio.sleep(0.001)
    return check()


@pytest.mark.parametrize("delivery", ["each", "all"])
def test_publish_async_on_a_full_ring_sleeps_on_the_doorbell_while_other_tasks_run_and_a_consumers_releases_wake_it(ring_name, delivery):
    ring = Ring.create(ring_name, slots=4, delivery=delivery)  # "all": the child is a subscriber that blocks producers
    child = _python_consumer(ring_name, 12)

    async def produce(producer: Producer) -> tuple[list[int], int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        ticker = asyncio.ensure_future(tick())
        for i in range(4):
            await producer.publish_async(pa.table({"i": [i]}), timeout=0)
        blocked = asyncio.ensure_future(producer.publish_async(pa.table({"i": [4]}), timeout=30))
        assert await _until(lambda: _asleep(ring, producer.index) == ["space"]), "the full ring puts it to sleep on SPACE"
        assert ring.inspect()["doorbells"] == {"data": 0, "space": 1}
        before = ticks
        await asyncio.sleep(0.05)
        assert ticks > before, "other tasks run while it waits"
        assert not blocked.done()
        child.stdin.write("go\n")
        child.stdin.flush()
        ids = [await blocked]
        for i in range(5, 12):
            ids.append(await producer.publish_async(pa.table({"i": [i]}), timeout=30))
        await producer.drain_async(timeout=30)
        ticker.cancel()
        return ids, producer.in_flight

    with Producer.open(ring_name) as producer:
        ids, in_flight = asyncio.run(produce(producer))
        assert ring.inspect()["doorbells"] == {"data": 0, "space": 0}
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert [int(v) for v in out.split()] == list(range(12)), "every frame, in order"
    assert ids == list(range(5, 13)), "ids in publication order"
    assert in_flight == 0
    ring.close()


def test_a_timed_out_or_cancelled_publish_async_publishes_nothing_frees_its_memory_and_clears_its_bell(ring_name):
    ring = Ring.create(ring_name, slots=2)

    async def run(producer: Producer, consumer: Consumer) -> list[int]:
        for i in range(2):
            await producer.publish_async(pa.table({"i": [i]}))
        free = _free_bytes(producer)
        with pytest.raises(GpuringError) as e:
            await producer.publish_async(pa.table({"i": [98]}), timeout=0.05)
        assert e.value.code == "TIMEOUT"
        waiting = asyncio.ensure_future(producer.publish_async(pa.table({"i": [99]})))
        assert await _until(lambda: ring.inspect()["doorbells"]["space"] == 1)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert ring.inspect()["doorbells"] == {"data": 0, "space": 0}
        assert _free_bytes(producer) == free, "the unpublished frames' memory came back"
        got = []
        for _ in range(2):
            with consumer.next(timeout=5) as frame:
                got += frame.to_arrow().column("i").to_pylist()
        await producer.publish_async(pa.table({"i": [2]}), timeout=5)
        with consumer.next(timeout=5) as frame:
            got += frame.to_arrow().column("i").to_pylist()
        await producer.drain_async(timeout=5)
        return got

    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        assert asyncio.run(run(producer, consumer)) == [0, 1, 2], "neither the timed-out nor the cancelled frame went out"
        assert producer.in_flight == 0
    ring.close()


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here (run npm install at the root)")
def test_a_node_consumers_releases_wake_an_async_python_producer_draining(ring_name):
    ring = Ring.create(ring_name, slots=8)

    async def run(producer: Producer) -> None:
        for i in range(8):
            await producer.publish_async(pa.table({"i": [i]}), timeout=0)
        draining = asyncio.ensure_future(producer.drain_async(timeout=60))
        assert await _until(lambda: _asleep(ring, producer.index) == ["space"]), "drain_async sleeps on SPACE"
        child = node_child("child.ts", "take-release", ring_name, "8")
        await draining
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err

    with Producer.open(ring_name) as producer:
        asyncio.run(run(producer))
        assert producer.in_flight == 0
    ring.close()
