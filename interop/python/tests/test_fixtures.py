"""The golden fixtures (fixtures/), checked by the Python codec exactly as the
TypeScript and C suites check them."""
import json

import pytest

from conftest import FIXTURES
from gpuring import GpuringError, decode_frame, encode_frame, from_json, to_json

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
