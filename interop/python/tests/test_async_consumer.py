"""Consumers inside an asyncio event loop: ``next_async`` and ``async for`` sleep
the loop on the consumer's doorbell (SPEC.md §6.1), woken by producers in other
processes (Python, Node), and leave nothing behind when they time out, are
cancelled or are killed."""
import asyncio
import os
import signal
import subprocess
import time

import pyarrow as pa
import pytest

from conftest import node_available, node_child, python_child
from gpuring import Consumer, GpuringError, Producer, Ring, slot_protocol


async def _watch(ring: Ring, index: int, seen: list[dict]) -> None:
    """Records, every millisecond, what entry ``index`` sleeps on and the ring's sleeper counts."""
    while True:
        i = ring.inspect()
        entry = next(p for p in i["participants"] if p["index"] == index)
        seen.append({"asleep": entry["asleep"], "doorbells": i["doorbells"]})
        await asyncio.sleep(0.001)


def test_async_for_takes_a_child_producers_frames_in_order_while_the_loop_runs(ring_name):
    ring = Ring.create(ring_name, slots=8)
    child = python_child("produce", ring_name, "300")

    async def consume(consumer: Consumer) -> tuple[list[int], list[dict]]:
        seen: list[dict] = []
        watcher = asyncio.ensure_future(_watch(ring, consumer.index, seen))
        seqs = []
        async for frame in consumer:
            with frame:
                t = frame.to_arrow().to_pydict()
                assert t["text"] == [f"frame {t['seq'][0]} " + "x" * (t["seq"][0] % 7)]
                seqs.append(t["seq"][0])
                del t
            if len(seqs) == 300:
                break
        watcher.cancel()
        return seqs, seen

    with Consumer.open(ring_name) as consumer:
        seqs, seen = asyncio.run(consume(consumer))
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0, err
    assert seqs == list(range(300))
    assert seen, "the watching task ran while the consumer waited"
    assert any(s["asleep"] == ["data"] for s in seen), "it slept on its doorbell"
    assert all(s["doorbells"]["data"] <= 1 and s["doorbells"]["space"] == 0 for s in seen), "counted once"
    ring.close()


def test_a_timed_out_or_cancelled_wait_takes_nothing_and_clears_its_bell(ring_name):
    ring = Ring.create(ring_name, slots=4)

    async def run(consumer: Consumer, producer: Producer) -> list[int]:
        with pytest.raises(GpuringError) as e:
            await consumer.next_async(timeout=0.05)
        assert e.value.code == "TIMEOUT"
        waiting = asyncio.ensure_future(consumer.next_async())
        await asyncio.sleep(0.05)
        assert ring.inspect()["doorbells"]["data"] == 1
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert ring.inspect()["doorbells"] == {"data": 0, "space": 0}
        producer.publish(pa.table({"i": [7]}))
        frame = await consumer.next_async(timeout=5)
        with frame:
            return frame.to_arrow().column("i").to_pylist()

    with Consumer.open(ring_name) as consumer, Producer.open(ring_name) as producer:
        assert asyncio.run(run(consumer, producer)) == [7], "the frame after the cancelled wait is the next one taken"
        producer.drain(timeout=5)
    ring.close()


