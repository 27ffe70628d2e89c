"""UCX progress woken by the worker's event file descriptor, and the requests
a bridge waits for settled in one place.

UCXX's blocking progress mode registers the worker's epoll descriptor with the
event loop but never arms the worker again after an event, so the descriptor
stays readable and the loop calls it on every turn; and each awaited request
polls its own completion with ``asyncio.sleep(0)``. Together they keep a linked
bridge at 100% of a core even with no frame moving, and every frame waits its
turn among those polls. Here the worker is progressed until ``arm()`` succeeds
(UCX's documented way to sleep on the descriptor), and after each progress the
pending requests that completed settle their futures: the loop sleeps in epoll
while nothing happens.
"""
from __future__ import annotations

import asyncio
from typing import Any, Callable

SAFETY_S = 0.002  # pending requests are looked at this often even without an event
MOST_ROUNDS = 64  # progress rounds before letting the loop run other work


class EventProgress:
    """One per event loop (``of``), installed over UCXX's blocking mode."""

    _by_loop: dict[asyncio.AbstractEventLoop, "EventProgress"] = {}

    @classmethod
    def of(cls, worker: Any) -> "EventProgress":
        loop = asyncio.get_running_loop()
        if loop not in cls._by_loop:
            cls._by_loop[loop] = cls(worker, loop)
        return cls._by_loop[loop]

    def __init__(self, worker: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._worker, self._loop = worker, loop
        # id(request) -> (request, its future, error_of, the buffer it reads or fills: alive until done)
        self._pending: dict[int, tuple[Any, asyncio.Future[None], Callable[[Exception], Exception], Any]] = {}
        self._timer: asyncio.TimerHandle | None = None
        fd = worker.epoll_file_descriptor
        loop.remove_reader(fd)  # UCXX's reader, which spins (see above)
        loop.add_reader(fd, self.progress)

    def progress(self) -> None:
        """Progresses UCX until it agrees to sleep, settling completed requests."""
        for _ in range(MOST_ROUNDS):
            self._worker.progress()
            self._settle()
            if self._worker.arm():
                return
        self._loop.call_soon(self.progress)  # still busy: again after the loop's other work

    def _settle(self) -> None:
        done = [key for key, (request, _, _, _) in self._pending.items() if request.completed]
        for key in done:
            request, future, error_of, _ = self._pending.pop(key)
            if future.done():
                continue
            try:
                request.check_error()
            except Exception as e:
                future.set_exception(error_of(e))
                continue
            future.set_result(None)

    def wait(self, request: Any, buffer: Any, error_of: Callable[[Exception], Exception]) -> asyncio.Future[None]:
        """A future that settles when ``request`` completes; a UCX error ``e``
        becomes ``error_of(e)``. ``buffer`` is held until then."""
        future = self._loop.create_future()
        self._pending[id(request)] = (request, future, error_of, buffer)
        self.progress()  # a request just submitted may complete at once
        if self._timer is None and self._pending:
            self._timer = self._loop.call_later(SAFETY_S, self._tick)
        return future

    def _tick(self) -> None:
        """The safety net: a completion UCX signals with no event on the descriptor."""
        self._timer = None
        self.progress()
        if self._pending:
            self._timer = self._loop.call_later(SAFETY_S, self._tick)
