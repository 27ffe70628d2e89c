"""The receiving end of a bridge: publishes the frames a source sends into a
local ring, host buffers received straight into this producer's arenas.

A frame is acknowledged (``free_data``) once published here, or, when the source
asked for ``released``, once the local consumers released it. A frame whose
origin (source ring, producer, generation, frame id) this sink already
published is acknowledged and dropped: the source sends held frames again after
a link or a source bridge fails (SPEC.md §14.4). Backpressure: while the local
ring is full nothing is published or acknowledged, so the source stops at its
window and its ring fills in turn; nothing is dropped.
"""
from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from typing import Callable

from .. import layout as L
from ..codec import decode_frame
from ..description import FrameDescription
from ..errors import GpuringError
from ..producer import Producer
from . import wire as W
from .handshake import handshake
from .landing import Landing, Landings, align
from .link import Link, LinkLost
from .stats import BridgeStats
from .stream_id import stream_id
from .templates import SinkTemplates

REMEMBERED_ORIGINS = 1 << 16  # per source stream; far more than a source ever holds unacknowledged
FULL_RING_BACKOFF_S = (0.00005, 0.005)  # first and longest pause between publish attempts on a full ring
INLINE_BYTES = 64 << 10  # the largest inline frame message taken (HELLO inline_bytes)
REAP_EVERY_S = 0.001  # "released" acks: how often frames are looked at for their release


