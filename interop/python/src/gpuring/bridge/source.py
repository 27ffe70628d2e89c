"""The sending end of a bridge: takes every frame of a local ring and forwards
it over a link, releasing it only when the sink says it was published (or, by
option, released there).

Frames are taken with ``Consumer.next_held``: until the sink acknowledges a
frame its slot stays CLAIMED, so if this process dies the ring hands the frame
to the next consumer (a restarted bridge) instead of losing it. Frames held when
a link fails are sent again, first and in order, on the next link; the sink
drops the ones it had already published (SPEC.md §14.4).

On a broadcast ring the source is one more subscriber (onSlow "block": a far
ring that is full holds the producers back), and a claim there is final: frames
are taken with ``Consumer.next`` and their shares released once acknowledged,
so a killed source loses the frames it held, as any killed subscriber does.
"""
from __future__ import annotations

import asyncio
import os
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from .. import cuda_driver as cu
from .. import layout as L
from ..codec import encode_frame
from ..consumer import Consumer
from ..description import DEVICE_KINDS
from ..device_columns import address, wait_for_writes
from ..errors import GpuringError
from ..frame import Frame
from . import wire as W
from .device_space import IDLE_BYTES, PinnedPool, PinnedSpace
from .handshake import handshake
from .hops import Hops
from .landing import align
from .link import Link, LinkLost
from .stats import BridgeStats
from .stream_id import stream_id
from .templates import SourceTemplates

# A frame whose buffers cannot be read here (its producer's device memory is gone, a
# buffer lies outside its allocation) is released and counted as damaged, not forwarded.
UNREADABLE = ("CUDA", "FRAME_BOUNDS", "FRAME_INVALID")
STAGED_BYTES = IDLE_BYTES  # page-locked memory a source stages device frames in, at most (one frame more if larger)
MAX_BATCH = 32  # inline frames in one message at most: the first waits while the others are read
TAKE_WAIT_S = 0.2  # how long one wait for a frame blocks the taking thread (a stop is noticed within it)


