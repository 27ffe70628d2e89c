"""The receiving end of a bridge: publishes the frames a source sends into a
local ring, host buffers received straight into this producer's arenas.

A frame is acknowledged (``free_data``) once published here, or, when the source
asked for ``released``, once the local consumers released it. A frame whose
origin (source ring, producer, generation, frame id) this sink already
published is acknowledged and dropped: the source sends held frames again after
a link or a source bridge fails (SPEC.md §14.4). That memory outlives this sink
for frames in host memory (origin_log.py). Backpressure: while the local
ring is full nothing is published or acknowledged, so the source stops at its
window and its ring fills in turn; nothing is dropped. Likewise while shared
memory is short: the sink waits for its frames in the ring to be released.
"""
from __future__ import annotations

import asyncio
import functools
import os
from collections import deque
from typing import Callable, TypeVar

from .. import layout as L
from ..body_shapes import BodyShapes
from ..codec import with_buffers
from ..description import FrameDescription
from ..errors import GpuringError
from ..producer import MEMORY_SHORT, Producer
from . import wire as W
from .handshake import handshake
from .hops import Hops
from .landing import Landing, Landings, align
from .link import Link, LinkLost
from .origin_log import Origin, OriginLog
from .stats import BridgeStats
from .stream_id import stream_id
from .templates import SinkTemplates

T = TypeVar("T")

