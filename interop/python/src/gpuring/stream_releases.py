"""Leases that end when a CUDA stream gets to the point where release was
asked for (SPEC.md 9a, Lifetime): a consumer queues work that reads a frame's
device columns on its stream and releases at once; the producer must not reuse
that memory before the work is done.

An event is recorded on the stream at release and a daemon thread ends each
lease once its event completes. (The Node consumer has the driver run the
release with cuLaunchHostFunc; a Python callback on the driver's thread would
need the GIL, which a thread blocked in a CUDA call may hold.)
"""
from __future__ import annotations

import ctypes
import threading
import time

from . import cuda_driver as cu

_POLL_S = 0.0002


class StreamReleases:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._pending: list[tuple[int, ctypes.c_void_p, object]] = []  # (device ordinal, event, lease)
        self._thread: threading.Thread | None = None

    def add(self, ordinal: int, stream: int, lease: object) -> None:
        """Holds ``lease`` until ``stream`` (on device ``ordinal``) completes the
        work queued so far. Raises, holding nothing, if the event cannot be recorded."""
        with cu.primary_context(ordinal):
            event = cu.record_event(stream)
        with self._cv:
            self._pending.append((ordinal, event, lease))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="gpuring-stream-releases", daemon=True)
                self._thread.start()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._pending)
                pending = list(self._pending)
            finished = {id(p) for p in pending if self._complete(p)}
            del pending
            with self._cv:
                ended = [p for p in self._pending if id(p) in finished]
                self._pending = [p for p in self._pending if id(p) not in finished]
            ended.clear()  # the last references to those leases: they end here
            with self._cv:
                self._cv.notify_all()
            time.sleep(_POLL_S)

    @staticmethod
    def _complete(p: tuple[int, ctypes.c_void_p, object]) -> bool:
        ordinal, event, _ = p
        with cu.primary_context(ordinal):
            if not cu.event_complete(event):
                return False
            cu.destroy_event(event)
        return True

    def wait_all(self) -> None:
        """Until every lease held here has ended (before the consumer detaches)."""
        with self._cv:
            self._cv.wait_for(lambda: not self._pending)