class BridgeSource:
    """Forwards ring ``ring`` to whichever sink it is linked to. ``ack``:
    ``"published"`` (release here once published there) or ``"released"``
    (once a consumer there released it)."""

    def __init__(self, ring: str, secret: bytes, *, ack: str = "published", stats: BridgeStats | None = None) -> None:
        if ack not in W.ACK_MODES:
            raise GpuringError("INVALID_ARGUMENT", f"ack must be one of {', '.join(W.ACK_MODES)}")
        self.ring, self._secret, self._ack = ring, secret, W.ACK_MODES[ack]
        self.stats = stats or BridgeStats(ring, "source")
        self._consumer = Consumer.open(ring, start="oldest", extra_roles=L.ROLE_BRIDGE)
        self._stream = stream_id(self._consumer._seg)
        # A work-queue claim can be handed back, a broadcast one cannot (module doc).
        held = not self._consumer._seg.broadcast
        self._try_take = self._consumer.try_next_held if held else self._consumer.try_next
        self._wait_take = self._consumer.next_held if held else self._consumer.next
        self._taker = ThreadPoolExecutor(1, thread_name_prefix="gpuring-bridge-take")
        self._held: OrderedDict[int, _Held] = OrderedDict()  # taken, not yet acknowledged, in order taken
        self._staging: dict[int, PinnedPool] = {}  # by device ordinal
        self._serial = 0
        self._taking: asyncio.Future[Frame | None] | None = None
        self._stopping = False
        self._hops = Hops("source")

    def _hello(self) -> W.Hello:
        return W.Hello(W.ROLE_SOURCE, self._ack, 0, os.urandom(32), self._stream, 0, 0, self.ring)

    async def serve(self, link: Link) -> None:
        """One link's life: handshake, frames held from before sent again, then
        the ring's frames as they come. Returns at stop; raises LinkLost when
        the link fails, GpuringError when the sink refuses."""
        peer = await handshake(link, self._hello(), self._secret)
        self.stats.linked(link.peer, peer.ring)
        flight = _Flight(link, peer, self._hops)
        acks = asyncio.ensure_future(self._acks(link, flight))
        acks.add_done_callback(flight.fail_from)
        try:
            await self._stream_frames(link, flight)
        finally:
            acks.cancel()
            self.stats.unlinked()

    async def _stream_frames(self, link: Link, flight: "_Flight") -> None:
        resend = list(self._held)
        for seq in range(2**32):
            await flight.room()
            if resend:
                serial = resend.pop(0)
                if serial not in self._held:
                    continue
            else:
                frame = await self._next_frame(flight)
                if frame is None:  # stopping: the sink publishes what it has, then the link ends
                    flight.batch.flush()
                    await link.send(W.FrameHeader(seq, 0, 0, 0, 0, 0, 0, 0, W.KIND_END).pack(), W.TAG_META)
                    await flight.empty()
                    return
                serial = self._hold(frame)
                self._hops.stamp(frame.user_tag, "taken")
            held = self._held[serial]
            if held.buffers is None and held.frame.on_device:
                await self._room_to_stage(held, flight)
            try:
                if held.buffers is None:  # read once: a frame sent again sends the same bytes
                    held.buffers = self._read(held)
            except GpuringError as e:
                if e.code not in UNREADABLE:
                    raise
                self.stats.damaged(f"frame {held.frame.frame_id}: {e}")  # its producer's memory is gone
                self._held.pop(serial).release()
                continue
            flight.unacked[seq] = serial
            self._send(link, seq, held.frame, held.buffers, flight)
        raise LinkLost("2^32 frames on one link: reconnecting to restart the sequence numbers")

    async def _room_to_stage(self, held: "_Held", flight: "_Flight") -> None:
        """Waits until staging the frame keeps the page-locked memory in use
        within STAGED_BYTES, or nothing is in flight: a window of large frames
        would otherwise pin gigabytes, and making page-locked memory is slow."""
        need = held.device_bytes()
        await flight.until(lambda: sum(p.in_use for p in self._staging.values()) + need <= STAGED_BYTES
                           or not flight.unacked)

    def _hold(self, frame: Frame) -> int:
        self._serial += 1
        self._held[self._serial] = _Held(frame)
        return self._serial

    async def _next_frame(self, flight: "_Flight") -> Frame | None:
        """The next frame of the ring, or None once stopped. While frames are
        ready they are taken here, on the loop; only a wait goes to the taking
        thread, and the frames batched so far go out before it. A frame that
        thread takes while the link fails stays for the next link."""
        while not self._stopping:
            if self._taking is None:
                frame = self._take(self._try_take)
                if frame is not None:
                    return frame
                self._taking = asyncio.get_running_loop().run_in_executor(
                    self._taker, self._take, lambda: self._wait_take(TAKE_WAIT_S))
            flight.batch.flush()
            await _first(asyncio.shield(self._taking), flight.failed)
            frame, self._taking = self._taking.result(), None
            if frame is not None:
                return frame
        return None

    def _take(self, take: Callable[[], Frame | None]) -> Frame | None:
        try:
            return take()
        except GpuringError as e:
            if e.code == "TIMEOUT":
                return None
            if e.code in ("FRAME_INVALID", "FRAME_BOUNDS"):
                self.stats.damaged(str(e))  # the ring released it: nothing to forward
                return None
            raise

    def _read(self, held: "_Held") -> list[tuple[int, int, Any]]:
        """(index, length, bytes) of each buffer the frame sends: host buffers
        where they lie in the ring's arenas; device buffers, once the producer's
        writes are done, copied into page-locked memory (device_space.py says why)."""
        frame = held.frame
        present = [(i, b) for i, b in enumerate(frame.description.buffers()) if b.kind != "absent" and b.length]
        if not frame.on_device:
            return [(i, b.length, self._host_bytes(b)) for i, b in present]
        ordinal = wait_for_writes(frame)
        pool = self._staging.get(ordinal) or self._staging.setdefault(ordinal, PinnedPool(ordinal))
        staging = held.stage(pool, held.device_bytes())
        out, at = [], 0
        with cu.primary_context(ordinal):
            for i, b in present:
                if b.kind not in DEVICE_KINDS:
                    out.append((i, b.length, self._host_bytes(b)))
                    continue
                cu.copy_to_host(staging.ptr + at, address(frame, b, frame._held()), b.length)
                out.append((i, b.length, staging.view(at, b.length)))
                at += align(b.length)
        return out

    def _host_bytes(self, b: Any) -> memoryview:
        mem = self._consumer._maps.memory(b.arena_name)
        self._consumer._maps.address(b)  # bounds-checks the buffer in its arena
        return mem.view[b.offset:b.offset + b.length]

    def _send(self, link: Link, seq: int, frame: Frame, buffers: list[tuple[int, int, Any]], flight: "_Flight") -> None:
        """Posts the frame's messages in order and returns without waiting for
        them: the frame stays held until acknowledged, so its memory outlives
        the sends. A send that fails fails the link."""
        flags, template, body = 0, 0, frame._body or encode_frame(frame.description)
        if flight.templates is not None:  # the schema once per link: later frames of a shape as a patch
            flags, template, body = flight.templates.encode(body)
        total = sum(n for _, n, _ in buffers)
        producer, generation = frame.producer
        size = W.FRAME.size + len(body) + total
        if size <= flight.inline_bytes:  # one message (or a share of one): a small frame's round trips
            flags |= W.FRAME_INLINE
        header = W.FrameHeader(seq, len(body), len(buffers), producer, generation, frame.frame_id, frame.user_tag, total,
                               flags=flags, template=template)
        self.stats.sent(total)
        if flags & W.FRAME_INLINE:
            flight.batch.add(header, [body, *(data for _, _, data in buffers)], size)
            return
        flight.batch.flush()  # the frames before it go first
        sends = [link.post(header.pack(), W.TAG_META), link.post(body, W.TAG_META)]
        sends += [link.post(data, W.body_tag(seq, i)) for i, _, data in buffers]
        for send in sends:
            send.add_done_callback(flight.fail_from)
        self._hops.stamp(frame.user_tag, "sent")

    async def _acks(self, link: Link, flight: "_Flight") -> None:
        while True:
            msg = W.unpack_control(await link.recv(W.CONTROL_BYTES, W.TAG_CONTROL))
            if isinstance(msg, W.Refusal):
                raise GpuringError("BRIDGE_REFUSED", f"the sink refused frame {msg.seq}: {msg.code}: {msg.message}")
            for seq in msg:
                serial = flight.unacked.pop(seq, None)
                if serial is None:
                    raise W.bad(f"free_data for frame {seq}, which is not in flight")
                self._held.pop(serial).release()
                self.stats.acked()
            flight.changed.set()

    def stop(self) -> None:
        """Asks ``serve`` to end the link (it sends END) at its next frame."""
        self._stopping = True

    def close(self) -> None:
        """Leaves the ring: frames still held are handed back to it (they stay
        CLAIMED until now), so nothing unacknowledged is lost; on a broadcast
        ring their shares are released instead (a claim there is final)."""
        self._stopping = True
        self._taker.shutdown(wait=True)
        self._consumer.close()  # first: once closed, dropping a held frame no longer releases it
        self._held.clear()
        self._hops.write()