REMEMBERED_ORIGINS = 1 << 16  # per source stream; far more than a source ever holds unacknowledged
FULL_RING_BACKOFF_S = (0.00005, 0.005)  # first and longest pause between publish attempts on a full ring
INLINE_BYTES = 64 << 10  # the largest inline frame message taken (HELLO inline_bytes)
ARRIVING_FRAMES, ARRIVING_BYTES = 16, 64 << 20  # frames being received while one is published, at most
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
        self._seen: dict[bytes, OriginLog] = {}  # per source stream
        self._shapes = BodyShapes()  # descriptions validated, as a consumer's (body_shapes.py)
        self._reaping = False  # a task looks for released frames ("released" acks)
        self._hops = Hops("sink")

    def _hello(self) -> W.Hello:
        flags = W.FLAG_TEMPLATES | W.FLAG_BATCH | (W.FLAG_DEVICE if self.device is not None else 0)
        return W.Hello(W.ROLE_SINK, 0, flags, os.urandom(32), self._stream, self.window, self.max_frame_bytes, self.ring,
                       INLINE_BYTES)

    async def serve(self, link: Link) -> None:
        """One link's life: handshake, then frames until END. Raises LinkLost
        when the link fails, GpuringError on a protocol error or a refused frame."""
        peer = await handshake(link, self._hello(), self._secret)
        self.stats.linked(link.peer, peer.ring)
        seen = self._origins(peer.stream_id)
        acks, arrivals = _Acks(link), _Arrivals()
        reader = asyncio.ensure_future(self._read_frames(link, arrivals))
        publisher = asyncio.ensure_future(self._publish_frames(arrivals, peer, seen, acks))
        try:
            done, _ = await asyncio.wait({reader, publisher}, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                task.result()  # the first failure, if any
            await acks.drain()
        finally:
            for task in (reader, publisher):
                task.cancel()
            await asyncio.gather(reader, publisher, return_exceptions=True)
            if arrivals.holding:
                await link.close()  # cancels the receives still posted into that memory: then it may go back
            arrivals.free_all()
            self.stats.unlinked()

    async def _read_frames(self, link: Link, arrivals: "_Arrivals") -> None:
        """Headers and descriptions in sequence order, each frame's buffer
        receives posted at once: the next frames arrive while one is published
        (a large frame's transfer no longer waits for the one before it to be
        published). Ends after END."""
        meta, templates = _MetaStream(link), SinkTemplates()
        try:
            while True:
                header, inline = await meta.header()
                if header.kind == W.KIND_END:
                    arrivals.end()
                    return
                self._hops.stamp(header.user_tag, "received")
                length = header.description_length
                body = bytes(inline[:length]) if inline is not None else await meta.description(length)
                description, body = await self._description(link, header, body, templates)
                await arrivals.room(header.total_bytes)
                arrivals.add(await self._receive_buffers(link, header, description, body,
                                                         inline[length:] if inline is not None else None, arrivals))
        finally:
            meta.close()

    def _origins(self, source_stream: bytes) -> OriginLog:
        if source_stream not in self._seen:
            self._seen[source_stream] = OriginLog(self.ring, self._stream, source_stream, REMEMBERED_ORIGINS)
        return self._seen[source_stream]

    async def _publish_frames(self, arrivals: "_Arrivals", peer: W.Hello, seen: OriginLog, acks: "_Acks") -> None:
        """Publishes each frame once its buffers are in, in sequence order, and acknowledges it."""
        while (arriving := await arrivals.next()) is not None:
            header, description, landing, body = arriving.header, arriving.description, arriving.landing, arriving.body
            await arriving.complete()  # meanwhile its memory is the queue's: a failed link frees it
            arrivals.done()
            acks.owe()
            origin: Origin = (header.origin_producer, header.origin_generation, header.origin_frame_id)
            repeat = origin in seen
            self.stats.received(header.total_bytes, repeat)
            if repeat:
                landing.free()
                acks.now(header.seq)
                continue
            ack = functools.partial(acks.now, header.seq)
            released = peer.ack_mode == W.ACK_RELEASED
            lasting = landing.device is None  # host arenas outlive this sink; its device memory does not
            await self._publish(description, with_buffers(body, description), landing, header.user_tag,
                                ack if released else None)
            seen.published(origin, lasting)
            self._hops.stamp(header.user_tag, "published")
            if not released:
                ack()

    async def _description(self, link: Link, header: W.FrameHeader, body: bytes,
                           templates: SinkTemplates) -> tuple[FrameDescription, bytes]:
        """The frame's description, validated, and its whole body (a PATCH rebuilt from its template)."""
        try:
            if header.flags & W.FRAME_PATCH:
                body = templates.body(header.template, body)
            description = self._shapes.decode(body)[0]
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
        return description, body

    async def _refuse(self, link: Link, seq: int, error: GpuringError) -> None:
        message = str(error).partition(": ")[2]
        await link.send(W.pack_refused(seq, error.code, message), W.TAG_CONTROL)
        raise error

    async def _receive_buffers(self, link: Link, header: W.FrameHeader, description: FrameDescription, body: bytes,
                               inline: memoryview | None, arrivals: "_Arrivals") -> "_Arriving":
        """Posts a receive of each buffer where it lands (landing.py), or copies
        it there from an inline frame's ``inline`` bytes, and points the
        description at it; the frame is complete once ``_Arriving.complete()`` returns."""
        present = [(i, b) for i, b in enumerate(description.buffers()) if b.kind != "absent"]
        on_device = [self._landings.lands_on_device(b) for _, b in present]
        landing = await self._land(sum(align(b.length) for (_, b), d in zip(present, on_device) if d),
                                   sum(align(b.length) for (_, b), d in zip(present, on_device) if not d), arrivals)
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
        except BaseException:
            landing.free()
            raise
        description.sync_kind, description.sync_handle = 0, bytes(L.HANDLE_BYTES)  # complete when published
        return _Arriving(header, description, body, landing, receives, at[1])

    async def _land(self, device_bytes: int, host_bytes: int, arrivals: "_Arrivals") -> Landing:
        """A frame's memory. While shared memory is short and frames of this
        sink are queued or in its ring, it waits for them to come back, as for
        a full ring; with none, nothing can come back and the error stands."""
        def attempt() -> Landing | None:  # each try reclaims what consumers released meanwhile
            try:
                return self._landings.take(device_bytes, host_bytes)
            except GpuringError as e:
                if e.code not in MEMORY_SHORT or not (self._producer.in_flight or arrivals.holding):
                    raise
            return None

        return await _with_backoff(attempt)

    async def _publish(self, description: FrameDescription, body: bytes, landing: Landing, user_tag: int,
                       on_reclaim: Callable[[], None] | None) -> None:
        """Publishes the frame ``body`` encodes (the received body pointed at ``landing``)."""
        try:  # meanwhile the link keeps progressing; the source waits on its window
            await _with_backoff(lambda: self._try_publish(description, body, landing, user_tag, on_reclaim) or None)
        except BaseException:
            landing.free()  # a failed publish leaves the space ours
            raise
        if on_reclaim is not None or landing.device is not None:
            self._ensure_reaper()

    def _try_publish(self, description: FrameDescription, body: bytes, landing: Landing, user_tag: int,
                     on_reclaim: Callable[[], None] | None) -> bool:
        def reclaimed() -> None:
            landing.free_device()
            if on_reclaim is not None:
                on_reclaim()
        try:
            self._producer.publish_description(description, space=[landing.host] if landing.host else [], block=False,
                                               user_tag=user_tag, on_reclaim=reclaimed, body=body)
            return True
        except GpuringError as e:
            if e.code == "RING_FULL" or (e.code in MEMORY_SHORT and self._producer.in_flight):
                return False  # a full ring, or no room for the body until a frame comes back
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
        for log in self._seen.values():
            log.close()
        self._hops.write()


async def _with_backoff(attempt: Callable[[], T | None]) -> T:
    """``attempt()`` until it returns something, pausing between tries from
    the first FULL_RING_BACKOFF_S, doubling, to the second."""
    pause = FULL_RING_BACKOFF_S[0]
    while (result := attempt()) is None:
        await asyncio.sleep(pause)
        pause = min(pause * 2, FULL_RING_BACKOFF_S[1])
    return result


class _Arriving:
    """A frame whose buffer receives are posted: its header, its description
    (pointing at the landing already) and the body it was received as, the
    landing and the receives."""

    def __init__(self, header: W.FrameHeader, description: FrameDescription, body: bytes, landing: Landing,
                 receives: list[asyncio.Future[None]], device_bytes: int) -> None:
        self.header, self.description, self.body, self.landing = header, description, body, landing
        self._receives, self._device_bytes = receives, device_bytes

    async def complete(self) -> None:
        """Waits for the receives (a failure ends the link and with it the
        rest), then copies the staged device bytes into the device allocation."""
        await asyncio.gather(*self._receives)
        self.landing.upload(self._device_bytes)


class _Arrivals:
    """The frames being received, in sequence order, between the link's
    reader and the publisher: at most ARRIVING_FRAMES frames and ARRIVING_BYTES
    bytes (but always one frame), so the next frames arrive while one is
    published without holding memory without bound."""

    def __init__(self) -> None:
        self._frames: deque[_Arriving | None] = deque()  # None: END
        self._bytes = 0
        self._changed = asyncio.Event()

    async def _until(self, ready: Callable[[], bool]) -> None:
        while not ready():
            self._changed.clear()
            await self._changed.wait()

    async def room(self, nbytes: int) -> None:
        await self._until(lambda: not self._frames or (len(self._frames) < ARRIVING_FRAMES
                                                       and self._bytes + nbytes <= ARRIVING_BYTES))

    def add(self, frame: _Arriving) -> None:
        self._frames.append(frame)
        self._bytes += frame.header.total_bytes
        self._changed.set()

    def end(self) -> None:
        self._frames.append(None)
        self._changed.set()

    async def next(self) -> _Arriving | None:
        """The oldest frame, which stays queued (freed with the rest if the link fails) until ``done()``; None after END."""
        await self._until(lambda: bool(self._frames))
        return self._frames[0]

    def done(self) -> None:
        """The frame ``next`` gave is published (or freed)."""
        frame = self._frames.popleft()
        self._bytes -= frame.header.total_bytes if frame is not None else 0
        self._changed.set()

    @property
    def holding(self) -> bool:
        return any(frame is not None for frame in self._frames)

    def free_all(self) -> None:
        """A failed link, closed: the frames not yet published give their memory back."""
        for frame in self._frames:
            if frame is not None:
                frame.landing.free()
        self._frames.clear()


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
