"""The golden fixtures (fixtures/), checked by the Python codec exactly as the
TypeScript and C suites check them."""
import json

import pytest

from conftest import FIXTURES
from gpuring import BufferDescriptor, GpuringError, decode_frame, encode_frame, from_json, to_json
from gpuring.codec import with_buffers

FRAMES = sorted(p.stem for p in (FIXTURES / "frames").glob("*.bin"))
CORRUPT = json.loads((FIXTURES / "corrupt" / "index.json").read_text())


def test_there_is_something_to_check():
    assert len(FRAMES) >= 10 and len(CORRUPT) >= 30


@pytest.mark.parametrize("name", FRAMES)
def test_golden_frame(name):
    golden = (FIXTURES / "frames" / f"{name}.bin").read_bytes()
    description = json.loads((FIXTURES / "frames" / f"{name}.json").read_text())
    assert encode_frame(from_json(description)) == golden
    assert to_json(decode_frame(golden)) == description


@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_corrupted_variant_rejected_with_the_same_code(name):
    data = (FIXTURES / "corrupt" / f"{name}.bin").read_bytes()
    with pytest.raises(GpuringError) as e:
        decode_frame(data)
    assert e.value.code == CORRUPT[name]["code"], CORRUPT[name]["what"]


@pytest.mark.parametrize("name", FRAMES)
def test_a_body_pointed_at_other_memory_is_its_descriptions_encoding(name):
    """codec.with_buffers, as a bridge sink uses it: the golden body with every
    buffer moved into a host arena and the sync event cleared is what
    encode_frame gives for the description changed alike."""
    golden = (FIXTURES / "frames" / f"{name}.bin").read_bytes()
    assert with_buffers(golden, decode_frame(golden)) == golden
    moved = decode_frame(golden)
    for i, b in enumerate(moved.buffers()):
        if b.kind != "absent":
            host = BufferDescriptor.host("/gpuring.far.p1g2.a3", 64 * i, b.length)
            b.kind, b.device_ordinal, b.device_uuid = host.kind, host.device_ordinal, host.device_uuid
            b.offset, b.allocation_id, b.handle, b.pool_id = host.offset, 0, host.handle, 0
    moved.sync_kind, moved.sync_handle = 0, bytes(64)
    assert with_buffers(golden, moved) == encode_frame(moved)
