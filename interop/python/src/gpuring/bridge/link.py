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


class LinkLost(Exception):
    """The connection failed; nothing about the frames is known beyond the acks received."""


def ucxx() -> Any:
    # UCXX sets a variable UCX then warns about on every start; keep the CLI's output clean.
    os.environ.setdefault("UCX_WARN_UNUSED_ENV_VARS", "n")
    # A restarted listener takes its port back at once, not after the old connections' TIME_WAIT.
    os.environ.setdefault("UCX_CM_REUSEADDR", "y")
    # UCX progressed on the event loop, woken by the worker's file descriptor: 2.5x the frames/s of
    # UCXX's default progress thread on a 2-core machine. Its cost: while linked, UCXX has the loop poll each
    # pending request (asyncio.sleep(0) in turn), so a linked bridge keeps one core busy even when idle.
    # UCXPY_PROGRESS_MODE=thread with UCXPY_ENABLE_PYTHON_FUTURE=1 idles at ~2% of a core, at a third of the
    # frames/s; it is not yet tested here (SPEC.md §14.5).
    os.environ.setdefault("UCXPY_PROGRESS_MODE", "blocking")
    # UCX learns which addresses are device memory by hooking allocations; gpuring maps device buffers
    # (cuIpcOpenMemHandle) and allocates them (cuMemAlloc) through its own handle on libcuda, which the
    # hooks do not see. Without the cache UCX asks the driver about each buffer it sends or receives.
    os.environ.setdefault("UCX_MEMTYPE_CACHE", "n")
    try:
        import ucxx as module
    except ImportError as e:
        raise GpuringError("UCX_UNAVAILABLE", f"gpuring bridge needs UCXX, which did not import ({e}). Fix: "
                           "pip install 'gpuring[remote]' (UCXX for CUDA 12; for CUDA 13, pip install ucxx-cu13)") from None
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
    protocol always knows it (SPEC.md §14.1)."""

    def __init__(self, endpoint: Any, peer: str) -> None:
        self._ep = endpoint
        self.peer = peer
        self._errors = _transport_errors()

    async def send(self, data: Any, tag: int) -> None:
        try:
            await self._ep.send(data, tag=_ucxx_tag(tag))
        except self._errors as e:
            raise LinkLost(f"sending to {self.peer}: {e}") from None

    def post(self, data: Any, tag: int) -> asyncio.Future[None]:
        """Sends without waiting: the message is handed to UCX in the order of
        ``post`` calls, before the loop next waits. ``data`` must live until done."""
        return asyncio.ensure_future(self.send(data, tag))


    async def recv_into(self, buffer: Any, tag: int) -> None:
        try:
            await self._ep.recv(buffer, tag=_ucxx_tag(tag))
        except self._errors as e:
            raise LinkLost(f"receiving from {self.peer}: {e}") from None

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