def test_a_killed_async_sleeper_costs_the_others_nothing(ring_name):
    """A sleeper killed with its bit set: each publish rings past it to the live
    async consumer, and once swept the ring holds neither its entry nor its bit."""
    ring = Ring.create(ring_name, slots=8)

    async def run(consumer: Consumer, producer: Producer) -> list[int]:
        got = []
        for i in range(20):
            waiting = asyncio.ensure_future(consumer.next_async(timeout=5))
            while ring.inspect()["doorbells"]["data"] < (2 if i == 0 else 1):
                await asyncio.sleep(0.001)  # both asleep (the dead one until the first publish rang it)
            producer.publish(pa.table({"i": [i]}))
            assert ring.inspect()["doorbells"]["data"] == 0, "the publish rang past the dead sleeper to the live one"
            with await waiting as frame:
                got += frame.to_arrow().column("i").to_pylist()
        return got

    with Producer.open(ring_name) as producer:
        child = python_child("wait_async", ring_name)
        assert child.stdout.readline().strip() == "asleep"
        with Consumer.open(ring_name) as consumer:  # opening sweeps: before the kill
            dead = next(p["index"] for p in ring.inspect()["participants"] if p["pid"] == child.pid)
            assert dead < consumer.index, "a ring's scan (in index order) meets the dead sleeper first"
            child.send_signal(signal.SIGKILL)
            child.wait()
            assert asyncio.run(run(consumer, producer)) == list(range(20))
            ring.sweep()
            i = ring.inspect()
            assert i["doorbells"] == {"data": 0, "space": 0}
            assert sorted(p["index"] for p in i["participants"]) == sorted([consumer.index, producer.index])
        producer.drain(timeout=5)
    ring.close()


@pytest.mark.skipif(not node_available(), reason="the Node package is not built here (run npm install at the root)")
def test_a_node_producer_wakes_an_async_python_consumer(ring_name, tmp_path):
    Ring.create(ring_name).close()
    ipc = tmp_path / "sent.arrow"
    child = node_child("arrow-peer.ts", "publish", ring_name, "23", str(ipc))

    async def consume(consumer: Consumer) -> int:
        compared = 0
        for i in range(2):
            frame = await consumer.next_async(timeout=60)
            with frame:
                got = frame.to_arrow()
                want = pa.ipc.open_file(str(ipc)).get_batch(i)
                assert all(got.column(n).equals(want.column(n)) for n in want.schema.names)
                compared += 1
            del got
        return compared

    with Consumer.open(ring_name) as consumer:
        assert asyncio.run(consume(consumer)) == 2
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err


# A sleeper whose socket name was damaged while it slept is reachable only down
# its pipe (SPEC.md §6.1, 2.5): a datagram would reach nobody, and its sweep tick
# is pushed past its timeout. It stores its key again only when it next arms.
RUNG_WITHIN_S = 30.0
_pipe_ringers = {
    "python": lambda name: python_child("produce", name, "1"),
    "node": lambda name: node_child("arrow-peer.ts", "publish", name, "3", os.devnull),
}


@pytest.mark.parametrize("language", sorted(_pipe_ringers))
def test_an_async_sleeper_whose_socket_name_was_damaged_is_rung_down_its_pipe(ring_name, language, monkeypatch):
    if language == "node" and not node_available():
        pytest.skip("the Node package is not built here (run npm install at the root)")
    monkeypatch.setattr(slot_protocol, "SWEEP_EVERY", 4 * RUNG_WITHIN_S)
    ring = Ring.create(ring_name, slots=8)

    async def run(consumer: Consumer) -> tuple[float, subprocess.Popen]:
        waiting = asyncio.ensure_future(consumer.next_async(timeout=2 * RUNG_WITHIN_S))
        while ring.inspect()["doorbells"]["data"] == 0:
            await asyncio.sleep(0.001)
        seg = consumer._seg
        key = seg.participant(consumer.index, "doorbell_key")
        seg.mem.store64(key, seg.mem.load64(key) ^ 0x5A5A)
        damaged = time.monotonic()
        child = _pipe_ringers[language](ring_name)
        with await waiting as frame:
            assert frame.to_arrow().num_rows >= 1
        return time.monotonic() - damaged, child

    with Consumer.open(ring_name) as consumer:
        took, child = asyncio.run(run(consumer))
        assert took < RUNG_WITHIN_S, "a ring woke it, not its timeout (which finds the frame too)"
        if language == "node":
            asyncio.run(_take_rest(consumer, 1))
        _out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
    ring.close()


async def _take_rest(consumer: Consumer, count: int) -> None:
    for _ in range(count):
        (await consumer.next_async(timeout=60)).release()
