"""The cache of other processes' interprocess events a consumer keeps open
(cuda_driver._opened_event), around a driver whose open and destroy only
record what they were asked: which events the cache opens, keeps, and gives
up. The GPU suite reads real frames through it (test_gpu.py)."""

import pytest

from gpuring import cuda_driver as cu


@pytest.fixture
def driver(monkeypatch):
    """(handles opened, events destroyed); each opened event is numbered from 1."""
    opened, destroyed = [], []

    def call(name, out, handle):
        assert name == "cuIpcOpenEventHandle"
        opened.append(bytes(handle.reserved))
        out._obj.value = len(opened)

    class Driver:
        def cuEventDestroy_v2(self, event):
            destroyed.append(event.value)

    monkeypatch.setattr(cu, "call", call)
    monkeypatch.setattr(cu, "driver", Driver)
    monkeypatch.setattr(cu, "_opened_events", {})
    return opened, destroyed


def _handle(i: int) -> bytes:
    return i.to_bytes(4, "little") * 16


def test_a_producers_event_is_opened_once_and_a_later_or_another_rings_producer_with_the_same_handle_gets_its_own(driver):
    opened, destroyed = driver
    first = cu._opened_event(_handle(1), 0, ("a", 3, 7))
    assert cu._opened_event(_handle(1), 0, ("a", 3, 7)) is first
    assert len(opened) == 1, "a pooled event coming round again is not opened again"
    again = cu._opened_event(_handle(1), 0, ("a", 3, 8))  # the same bytes from the entry's next producer
    assert again.value != first.value and len(opened) == 2
    elsewhere = cu._opened_event(_handle(1), 0, ("b", 3, 7))  # the same bytes from another ring's entry 3, generation 7
    assert elsewhere.value not in (first.value, again.value) and len(opened) == 3
    assert cu._opened_event(_handle(1), 1, ("a", 3, 7)).value == 4, "each device keeps its own"
    assert destroyed == []


def test_past_the_bound_the_least_recently_used_event_is_destroyed(driver):
    opened, destroyed = driver
    for i in range(cu._OPENED_EVENTS_MAX):
        cu._opened_event(_handle(i), 0, ("a", 0, 1))
    cu._opened_event(_handle(0), 0, ("a", 0, 1))  # used again: now the most recent
    for i in range(cu._OPENED_EVENTS_MAX, cu._OPENED_EVENTS_MAX + 3):
        cu._opened_event(_handle(i), 0, ("a", 0, 1))
    assert len(cu._opened_events[0]) == cu._OPENED_EVENTS_MAX
    assert destroyed == [2, 3, 4], "handles 1, 2 and 3 were the least recently used (0 was used again)"
    assert cu._opened_event(_handle(0), 0, ("a", 0, 1)).value == 1
    assert len(opened) == cu._OPENED_EVENTS_MAX + 3
