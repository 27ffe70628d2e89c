"""Taking frames.

Each frame is delivered to exactly one consumer of the ring. ``next()`` copies
the slot's reference and the frame body out of shared memory and validates
them before the frame is handed over; a damaged frame raises FRAME_INVALID or
FRAME_BOUNDS and is released, so the ring keeps moving. See frame.py for when
the lease ends.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, AsyncIterator, Iterator

from . import layout as L
from . import broadcast, slot_protocol as ring
from .async_wait import wait_async
from .body_shapes import BodyShapes, Shape
from .doorbell import Bell
from .errors import GpuringError
from .frame import Frame, Lease
from .host_columns import ArenaMaps, record_batch
from .recovery import detach, sweep
from .segment import Segment

if TYPE_CHECKING:
    from .description import FrameDescription
    from .device_columns import DeviceMappings
    from .pool_memory import PoolImports
    from .vmm_memory import VmmImports
    from .stream_releases import StreamReleases


#: How often a consumer looks for producers that are gone, to let their device memory go (as often as waits sweep).
FORGET_EVERY = ring.SWEEP_EVERY

class Consumer:
    """One consumer on a ring. ``next`` is for one thread at a time; leases may
    end on any thread (the garbage collector's included)."""

    def __init__(self, seg: Segment, on_slow: str = "block", start: str = "newest", extra_roles: int = 0) -> None:
        if on_slow not in L.ON_SLOW:
            raise GpuringError("INVALID_ARGUMENT", f"on_slow must be one of {', '.join(L.ON_SLOW)}")
        if start not in ("newest", "oldest"):
            raise GpuringError("INVALID_ARGUMENT", "start must be 'newest' or 'oldest'")
        self._seg = seg
        self._closed = False
        self._on_slow = L.ON_SLOW.index(on_slow)
        #: Broadcast rings: frames lost, as the last FRAMES_MISSED or EVICTED said.
        self.missed = 0
        self.index, self.generation = seg.attach(L.ROLE_CONSUMER | extra_roles)
        self._maps = ArenaMaps(seg)
        self._shapes = BodyShapes()
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._device: DeviceMappings | None = None
        self._pools: PoolImports | None = None
        self._vmm: VmmImports | None = None
        self._stream_releases: StreamReleases | None = None
        self._bell: Bell | None = None  # made by the first asyncio wait
        self._next_forget = 0.0
        sweep(seg)
        if seg.broadcast:
            broadcast.join(seg, self.index, self._on_slow, start == "oldest")

    @classmethod
    def open(cls, name: str, *, timeout: float = 1.0, any_owner: bool = False, on_slow: str = "block",
             start: str = "newest", extra_roles: int = 0) -> "Consumer":
        """``any_owner`` joins a ring another user created (refused by default: SEGMENT_OWNER).

        ``on_slow`` (broadcast rings, SPEC.md §5.4): what producers do when this
        consumer falls a whole ring behind. ``"block"``: wait for it;
        ``"drop-oldest"``: drop the oldest frame it has not taken; ``"evict"``:
        drop every frame it has not taken. It learns of a loss once: ``next``
        raises FRAMES_MISSED or EVICTED (``error.missed`` says how many) before
        it returns any frame published after them, and the next call goes on
        with the frames published since. Frames it has taken
        are never taken back. ``start``: ``"newest"`` receives the frames
        published from now on; ``"oldest"`` also those still in the ring, frames
        being published as it joins included (it waits up to 10 ms in all for
        them).
        ``extra_roles``: ``layout.ROLE_BRIDGE`` marks a bridge end for ``inspect``."""
        return cls(Segment.open(name, timeout, any_owner), on_slow, start, extra_roles)

    def try_next(self) -> Frame | None:
        """A frame if one is ready now, else None."""
        self._check_open()
        return ring.try_sweeping(self._seg, self._take)

    def next(self, timeout: float | None = None) -> Frame:
        """Waits up to ``timeout`` seconds (None: forever) for a frame; TIMEOUT otherwise."""
        self._check_open()
        return ring.wait_for(self._seg, "data", self._take, timeout)

    def next_held(self, timeout: float | None = None) -> Frame:
        """Like ``next``, for a process that forwards frames elsewhere (``gpuring
        bridge``): the frame's slot stays CLAIMED until ``release()``, so if this
        process dies holding it, a sweeper hands the frame back to the ring
        (SPEC.md §5.3, §7) and another consumer receives it, where a frame taken
        with ``next`` would be released unread. Delivery becomes at-least-once:
        the forwarder's peer must drop repeats. INVALID_ARGUMENT on a broadcast
        ring, where a claim is final."""
        self._check_holdable()
        return ring.wait_for(self._seg, "data", self._take_held, timeout)

    async def next_async(self, timeout: float | None = None) -> Frame:
        """``next`` for asyncio: the event loop itself sleeps on this consumer's
        doorbell (SPEC.md §6.1), not a thread on the futex, so other tasks run
        meanwhile and a frame costs one wake-up. One task at a time; a task
        cancelled while it waits takes no frame. ``async for frame in consumer``
        calls it in turn."""
        self._check_open()
        return await wait_async(self._seg, self._doorbell(), "data", self._take, timeout)

    async def next_held_async(self, timeout: float | None = None) -> Frame:
        """``next_held`` for asyncio, waiting as ``next_async`` does."""
        self._check_holdable()
        return await wait_async(self._seg, self._doorbell(), "data", self._take_held, timeout)

    def _doorbell(self) -> Bell:
        if self._bell is None:
            self._bell = Bell(self._seg, self.index)
        return self._bell

    def try_next_held(self) -> Frame | None:
        """``next_held`` if a frame is ready now, else None."""
        self._check_holdable()
        return ring.try_sweeping(self._seg, self._take_held)

    def _check_holdable(self) -> None:
        self._check_open()
        if self._seg.broadcast:
            raise GpuringError("INVALID_ARGUMENT", "next_held needs a work-queue ring: a broadcast claim cannot be handed back")

    def _take(self, held: bool = False) -> Frame | None:
        """The next frame handed over, or None: none is ready, or the claim was
        taken back before the hand-over (see _hand_over), and the caller looks again."""
        claimed = self._claim()
        return None if claimed is None else self._hand_over(*claimed, held=held)

    def _take_held(self) -> Frame | None:
        return self._take(held=True)

    def _claim(self) -> tuple[int, ring.FrameRef] | None:
        self._forget_dead_producers()
        self._seg.check_held(self.index, self.generation)
        try:
            return ring.try_claim(self._seg, self.index)
        except GpuringError as e:
            if e.code not in ("FRAMES_MISSED", "EVICTED"):
                raise
            code = e.code
        self.missed = broadcast.take_missed(self._seg, self.index)
        if code == "FRAMES_MISSED":
            raise GpuringError("FRAMES_MISSED", f"{self.missed} frames of ring '{self._seg.name}' were dropped before "
                               "this consumer took them (on_slow: drop-oldest)", missed=self.missed)
        broadcast.subscribe(self._seg, self.index, self._on_slow)
        raise GpuringError("EVICTED", f"this consumer fell a ring behind and was evicted from ring '{self._seg.name}', "
                           f"losing {self.missed} frames (on_slow: evict); it goes on with the frames published since",
                           missed=self.missed)

    def _forget_dead_producers(self) -> None:
        """At most every FORGET_EVERY seconds (waiting or not): unmaps the arenas
        no frame can refer to any more (SPEC.md §9), closes the idle IPC
        mappings and destroys the unused imported pools of producers that are
        gone, which would keep their memory allocated (SPEC.md §9a, §9b)."""
        if self._device is None and self._pools is None and not self._maps.maps:
            return  # nothing to let go, no clock read per claim
        now = time.monotonic()
        if now < self._next_forget:
            return
        self._next_forget = now + FORGET_EVERY
        self._maps.forget_removed(self._producer_live)
        if self._device is not None:
            self._device.close_idle(self._producer_live)
        if self._pools is not None:
            self._pools.close(self._producer_live)

    def _producer_live(self, producer: tuple[int, int]) -> bool:
        index, gen = producer
        seg = self._seg
        return index < seg.participant_capacity and seg.participant_word(index) >> 32 == gen and seg.participant_alive(index)

    def __iter__(self) -> Iterator[Frame]:
        while True:
            yield self.next()

    async def __aiter__(self) -> AsyncIterator[Frame]:
        while True:
            yield await self.next_async()

    def _hand_over(self, pos: int, ref: ring.FrameRef, held: bool = False) -> Frame | None:
        """The claimed frame as a Frame; None if the claim was taken back before
        the lease: a sweeper that judged a previous occupant of our entry dead,
        stalled between its check and its CAS, found our claim at the same
        position (SPEC.md §5.2, Confirm). The frame is READY again for any
        consumer, so handing it over would deliver it twice."""
        try:
            body = self._body(ref)
            description, shape = self._shapes.decode(body)
        except GpuringError:
            if not self._seg.broadcast:  # a broadcast claim is a lease already
                ring.transition(self._seg, pos, L.CLAIMED, self.index + 1, L.slot_word(pos, L.LEASED, self.index + 1))
            self._end_lease(pos)
            raise
        if not held and not ring.confirm(self._seg, self.index, pos):
            return None
        with self._lock:
            self._held.add(pos)
        return Frame(self, description, ref.frame_id, ref.user_tag, Lease(lambda: self._end_lease(pos, confirm=held)),
                     (ref.producer, ref.producer_gen), shape, body)

    def _body(self, ref: ring.FrameRef) -> bytes:
        if ref.producer >= self._seg.participant_capacity or ref.body_length > L.MAX_BODY_BYTES:
            raise GpuringError("FRAME_INVALID", f"slot reference names producer {ref.producer}, body {ref.body_length} bytes")
        name = f"/gpuring.{self._seg.name}.p{ref.producer}g{ref.producer_gen}.a{ref.body_arena}"
        mem = self._maps.memory(name)
        if ref.body_offset + ref.body_length > mem.size:
            raise GpuringError("FRAME_BOUNDS", f"frame body [{ref.body_offset}, +{ref.body_length}) outside its arena")
        return mem.read(ref.body_offset, ref.body_length)

    def _end_lease(self, pos: int, confirm: bool = False) -> None:
        with self._lock:
            if self._closed:
                return  # closed: detach already released everything we held
            self._held.discard(pos)
            try:
                # A held frame (next_held) is leased only now, to be released at once.
                if not confirm or ring.confirm(self._seg, self.index, pos):
                    ring.release(self._seg, self.index, pos)
            except GpuringError:
                pass  # a sweeper released it for us after judging us dead

    def _record_batch(self, description: FrameDescription, lease: Lease, shape: Shape | None) -> Any:
        return record_batch(description, self._maps.address, lease, shape)

    def _release_after(self, ordinal: int, stream: int, lease: Lease) -> None:
        if self._stream_releases is None:
            from .stream_releases import StreamReleases
            self._stream_releases = StreamReleases()
        self._stream_releases.add(ordinal, stream, lease)

    def _device_mappings(self) -> DeviceMappings:
        if self._device is None:
            from .device_columns import DeviceMappings
            self._device = DeviceMappings()
        return self._device

    def _pool_imports(self) -> PoolImports:
        if self._pools is None:
            from .pool_memory import PoolImports
            self._pools = PoolImports(self._seg.name)
        return self._pools

    def _vmm_imports(self) -> VmmImports:
        if self._vmm is None:
            from .vmm_memory import VmmImports
            self._vmm = VmmImports(self._seg.name)
        return self._vmm

    def _check_open(self) -> None:
        if self._closed:
            raise GpuringError("CLOSED", "the consumer is closed")

    def close(self) -> None:
        """Leaves the ring, once the leases of frames released with a stream
        have ended; frames still held are released. Host arrays stay
        readable (their arenas stay mapped while they live); device arrays from
        this consumer must be gone first, as their IPC mappings close and
        their imported pools are destroyed here."""
        if self._stream_releases is not None:
            self._stream_releases.wait_all()
        with self._lock:
            if self._closed:
                return
            seg, self._closed = self._seg, True
        detach(seg, self.index, self.generation)  # clears the doorbell bits first
        if self._bell is not None:
            self._bell.close()
        seg.close()
        if self._device is not None:
            self._device.close()
        if self._pools is not None:
            self._pools.close()

    def __enter__(self) -> "Consumer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
