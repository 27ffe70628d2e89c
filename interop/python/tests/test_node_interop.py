"""Python and Node on one ring, with pyarrow as referee: each side writes what
it publishes as an Arrow IPC file too, and the receiver compares what came
through the ring with its own IPC reader's result, for every type."""
import json

import pyarrow as pa
import pyarrow.ipc
import pytest

from all_types import all_types_table
from conftest import node_available, node_child
from gpuring import Consumer, Producer, Ring

pytestmark = pytest.mark.skipif(not node_available(), reason="the Node package is not built here (run npm install at the root)")


def test_node_to_python_every_type_equals_pyarrow(ring_name, tmp_path):
    Ring.create(ring_name).close()
    ipc = tmp_path / "sent.arrow"
    child = node_child("arrow-peer.ts", "publish", ring_name, "23", str(ipc))
    compared = 0
    with Consumer.open(ring_name) as consumer:
        for i in range(2):
            with consumer.next(timeout=60) as frame:
                got = frame.to_arrow()
                want = pa.ipc.open_file(str(ipc)).get_batch(i)  # written before the first publish
                assert got.schema.names == want.schema.names
                for name in want.schema.names:
                    assert got.column(name).equals(want.column(name)), name
                assert got.schema.field("int32").metadata == {b"unit": b"widgets"}
                compared += 1
            del got  # the lease lasts while arrays from the frame live; the producer drains after this
        out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert compared == 2


def test_python_to_node_every_type_equals_pyarrow(ring_name, tmp_path):
    Ring.create(ring_name).close()
    table = all_types_table(23)
    batches = [table.combine_chunks().to_batches()[0], table.slice(3, 18).combine_chunks().to_batches()[0]]
    ipc = tmp_path / "sent.arrow"
    with pa.ipc.new_file(str(ipc), table.schema) as w:
        for b in batches:
            w.write_batch(b)
    child = node_child("arrow-peer.ts", "compare", ring_name, str(ipc), "2")
    with Producer.open(ring_name) as producer:
        for b in batches:
            producer.publish(b, timeout=30)
        producer.drain(timeout=60)
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report == {"frames": 2, "differences": [None, None]}


def test_heads_up_reaches_a_sleeping_node_consumer_and_every_frame_arrives(ring_name):
    """Producer.heads_up() as each frame's making starts, the frame published at once
    (the publish passes the heads-up on) or 30 ms later (the consumer woke, found
    nothing and slept again: the publish rings it again). The Node consumer's sweep
    tick is ten minutes, so only rings can wake it: a lost one fails with TIMEOUT."""
    import time

    ring = Ring.create(ring_name)
    frames = 6
    with Producer.open(ring_name) as producer:
        assert producer.heads_up() is False  # nobody asleep: nobody reached
        child = node_child("child.ts", "take-values", ring_name, str(frames), "600000")
        reached = []
        for i in range(frames):
            deadline = time.monotonic() + 60
            while ring.inspect()["doorbells"]["data"] == 0:
                assert time.monotonic() < deadline, "the Node consumer never slept"
                time.sleep(0.001)
            reached.append(producer.heads_up())
            if i % 2:
                time.sleep(0.03)
            producer.publish(pa.table({"i": pa.array([i], pa.int32())}), timeout=30)
        producer.drain(timeout=60)
    out, err = child.communicate(timeout=60)
    ring.close()
    assert child.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1]) == {"values": list(range(frames))}
    assert reached == [True] * frames


def test_a_stale_heads_up_is_not_passed_on_to_a_consumer_now_busy(ring_name):
    """Producer P's heads-up reaches consumer A; A then takes producer Q's frame and
    holds it, no longer looking; consumer B goes to sleep. P publishes long after its
    heads-up: passed on, it would ring only A (awake, so nobody) and B would sleep on
    with P's frame in the ring. It rings afresh instead, and B gets it. B's sweep tick
    is ten minutes, so only a ring can wake it."""
    import time

    def wait_asleep(count: int) -> None:
        deadline = time.monotonic() + 60
        while ring.inspect()["doorbells"]["data"] != count:
            assert time.monotonic() < deadline, f"never {count} asleep"
            time.sleep(0.001)

    ring = Ring.create(ring_name)
    one = lambda v: pa.table({"i": pa.array([v], pa.int32())})  # noqa: E731
    with Producer.open(ring_name) as p, Producer.open(ring_name) as q:
        a = node_child("child.ts", "hold", ring_name, "1")
        wait_asleep(1)
        assert p.heads_up() is True
        time.sleep(0.01)
        wait_asleep(1)  # A woke, found nothing, and sleeps again
        q.publish(one(100), timeout=30)
        assert json.loads(a.stdout.readline())["tags"] == ["0"]  # A holds Q's frame
        b = node_child("child.ts", "take-values", ring_name, "1", "600000")
        wait_asleep(1)  # B alone
        p.publish(one(7), timeout=30)
        try:
            out, err = b.communicate(timeout=30)
        finally:
            a.kill()
            a.wait()
        assert b.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == {"values": [7]}
    ring.close()
