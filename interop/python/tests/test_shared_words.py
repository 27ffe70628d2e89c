"""Word access to a mapping: loads see what the atomics stored at every aligned
offset up to the last whole word, whichever way the platform loads, and any
offset outside the mapping or misaligned raises FRAME_BOUNDS instead of reading."""
from __future__ import annotations

import os

import pytest

from gpuring.errors import GpuringError
from gpuring.shared_memory import SharedMemory


@pytest.fixture(params=[4096, 4093])  # a whole page, and a size no word divides (a truncated object)
def mapping(request, tmp_path):
    path = f"/dev/shm/gpuring-test-words-{os.getpid()}-{request.param}"
    fd = os.open(path, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, request.param)
        mem = SharedMemory(fd, request.param)
    finally:
        os.close(fd)
        os.unlink(path)
    yield mem
    mem.close()


def test_loads_see_stores_and_read_modify_writes_at_every_whole_word(mapping):
    last64, last32 = (mapping.size - 8) & ~7, (mapping.size - 4) & ~3
    for at in (0, 8, 2048, last64):
        value = 0xF00D_0000_0000_0000 | at
        mapping.store64(at, value)
        assert mapping.load64(at) == value
        assert mapping.cas64(at, value, value + 1)
        assert mapping.load64(at) == value + 1
    for at in (4, 1028, last32):
        mapping.store32(at, 0xFFFF_FFF0)
        assert mapping.add32(at, 0x20) == 0xFFFF_FFF0
        assert mapping.load32(at) == 0x10  # wrapped at 32 bits
    assert mapping.load32(0) == (0xF00D_0000_0000_0001 & 0xFFFF_FFFF)  # little-endian halves of word 0
    assert mapping.load32(4) == 0x10


@pytest.mark.parametrize("load, width", [("load64", 8), ("load32", 4)])
def test_loads_outside_the_mapping_or_misaligned_raise(mapping, load, width):
    for at in (-width, mapping.size - mapping.size % width, mapping.size, 1 << 40, width // 2 + width):
        with pytest.raises(GpuringError) as e:
            getattr(mapping, load)(at)
        assert e.value.code == "FRAME_BOUNDS"
