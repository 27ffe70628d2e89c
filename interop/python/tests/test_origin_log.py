"""The sink's origin log (bridge/origin_log.py): what it remembers across a
restart, and when it starts afresh. The killed-sink bridge tests show it at work."""
import os
import struct

from gpuring import Ring
from gpuring.bridge.origin_log import OriginLog, log_path

SINK, OTHER_SINK, SOURCE = b"s" * 16, b"t" * 16, b"o" * 16


def test_a_reopened_log_remembers_the_lasting_origins_only(ring_name):
    log = OriginLog(ring_name, SINK, SOURCE, 8)
    log.published((1, 2, 3), lasting=True)
    log.published((1, 2, 4), lasting=False)  # in device memory: dies with the sink
    assert (1, 2, 4) in log
    log.close()
    again = OriginLog(ring_name, SINK, SOURCE, 8)
    assert (1, 2, 3) in again and (1, 2, 4) not in again
    again.close()


def test_it_keeps_the_newest_capacity_origins(ring_name):
    log = OriginLog(ring_name, SINK, SOURCE, 4)
    for frame in range(1, 11):
        log.published((0, 1, frame), lasting=True)
    log.close()
    again = OriginLog(ring_name, SINK, SOURCE, 4)
    assert [f for f in range(1, 11) if (0, 1, f) in again] == [7, 8, 9, 10]
    again.close()


def test_a_ring_made_again_under_the_name_starts_afresh(ring_name):
    log = OriginLog(ring_name, SINK, SOURCE, 8)
    log.published((1, 1, 1), lasting=True)
    log.close()
    other = OriginLog(ring_name, OTHER_SINK, SOURCE, 8)  # the same name, another ring: nothing was published there
    assert (1, 1, 1) not in other
    other.close()


def test_a_damaged_or_foreign_file_is_replaced(ring_name):
    path = log_path(ring_name, SOURCE)
    ours = bytearray(64 + 8 * 16)
    struct.pack_into("<QII16s16sQ", ours, 0, 0x4E4749524F525047, 1, 8, SINK, SOURCE, 2**64 - 1)  # ours, but a count no sink reaches
    for content in (b"", b"x" * 100, os.urandom(64 + 8 * 16), bytes(ours)):
        with open(path, "wb") as f:
            f.write(content)
        log = OriginLog(ring_name, SINK, SOURCE, 8)
        assert not any((p, g, f) in log for p in range(4) for g in range(4) for f in range(4))
        log.published((1, 1, 1), lasting=True)
        log.close()
        assert os.path.getsize(path) == 64 + 8 * 16


def test_ring_unlink_removes_the_origin_logs(ring_name):
    Ring.create(ring_name).close()
    OriginLog(ring_name, SINK, SOURCE, 8).close()
    assert os.path.exists(log_path(ring_name, SOURCE))
    Ring.unlink(ring_name)
    assert not os.path.exists(log_path(ring_name, SOURCE))