class _Held:
    """A frame taken and not yet acknowledged; ``buffers`` once read, with the
    page-locked memory its device bytes were staged in."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame
        self.buffers: list[tuple[int, int, Any]] | None = None
        self._staged: tuple[PinnedPool, PinnedSpace] | None = None

    def device_bytes(self) -> int:
        """The staging its device buffers take, each at a 64-byte-aligned offset."""
        return sum(align(b.length) for b in self.frame.description.buffers() if b.kind in DEVICE_KINDS)

    def stage(self, pool: PinnedPool, nbytes: int) -> PinnedSpace:
        space = pool.take(nbytes)
        self._staged = (pool, space)
        return space

    def release(self) -> None:
        self.frame.release()
        if self._staged is not None:
            self._staged[0].give_back(self._staged[1])
        self._staged, self.buffers = None, None


class _Flight:
    """One link's frames sent and not yet acknowledged (sequence number to held
    serial), what the sink announced (window, inline limit, templates, batches),
    the inline frames not yet sent, and the link's first failure (of a send or
    of the acks)."""

    def __init__(self, link: Link, sink: W.Hello, hops: Hops) -> None:
        self.window, self.inline_bytes = max(1, sink.window), sink.inline_bytes
        self.templates = SourceTemplates() if sink.flags & W.FLAG_TEMPLATES else None
        self.batch = _Batch(link, sink.inline_bytes, MAX_BATCH if sink.flags & W.FLAG_BATCH else 1, self.fail_from, hops)
        self.unacked: dict[int, int] = {}
        self.changed = asyncio.Event()
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def fail_from(self, task: asyncio.Future[Any]) -> None:
        """A done callback of each send and of the acks: the first error fails the link."""
        error = None if task.cancelled() else task.exception()  # retrieved even when not the first
        if error is not None and not self.failed.done():
            self.failed.set_exception(error)

    async def until(self, ready: Callable[[], bool]) -> None:
        """Waits until ``ready()``, looking again at each acknowledgement; the
        frames batched so far go out before it waits."""
        while not ready():
            self.batch.flush()
            self.changed.clear()
            await _first(self.changed.wait(), self.failed)

    async def room(self) -> None:
        await self.until(lambda: len(self.unacked) < self.window)

    async def empty(self) -> None:
        await self.until(lambda: not self.unacked)


class _Batch:
    """Inline frames sent together as one META message, each but the last
    flagged MORE (SPEC.md §14.3): while a source finds frames ready in its ring
    it gathers them, up to ``max_frames`` and the sink's ``inline_bytes``; they go
    out before it waits for anything, and before a frame that is not inline."""

    def __init__(self, link: Link, limit: int, max_frames: int, on_sent: Callable[[asyncio.Future[None]], None],
                 hops: Hops) -> None:
        self._link, self._limit, self._max_frames, self._on_sent = link, limit, max_frames, on_sent
        self._hops = hops
        self._frames: list[tuple[W.FrameHeader, list[Any]]] = []
        self._bytes = 0

    def add(self, header: W.FrameHeader, parts: list[Any], nbytes: int) -> None:
        """A frame of ``nbytes`` (header included): the header, then ``parts``."""
        if self._bytes + nbytes > self._limit:
            self.flush()
        self._frames.append((header, parts))
        self._bytes += nbytes
        if len(self._frames) == self._max_frames:
            self.flush()

    def flush(self) -> None:
        if not self._frames:
            return
        frames, self._frames, self._bytes = self._frames, [], 0
        for header, _ in frames[:-1]:
            header.flags |= W.FRAME_MORE
        message = b"".join(part for header, parts in frames for part in (header.pack(), *parts))
        self._link.post(message, W.TAG_META).add_done_callback(self._on_sent)
        for header, _ in frames:
            self._hops.stamp(header.user_tag, "sent")


async def _first(waiting: Any, failing: asyncio.Future[None]) -> None:
    """Waits for ``waiting``; if ``failing`` ends first, raises what it raised."""
    task = asyncio.ensure_future(waiting)
    done, _ = await asyncio.wait({task, failing}, return_when=asyncio.FIRST_COMPLETED)
    if failing in done:
        task.cancel()
        failing.result()
        raise LinkLost("the link ended")
