"""Keeping a bridge linked: a connecting end reconnects after a failed link
(backing off), a listening end takes the next peer. A refusal or protocol
error ends a connecting bridge (trying again cannot help); a listening one
reports it and goes on listening for other peers."""
from __future__ import annotations

import asyncio
from typing import Protocol

from ..errors import GpuringError
from .link import Link, LinkLost, connect, listen, sleep_between_tries
from .stats import BridgeStats


class Bridge(Protocol):
    stats: BridgeStats

    async def serve(self, link: Link) -> None: ...


async def keep_connected(bridge: Bridge, host: str, port: int, stopped: asyncio.Event) -> None:
    attempt = 0
    while not stopped.is_set():
        try:
            link = await connect(host, port)
        except LinkLost as e:
            bridge.stats.event("cannot connect; trying again", error=str(e))
            await sleep_between_tries(attempt)
            attempt += 1
            continue
        attempt = 0
        try:
            await _serve_until(bridge, link, stopped)
            return  # the link ended as agreed (END)
        except LinkLost as e:
            bridge.stats.event("link failed; reconnecting", error=str(e))
        finally:
            await link.close()


async def keep_listening(bridge: Bridge, port: int, stopped: asyncio.Event, one_at_a_time: bool) -> None:
    turn = asyncio.Lock()

    async def on_link(link: Link) -> None:
        async with turn if one_at_a_time else _no_lock():
            try:
                await _serve_until(bridge, link, stopped)
            except (LinkLost, GpuringError) as e:
                bridge.stats.event("link ended with an error", error=str(e))
            finally:
                await link.close()

    listener = listen(port, on_link)
    bridge.stats.event("listening", port=listener.port)
    try:
        await stopped.wait()
    finally:
        listener.close()


async def _serve_until(bridge: Bridge, link: Link, stopped: asyncio.Event) -> None:
    serving = asyncio.ensure_future(bridge.serve(link))
    stopping = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done():
            serving.result()
        else:
            serving.cancel()
    finally:
        stopping.cancel()


class _no_lock:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


async def report_every(bridge: Bridge, seconds: float, stopped: asyncio.Event) -> None:
    while not stopped.is_set():
        try:
            await asyncio.wait_for(stopped.wait(), seconds)
        except asyncio.TimeoutError:
            bridge.stats.progress()

