"""A producer's bodies from templates (host_templates.py): each batch of a kept
schema gets the body encode_frame gives for its own description, and reads back
equal, across changes of rows, slices, nulls and dictionaries."""
import dataclasses

import pyarrow as pa

from all_types import all_types_table
from conftest import publish_and_read_back
from gpuring import Consumer, Producer, Ring, decode_frame, encode_frame
from gpuring.host_columns import describe_host


def _placeless(body: bytes):
    """The description of ``body`` without where its buffers lie (which allocation, where in it)."""
    d = decode_frame(body)
    for b in d.buffers():
        b.offset, b.handle = 0, bytes(64)
    return dataclasses.asdict(d)


def batches():
    table = all_types_table(23).combine_chunks()
    no_nulls = pa.table({"x": pa.array(range(9), pa.int64()), "s": pa.array([str(i) for i in range(9)])})
    with_nulls = pa.table({"x": pa.array([None, 1, 2], pa.int64()), "s": pa.array(["a", None, "c"])})
    tagged = no_nulls.replace_schema_metadata({"k": "v"})
    return [table, table.slice(3, 18), table.slice(0, 0), table.slice(22, 1), table,
            no_nulls, with_nulls, no_nulls.slice(2, 5), tagged, with_nulls, tagged.slice(1, 1)]


def test_every_batch_of_a_kept_schema_gets_its_own_body_and_reads_back(ring_name):
    Ring.create(ring_name).close()
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for batch in batches():
            body, copied = producer._templates.body(batch, producer._pool.alloc)
            description, plain = describe_host(batch, producer._pool, producer._pool.alloc)
            assert _placeless(body) == _placeless(encode_frame(description))
            producer._pool.free(copied)
            producer._pool.free(plain)
            publish_and_read_back(producer, consumer, batch)
        producer.drain(timeout=10)
        # one template per schema and buffer pattern, not one per batch
        assert sum(len(patterns) for _, patterns in producer._templates._schemas) < len(batches())
