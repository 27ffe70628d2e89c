"""One bridge connection over UCX (UCXX's asyncio API), and where UCX comes from.

UCXX is optional (``pip install 'gpuring[remote]'``): it is imported only here,
and its absence is UCX_UNAVAILABLE with the fix. Any failure of the transport
(peer gone, connection reset, closed) is LinkLost, which a bridge answers by
reconnecting; protocol and refusal errors stay GpuringError.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, Awaitable, Callable

from ..errors import GpuringError
from .ucx_progress import EventProgress


class LinkLost(Exception):
    """The connection failed; nothing about the frames is known beyond the acks received."""


def ucxx() -> Any:
    # UCXX sets a variable UCX then warns about on every start; keep the CLI's output clean.
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    # A restarted listener takes its port back at once, not after the old connections' TIME_WAIT.
    os.environ.setdefault("UCX_CM_REUSEADDR", "y")
    # UCX progressed on the event loop, woken by the worker's file descriptor (EventProgress builds on
    # UCXX's blocking mode): 2.5x the frames/s of UCXX's default progress thread on a 2-core machine.
    os.environ["UCXPY_PROGRESS_MODE"] = "blocking"
    try:
        import ucxx as module
    except ImportError as e:
        raise GpuringError("UCX_UNAVAILABLE", f"gpuring bridge needs UCXX, which did not import ({e}). Fix: "
                           "pip install 'gpuring[remote]' (UCXX for CUDA 12; for CUDA 13, 'gpuring[remote-cu13]')") from None
    return module


def _transport_errors() -> tuple[type[BaseException], ...]:
    from ucxx.exceptions import UCXError
    return (UCXError, ConnectionError, OSError)


def _ucxx_tag(tag: int) -> tuple[int, int]:
    """UCXX hashes a tag with the endpoint's own (one tag namespace per
    connection) after Python's hash(), which folds integers modulo 2^61 - 1:
    0xE0 << 56 and a body tag would meet. Two 32-bit halves do not fold."""
    return tag >> 32, tag & 0xFFFFFFFF


class Link:
    """Tagged messages to and from one peer. Each receive names its size: the
    protocol always knows it (SPEC.md §14.1). Requests go to UCXX's endpoint
    directly and are waited for by ``EventProgress`` (ucx_progress.py says why)."""

    def __init__(self, endpoint: Any, peer: str) -> None:
        from ucxx._lib.arr import Array
        from ucxx._lib_async.utils import hash64bits
        from ucxx.core import _get_ctx
        from ucxx.types import Tag
        self._ep, self.peer = endpoint, peer
        self._errors = _transport_errors()
        self._array, self._progress = Array, EventProgress.of(_get_ctx().worker)
        # Tags within the connection's namespace, hashed as UCXX's Endpoint.send and recv do.
        self._tag: Callable[[int, str], Any] = lambda t, way: Tag(hash64bits(endpoint._tags[way], hash(_ucxx_tag(t))))

    def _submit(self, submit: Callable[[Any, Any], Any], data: Any, tag: Any, what: str) -> asyncio.Future[None]:
        def lost(e: BaseException) -> Exception:
            return LinkLost(f"{what} {self.peer}: {e}")
        buffer = self._array(data)
        try:
            self._ep._ep.raise_on_error()
            request = submit(buffer, tag)
        except self._errors as e:
            future = asyncio.get_running_loop().create_future()
            future.set_exception(lost(e))
            return future
        return self._progress.wait(request, (buffer, data), lost)

    def post(self, data: Any, tag: int) -> asyncio.Future[None]:
        """Sends without waiting: messages are handed to UCX in the order of
        ``post`` calls; ``data`` is held until the future is done."""
        return self._submit(self._ep._ep.tag_send, data, self._tag(tag, "msg_send"), "sending to")

    async def send(self, data: Any, tag: int) -> None:
        await self.post(data, tag)

    def recv_into(self, buffer: Any, tag: int) -> asyncio.Future[None]:
        return self._submit(self._ep._ep.tag_recv, buffer, self._tag(tag, "msg_recv"), "receiving from")

    async def recv(self, nbytes: int, tag: int) -> bytes:
        buf = bytearray(nbytes)
        await self.recv_into(buf, tag)
        return bytes(buf)

    async def close(self) -> None:
        try:
            await self._ep.close()
        except Exception:
            pass  # closing a link that already failed


async def connect(host: str, port: int, timeout: float = 5.0) -> Link:
    ux = ucxx()
    try:
        ep = await ux.create_endpoint(host, port, connect_timeout=timeout)
    except _transport_errors() as e:
        raise LinkLost(f"connecting to {host}:{port}: {e}") from None
    return Link(ep, f"{host}:{port}")


def listen(port: int, on_link: Callable[[Link], Awaitable[None]]) -> Any:
    """Listens on ``port`` (every interface); each connection runs ``on_link``."""
    ux = ucxx()

    async def accepted(ep: Any) -> None:
        await on_link(Link(ep, "peer"))

    try:
        return ux.create_listener(accepted, port=port)
    except _transport_errors() as e:
        raise GpuringError("SYSTEM", f"cannot listen on port {port}: {e}") from None


async def sleep_between_tries(attempt: int) -> None:
    """Backs off 0.1 s, doubling to 2 s, between reconnection attempts."""
    await asyncio.sleep(min(0.1 * 2 ** attempt, 2.0))
