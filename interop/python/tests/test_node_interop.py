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
