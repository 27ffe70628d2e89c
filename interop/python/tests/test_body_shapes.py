"""A consumer's kept body shapes (body_shapes.py): frames of a kept shape read
back exactly, and a damaged body gets decode_frame's verdict whether or not its
shape was kept."""
import json
import random

import pytest

from all_types import all_types_table
from conftest import FIXTURES, publish_and_read_back
from gpuring import Consumer, GpuringError, Producer, Ring, decode_frame, encode_frame
from gpuring.body_shapes import BodyShapes, shape_key

FRAMES = sorted(p.stem for p in (FIXTURES / "frames").glob("*.bin"))
CORRUPT = json.loads((FIXTURES / "corrupt" / "index.json").read_text())


def verdict(decode, body: bytes) -> tuple[str, bytes]:
    try:
        return "OK", encode_frame(decode(body))
    except GpuringError as e:
        return e.code, b""


def test_every_type_reads_back_from_a_kept_shape(ring_name):
    Ring.create(ring_name).close()
    table = all_types_table(23).combine_chunks()
    sent = [table, table.slice(3, 18), table.slice(0, 0), table.slice(7, 9), table.slice(0, 0), table]
    shapes = []
    with Producer.open(ring_name) as producer, Consumer.open(ring_name) as consumer:
        for batch in sent:
            shapes.append(publish_and_read_back(producer, consumer, batch)._shape)
        producer.drain(timeout=10)
    # Rows or none change the shape (absent buffers); the slices share the whole table's.
    assert shapes[1] is shapes[0] and shapes[3] is shapes[0] and shapes[5] is shapes[0]
    assert shapes[4] is shapes[2] and shapes[2] is not shapes[0]


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_a_corrupted_body_of_a_kept_shape_gets_the_same_code(name):
    shapes = BodyShapes()
    shapes.decode((FIXTURES / "frames" / f"{CORRUPT[name]['from']}.bin").read_bytes())
    with pytest.raises(GpuringError) as e:
        shapes.decode((FIXTURES / "corrupt" / f"{name}.bin").read_bytes())
    assert e.value.code == CORRUPT[name]["code"], CORRUPT[name]["what"]


def test_mutated_bodies_get_decode_frames_verdicts():
    """Mutants of every golden body through one cache, which keeps each shape
    it has seen valid: most mutants touch only numbers, so they take the kept
    shape's checks, and any verdict or re-encoding that differs fails."""
    rng = random.Random(20261125)
    shapes = BodyShapes()
    fast = 0
    for name in FRAMES:
        golden = (FIXTURES / "frames" / f"{name}.bin").read_bytes()
        shapes.decode(golden)
        for _ in range(400):
            body = bytearray(golden)
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(len(body))
                body[at] = rng.choice((0, 0xFF, rng.randrange(256), body[at] ^ (1 << rng.randrange(8))))
            fast += shape_key(bytes(body)) in shapes._shapes
            assert verdict(lambda b: shapes.decode(b)[0], bytes(body)) == verdict(decode_frame, bytes(body)), name
    assert fast > len(FRAMES) * 100  # the kept shapes' path did run