class BridgeSink:
    """Publishes into ring ``ring`` what linked sources send. ``window``: frames
    a source may have in flight; ``max_frame_bytes``: the largest frame taken;
    ``device``: the CUDA device (ordinal) device buffers land on, or None to
    land them in host memory (the frames arrive as host frames then)."""

    def __init__(self, ring: str, secret: bytes, *, window: int = 64, max_frame_bytes: int = 1 << 30,
                 device: int | None = None, stats: BridgeStats | None = None) -> None:
        self.ring, self._secret, self.device = ring, secret, device
        self.window, self.max_frame_bytes = window, max_frame_bytes
        self.stats = stats or BridgeStats(ring, "sink")
        self._producer = Producer.open(ring, extra_roles=L.ROLE_BRIDGE)
        self._landings = Landings(self._producer, device)
        self._stream = stream_id(self._producer._seg)
        self._seen: dict[bytes, OrderedDict[tuple[int, int, int], None]] = {}
        self._reaping = False  # a task looks for released frames ("released" acks)

    def _hello(self) -> W.Hello:
        flags = W.FLAG_TEMPLATES | W.FLAG_BATCH | (W.FLAG_DEVICE if self.device is not None else 0)
        return W.Hello(W.ROLE_SINK, 0, flags, os.urandom(32), self._stream, self.window, self.max_frame_bytes, self.ring,
                       INLINE_BYTES)

    async def serve(self, link: Link) -> None:
        """One link's life: handshake, then frames until END. Raises LinkLost
        when the link fails, GpuringError on a protocol error or a refused frame."""
        peer = await handshake(link, self._hello(), self._secret)
        self.stats.linked(link.peer, peer.ring)
        seen = self._seen.setdefault(peer.stream_id, OrderedDict())
        acks, meta, templates = _Acks(link), _MetaStream(link), SinkTemplates()
        try:
            while await self._one_frame(link, meta, templates, peer, seen, acks):
                pass
            await acks.drain()
        finally:
            meta.close()
            self.stats.unlinked()

    async def _one_frame(self, link: Link, meta: "_MetaStream", templates: SinkTemplates, peer: W.Hello,
                         seen: OrderedDict[tuple[int, int, int], None], acks: "_Acks") -> bool:
        header, inline = await meta.header()
        if header.kind == W.KIND_END:
            return False
        length = header.description_length
        body = bytes(inline[:length]) if inline is not None else await meta.description(length)
        description = await self._description(link, header, body, templates)
        landing = await self._receive_buffers(link, header, description, inline[length:] if inline is not None else None)
        acks.owe()
        origin = (header.origin_producer, header.origin_generation, header.origin_frame_id)
        repeat = origin in seen
        self.stats.received(header.total_bytes, repeat)
        if repeat:
            landing.free()
            acks.now(header.seq)
            return True
        ack: Callable[[], None] = lambda: acks.now(header.seq)
        released = peer.ack_mode == W.ACK_RELEASED
        await self._publish(description, landing, header.user_tag, ack if released else None)
        _remember(seen, origin)
        if not released:
            ack()
        return True

    async def _description(self, link: Link, header: W.FrameHeader, body: bytes,
                           templates: SinkTemplates) -> FrameDescription:
        try:
            if header.flags & W.FRAME_PATCH:
                body = templates.body(header.template, body)
            description = decode_frame(body)
            if header.flags & W.FRAME_KEEP:
                templates.keep(header.template, body)
        except GpuringError as e:
            await self._refuse(link, header.seq, e)
        buffers = [b for b in description.buffers() if b.kind != "absent" and b.length]
        total = sum(b.length for b in buffers)
        if len(buffers) != header.buffer_count or total != header.total_bytes:
            await self._refuse(link, header.seq, W.bad(f"frame {header.seq} announces {header.buffer_count} buffers "
                                                       f"of {header.total_bytes} bytes; its description has "
                                                       f"{len(buffers)} of {total}"))
        if total > self.max_frame_bytes:
            await self._refuse(link, header.seq, GpuringError(
                "OUT_OF_MEMORY", f"frame {header.seq} holds {total} bytes; this sink takes at most {self.max_frame_bytes}"))
        return description

    async def _refuse(self, link: Link, seq: int, error: GpuringError) -> None:
        message = str(error).partition(": ")[2]
        await link.send(W.pack_refused(seq, error.code, message), W.TAG_CONTROL)
        raise error

    async def _receive_buffers(self, link: Link, header: W.FrameHeader, description: FrameDescription,
                               inline: memoryview | None) -> Landing:
        """Receives each buffer where it lands (landing.py), or copies it there
        from an inline frame's ``inline`` bytes, and points the description at it."""
        present = [(i, b) for i, b in enumerate(description.buffers()) if b.kind != "absent"]
        on_device = [self._landings.lands_on_device(b) for _, b in present]
        landing = self._landings.take(sum(align(b.length) for (_, b), d in zip(present, on_device) if d),
                                      sum(align(b.length) for (_, b), d in zip(present, on_device) if not d))
        receives = []
        try:
            at, taken = [0, 0], 0  # next free byte in the host span, in the device allocation; of ``inline``
            for (i, b), device in zip(present, on_device):  # an empty buffer too is named in this sink's memory
                target = landing.place(b, device, at[device])
                at[device] += align(b.length)
                if inline is not None:
                    target[:] = inline[taken:taken + b.length]
                    taken += b.length
                elif b.length:
                    receives.append(link.recv_into(target, W.body_tag(header.seq, i)))
            await asyncio.gather(*receives)  # posted together; a failure ends the link and with it the rest
            landing.upload(at[1])  # the device bytes, staged: into the device allocation
        except BaseException:
            landing.free()
            raise
        description.sync_kind, description.sync_handle = 0, bytes(L.HANDLE_BYTES)  # complete: nothing to wait for
        return landing

    async def _publish(self, description: FrameDescription, landing: Landing, user_tag: int,
                       on_reclaim: Callable[[], None] | None) -> None:
        pause = FULL_RING_BACKOFF_S[0]
        try:
            while not self._try_publish(description, landing, user_tag, on_reclaim):
                await asyncio.sleep(pause)  # the link keeps progressing meanwhile; the source waits on its window
                pause = min(pause * 2, FULL_RING_BACKOFF_S[1])
        except BaseException:
            landing.free()  # a failed publish leaves the space ours
            raise
        if on_reclaim is not None or landing.device is not None:
            self._ensure_reaper()

    def _try_publish(self, description: FrameDescription, landing: Landing, user_tag: int,
                     on_reclaim: Callable[[], None] | None) -> bool:
        def reclaimed() -> None:
            landing.free_device()
            if on_reclaim is not None:
                on_reclaim()
        try:
            self._producer.publish_description(description, space=[landing.host] if landing.host else [], block=False,
                                               user_tag=user_tag, on_reclaim=reclaimed)
            return True
        except GpuringError as e:
            if e.code == "RING_FULL":
                return False
            raise

    def _ensure_reaper(self) -> None:
        if not self._reaping:
            self._reaping = True
            asyncio.ensure_future(self._reap_while_waiting())

    async def _reap_while_waiting(self) -> None:
        """Frames are reclaimed (their device memory reused, "released" acks
        sent) only when looked at, which a publish does; between publishes this looks."""
        try:
            while self._producer.in_flight:
                self._producer.reap()
                await asyncio.sleep(REAP_EVERY_S)
        finally:
            self._reaping = False

    def close(self) -> None:
        """Leaves the ring. Frames published stay deliverable: host arenas outlive their producer."""
        self._producer.close()


def _remember(seen: OrderedDict[tuple[int, int, int], None], origin: tuple[int, int, int]) -> None:
    seen[origin] = None
    if len(seen) > REMEMBERED_ORIGINS:
        seen.popitem(last=False)


class _MetaStream:
    """A link's metadata stream, with the next message always posted ahead:
    UCX matches it while this frame's buffers arrive. Each META receive takes up
    to INLINE_BYTES: a FRAME header alone, or one inline frame or more (a batch,
    each but the last flagged MORE)."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._next: tuple[bytearray, asyncio.Future[None]] | None = None
        self._rest: tuple[bytearray, int] | None = None  # a batch's message, and where its next frame begins

    def _post(self) -> tuple[bytearray, asyncio.Future[None]]:
        # A fresh buffer each time: bytes a short message did not fill are zeros, never an earlier frame's.
        buffer = bytearray(INLINE_BYTES)
        return buffer, self._link.recv_into(buffer, W.TAG_META)

    async def header(self) -> tuple[W.FrameHeader, memoryview | None]:
        """The next FRAME header (or END), and an inline frame's description and
        buffer bytes, which follow it in its message."""
        if self._rest is not None:
            (buffer, at), self._rest = self._rest, None
        else:
            (buffer, received), self._next, at = self._next or self._post(), None, 0
            await received
        header = W.FrameHeader.unpack(bytes(buffer[at:at + W.FRAME.size]), L.MAX_BODY_BYTES)
        if not header.inline:
            if at:
                raise W.bad(f"frame {header.seq} follows a frame flagged MORE and is not inline")
            return header, None
        end = at + W.FRAME.size + header.description_length + header.total_bytes
        if end > INLINE_BYTES:
            raise W.bad(f"inline frame {header.seq} ends at byte {end} of its message (this sink takes {INLINE_BYTES})")
        if header.flags & W.FRAME_MORE:
            self._rest = buffer, end
        else:
            self._next = self._post()
        return header, memoryview(buffer)[at + W.FRAME.size:end]

    async def description(self, length: int) -> bytes:
        """The description after a header that was not inline."""
        body = await self._link.recv(length, W.TAG_META)
        self._next = self._post()
        return body

    def close(self) -> None:
        if self._next is not None:
            self._next[1].cancel()


class _Acks:
    """free_data messages to the source, in the order frames are done; sends run
    in the background so that publishing does not wait for the link."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._pending: list[int] = []
        self._sending: asyncio.Future[None] | None = None
        self._owed = 0  # frames received on this link and not yet acknowledged
        self._all_sent = asyncio.Event()

    def owe(self) -> None:
        self._owed += 1

    def now(self, seq: int) -> None:
        self._owed -= 1
        self._pending.append(seq)
        if self._sending is None or self._sending.done():
            self._sending = asyncio.ensure_future(self._send())

    async def _send(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[:W.FREE_DATA_MAX], self._pending[W.FREE_DATA_MAX:]
                await self._link.send(W.pack_free_data(batch), W.TAG_CONTROL)
        except LinkLost:
            self._pending.clear()  # the source sends these frames again; they are repeats here then
        if self._owed == 0:
            self._all_sent.set()

    async def drain(self) -> None:
        """Waits until every frame received on the link was acknowledged ("released" acks wait for consumers)."""
        if self._owed or self._pending or (self._sending is not None and not self._sending.done()):
            self._all_sent.clear()
            await self._all_sent.wait()
