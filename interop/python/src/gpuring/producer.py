"""Publishing frames.

Ownership: ``publish`` copies host columns into this producer's shared arena,
so the caller's data is free at once. Device columns are *not* copied: the
consumer maps the producer's device memory, so the producer keeps a reference
to each device array (and to the event it recorded) until the frame is
released, and the caller must not write to those arrays meanwhile. Released
frames are reclaimed by ``reap`` and ``drain``, and by ``publish``: the oldest
at once, one released behind a frame still held within FULL_REAP_EVERY publishes.

Memory: when /dev/shm cannot hold another arena, ``publish`` reclaims every
released frame and, if that is not enough, waits (up to its ``timeout``) for
this producer's frames in flight to be released, as it waits for a full ring.
With none in flight nothing can come back, and it raises NO_SPACE at once.

Ordering: frames from one producer are claimed in publication order; with
several consumers each frame goes to exactly one of them.

Waiting: ``publish`` and ``drain`` sleep a thread on the ring's futex;
``publish_async`` and ``drain_async`` sleep the asyncio event loop on this
producer's doorbell (SPEC.md §6.1) instead, so other tasks run while the ring is
full, and the consumers' releases wake it.
"""
from __future__ import annotations

import numbers
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import broadcast, doorbell
from . import layout as L
from . import slot_protocol as ring
from .arena import Allocation, ArenaPool
from .async_wait import wait_async
from .codec import encode_frame
from .deadline import deadline_after
from .description import FrameDescription
from .doorbell import Bell
from .errors import GpuringError
from .host_templates import HostTemplates
from .recovery import detach, sweep
from .segment import Segment

# Publishing reaps the oldest frames up to the first still out (consumers mostly
# release in order), and every FULL_REAP_EVERY publishes all of them: a full pass
# loads one slot per frame in flight, hundreds of microseconds in Python when a
# consumer lags. A frame released out of order is reclaimed a little later, never lost.
FULL_REAP_EVERY = 128
# Arena memory ran out: /dev/shm is full, or the producer has its last arena.
MEMORY_SHORT = ("NO_SPACE", "OUT_OF_MEMORY")

if TYPE_CHECKING:
    from .pool_memory import DescriptorChannel
    from .prepared_frame import PreparedFrame


# A frame ready to stage: its body, the allocations its host columns were copied
# into, what device data to keep alive, and its description where it names device memory.
Encoded = tuple[bytes, list[Allocation], object, Optional[FrameDescription]]


@dataclass(frozen=True)
class HostSpace:
    """Shared memory from ``Producer.host_space``: ``view`` is writable;
    ``BufferDescriptor.host(arena, allocation.offset + k, n)`` names bytes in it."""
    allocation: Allocation
    arena: str
    view: memoryview


def _is_device(data: object) -> bool:
    from .device_columns import DeviceColumn
    if isinstance(data, dict):
        return any(isinstance(v, DeviceColumn) or hasattr(v, "__cuda_array_interface__")
                   or (hasattr(v, "__dlpack_device__") and _dlpack_on_cuda(v)) for v in data.values())
    return False


def _dlpack_on_cuda(v: Any) -> bool:
    try:
        return bool(v.__dlpack_device__()[0] in (2, 3, 13))  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged
    except Exception:
        return False


HEADS_UP_WINDOW_NS = 1_000_000
"""How long a heads-up stays pending (SPEC.md §6.1): a publish later than this rings afresh."""


class Producer:
    """One producer on a ring. Not thread-safe: use one per thread."""

    def __init__(self, seg: Segment, arena_size: int = 0, extra_roles: int = 0) -> None:
        self._seg = seg
        self._closed = False
        self.index, self.generation = seg.attach(L.ROLE_PRODUCER | extra_roles)
        self._pool = ArenaPool(seg, self.index, self.generation, arena_size)
        self._templates = HostTemplates(self._pool)
        self._in_flight: dict[int, tuple[list[Allocation], object, Callable[[], None] | None]] = {}  # by slot, oldest first
        self._reaps_since_full = 0
        self._next_id = 1
        self._channel: DescriptorChannel | None = None
        self._bell: Bell | None = None  # made by the first asyncio wait
        self._heads_up: int | None = None  # whom heads_up() reached, for the next publish
        self._heads_up_ns = 0  # time.monotonic_ns() when it did
        sweep(seg)  # frames a crashed predecessor left behind

    @classmethod
    def open(cls, name: str, *, arena_size: int = 0, timeout: float = 1.0,
             any_owner: bool = False, extra_roles: int = 0) -> "Producer":
        """``any_owner`` joins a ring another user created (refused by default: SEGMENT_OWNER).
        ``arena_size``: bytes per shared-memory arena; 0, the first is 1 MiB and each next
        one doubles, up to 64 MiB (an arena /dev/shm cannot hold is cut to the allocation's size). ``extra_roles``: ``layout.ROLE_BRIDGE`` marks a
        bridge end for ``inspect``."""
        if isinstance(arena_size, bool) or not isinstance(arena_size, numbers.Integral) or arena_size < 0:
            raise GpuringError("INVALID_ARGUMENT", f"arena_size must be a whole number of bytes >= 0, not {arena_size!r}")
        return cls(Segment.open(name, timeout, any_owner), arena_size, extra_roles)

    @property
    def in_flight(self) -> int:
        """Frames published and not yet reclaimed."""
        return len(self._in_flight)

    def publish(self, data: object, *, timeout: float | None = None, block: bool = True, user_tag: int = 0,
                device: int | None = None, stream: object = None) -> int:
        """Publishes one frame and returns its id.

        ``data``: a pyarrow Table or RecordBatch, or a dict of pyarrow arrays
        (host columns, copied into shared memory); or a dict of device arrays:
        objects with ``__cuda_array_interface__`` (CuPy, numba, PyTorch) or
        ``__dlpack__``, or ``gpuring.DeviceColumn`` (cuDF-style data, null
        mask, offsets). ``stream``: the CUDA stream the device data was written
        on (``__cuda_array_interface__['stream']`` is used when present); the
        consumer waits on an event recorded there.

        Waits for a free slot, and for shared memory (see the module's Memory
        rule), up to ``timeout`` seconds (None: forever); when ``block`` is
        False it raises RING_FULL (NO_SPACE) at once instead.
        """
        self._check_open()
        deadline = deadline_after(timeout)
        body, allocs, keep, description = self._encode(data, device, stream, lambda n: self._alloc(n, deadline, block))
        return self._publish(body, allocs, keep, deadline, block, user_tag, description)

    async def publish_async(self, data: object, *, timeout: float | None = None, user_tag: int = 0,
                            device: int | None = None, stream: object = None) -> int:
        """``publish`` for asyncio: where ``publish`` would block (a full ring,
        shared memory short while frames are in flight), the event loop sleeps
        on this producer's doorbell (SPEC.md §6.1) until releases come, so
        other tasks run meanwhile. The frame is encoded and copied once. TIMEOUT
        after ``timeout`` seconds (None: no limit); a task cancelled while it
        waits publishes nothing. One task at a time."""
        self._check_open()
        return await self._publish_async(lambda: self._encode(data, device, stream, lambda n: self._alloc(n, None, False)),
                                         user_tag, deadline_after(timeout))

    async def _publish_async(self, encode: Callable[[], Encoded], user_tag: int, deadline: float | None) -> int:
        """``publish_async`` of the frame ``encode`` makes (made again if shared
        memory was short: it allocates nothing it does not return)."""
        while True:
            try:
                body, allocs, keep, description = encode()
                ref, attempt = self._stage(body, allocs, None, False, user_tag, description)
                break
            except GpuringError as e:
                if e.code not in MEMORY_SHORT or not self._in_flight:
                    raise
                short = e
            try:
                await wait_async(self._seg, self._doorbell(), "space", lambda: self.reap() or None, _left(deadline))
            except GpuringError as e:
                if e.code != "TIMEOUT":
                    raise
                raise _short_at_timeout(short, len(self._in_flight)) from None
        try:
            pos = await wait_async(self._seg, self._doorbell(), "space", attempt, _left(deadline))
        except BaseException:
            self._free(allocs)
            raise
        return self._enqueue(pos, ref.frame_id, allocs, keep)

    def heads_up(self) -> bool:
        """Wakes a consumer asleep on its doorbell now, for the frame this producer
        publishes next (SPEC.md §6.1, heads-up): call it as you start making a frame
        that takes about a wake-up's time to make (tens of µs on an idle machine:
        a GPU kernel, a cuDF step), so that the consumer's wake-up overlaps that
        work instead of following the publish. On a work-queue ring it wakes at
        most one sleeper, on a broadcast ring every one. The next publish passes on
        whom it reached (rings that consumer again only if it slept again meanwhile,
        nobody else) if it comes within 1 ms, and rings afresh after that, so
        nothing is lost or delayed: a consumer that woke and found nothing sleeps
        again and is rung again. A call while one that reached a sleeper less than
        1 ms ago is pending rings nobody new. Returns whether it reached a sleeper
        (False when nobody sleeps: no system call then). Parity with C
        ``gpr_producer_heads_up`` and Node ``Producer.headsUp()``."""
        self._check_open()
        if self._pending_heads_up() is None:
            self._heads_up = doorbell.heads_up(self._seg)
            self._heads_up_ns = time.monotonic_ns()
        return self._heads_up is not None

    def _pending_heads_up(self) -> int | None:
        """Whom the last heads-up reached, if less than 1 ms ago: passed on later, it
        would ring nobody but a consumer that may by then be busy with another
        producer's frame while others sleep (gpr_producer_heads_up alike)."""
        if self._heads_up is None or time.monotonic_ns() - self._heads_up_ns >= HEADS_UP_WINDOW_NS:
            return None
        return self._heads_up

    def prepare(self, data: object, *, stream: object = None) -> PreparedFrame:
        """Device columns (a dict of name: array, as ``publish`` takes them)
        described and encoded once, to publish again and again with
        ``PreparedFrame.publish``: for arrays that stay where they are from frame
        to frame (see gpuring.prepared_frame for the ownership and ordering rules).
        Host columns cannot be prepared: each frame of them is a copy."""
        self._check_open()
        if not _is_device(data):
            raise GpuringError("INVALID_ARGUMENT", "prepare() takes device columns (CuPy, PyTorch, DLPack on CUDA, "
                               "DeviceColumn); host columns are copied at every publish")
        from .device_columns import layout_device
        from .prepared_frame import PreparedFrame
        return PreparedFrame(self, layout_device(data, stream))

    def _encode(self, data: object, device: int | None, stream: object, alloc: Callable[[int], Allocation]) -> Encoded:
        """``data``'s body, the allocations its host columns were copied into
        (``alloc``), what device data to keep alive, and its description where
        it names device memory."""
        if device is not None or _is_device(data):
            from .device_columns import describe_device
            description, keep = describe_device(data, stream)
            return encode_frame(description), [], keep, description
        body, columns = self._templates.body(data, alloc)
        return body, [columns], None, None

    def publish_description(self, description: FrameDescription, *, keep_alive: object = None,
                            timeout: float | None = None, block: bool = True, user_tag: int = 0,
                            space: list[HostSpace] | None = None, on_reclaim: Callable[[], None] | None = None,
                            body: bytes | None = None) -> int:
        """Publishes a description you built; ``keep_alive`` is held until release.
        ``body``: the description already encoded (codec.with_buffers), which
        saves encoding it again; it must encode ``description``.
        ``space``: the ``host_space`` its host buffers lie in, freed when the frame
        is reclaimed; if the publish fails (RING_FULL, TIMEOUT) it stays yours, to
        publish again or ``free_space``. ``on_reclaim`` runs when
        the frame is reclaimed after its release (in ``publish``, ``reap`` or ``drain``)."""
        self._check_open()
        deadline = deadline_after(timeout)
        return self._publish(body or encode_frame(description), [], keep_alive, deadline, block, user_tag, description,
                             on_reclaim, [s.allocation for s in space or []])

    def host_space(self, nbytes: int) -> HostSpace:
        """``nbytes`` of this producer's shared memory, to fill in place (a bridge
        receives buffers from the network straight into it) and then publish
        with ``publish_description(space=[...])``; free it with ``free_space``
        if it is not published. It does not wait: NO_SPACE when shared memory
        is short even after reclaiming the released frames."""
        self._check_open()
        if isinstance(nbytes, bool) or not isinstance(nbytes, numbers.Integral) or not 0 <= nbytes <= L.MAX_COUNT:
            raise GpuringError("INVALID_ARGUMENT", f"host_space() takes a whole number of bytes >= 0, not {nbytes!r}")
        alloc = self._alloc(max(nbytes, 1), None, block=False)
        mem = self._pool.memory(alloc)
        return HostSpace(alloc, self._pool.name(alloc.arena), mem.view[alloc.offset:alloc.offset + nbytes])

    def free_space(self, space: HostSpace) -> None:
        """Gives back ``host_space`` that was not published."""
        self._pool.free(space.allocation)

    def _alloc(self, nbytes: int, deadline: float | None, block: bool) -> Allocation:
        """Arena memory; when shared memory is short, see ``_alloc_when_short``."""
        try:
            return self._pool.alloc(nbytes)
        except GpuringError as e:
            if e.code not in MEMORY_SHORT:
                raise
        return self._alloc_when_short(nbytes, deadline, block)

    def _alloc_when_short(self, nbytes: int, deadline: float | None, block: bool) -> Allocation:
        """The released frames are reclaimed first, and a blocking call waits
        until ``deadline`` (None: forever) for frames in flight to come back
        (the module's Memory rule)."""
        short: list[GpuringError] = []

        def attempt() -> Allocation | None:
            try:
                return self._pool.alloc(nbytes)
            except GpuringError as e:
                if e.code not in MEMORY_SHORT:
                    raise
                if self.reap():
                    return attempt()
                if not block or not self._in_flight:
                    raise
                short.append(e)
                return None

        try:
            return ring.wait_for(self._seg, "space", attempt, _left(deadline))
        except GpuringError as e:
            if e.code != "TIMEOUT" or not short:
                raise
            raise _short_at_timeout(short[-1], len(self._in_flight)) from None

    def _publish(self, body: bytes, allocs: list[Allocation], keep: object, deadline: float | None,
                 block: bool, user_tag: int, description: FrameDescription | None = None,
                 on_reclaim: Callable[[], None] | None = None, lent: list[Allocation] | None = None) -> int:
        """Publishes an encoded ``body``; ``description`` is given where it may name
        device memory. ``allocs`` are freed if the publish fails, ``lent`` stay the
        caller's then; both are freed when the frame is reclaimed."""
        ref, attempt = self._stage(body, allocs, deadline, block, user_tag, description)
        pos: int | None
        try:
            if block:
                pos = ring.wait_for(self._seg, "space", attempt, _left(deadline))
            else:
                pos = ring.try_sweeping(self._seg, attempt)
            if pos is None:
                raise GpuringError("RING_FULL", ring.describe_full(self._seg))
        except BaseException:
            self._free(allocs)
            raise
        return self._enqueue(pos, ref.frame_id, allocs + (lent or []), keep, on_reclaim)

    def _stage(self, body: bytes, allocs: list[Allocation], deadline: float | None, block: bool, user_tag: int,
               description: FrameDescription | None) -> tuple[ring.FrameRef, Callable[[], int | None]]:
        """Writes ``body`` into this producer's shared memory (appending its
        allocation to ``allocs``): the frame's reference, and one attempt to
        publish it (its position, or None when the ring is full). ``allocs``
        are freed if this fails."""
        if (self._channel is None and description is not None
                and any(b.kind in ("cuda-pool", "cuda-vmm") for b in description.buffers())):
            # Consumers fetch the pool's descriptor here (SPEC.md §9c).
            from .pool_memory import DescriptorChannel, attached_pids
            self._channel = DescriptorChannel(self._seg, self.index, self.generation, attached_pids(self._seg))
        try:
            if isinstance(user_tag, bool) or not isinstance(user_tag, numbers.Integral) or not 0 <= user_tag < 1 << 64:
                raise GpuringError("INVALID_ARGUMENT", f"user_tag must be an integer in [0, 2**64), not {user_tag!r}")
            body_alloc = self._alloc(len(body), deadline, block)
            allocs.append(body_alloc)
            self._pool.memory(body_alloc).write(body_alloc.offset, body)
        except BaseException:
            self._free(allocs)
            raise
        ref = ring.FrameRef(self._next_id, self.index, self.generation, body_alloc.arena, len(body),
                            body_alloc.offset, user_tag)

        def attempt() -> int | None:
            self._reap_oldest()
            # The heads-up counts for the first try only: a frame that waits for space is notified as any other.
            rung = self._pending_heads_up()
            self._heads_up = None
            pos = ring.try_publish(self._seg, self.index, ref, rung)
            # A broadcast ring may just have dropped its oldest frame for slow
            # subscribers (SPEC.md §5.4): if it was ours, reaping frees the slot now.
            # (A work queue's next slot is its oldest frame's, which _reap_oldest took.)
            if pos is None and self._seg.broadcast and self.reap():
                pos = ring.try_publish(self._seg, self.index, ref)
            return pos

        return ref, attempt

    def _enqueue(self, pos: int, frame_id: int, allocs: list[Allocation], keep: object,
                 on_reclaim: Callable[[], None] | None = None) -> int:
        """The frame published at ``pos`` is in flight until its release is reaped."""
        self._next_id += 1
        self._in_flight[pos] = (allocs, keep, on_reclaim)
        return frame_id

    def _free(self, allocs: list[Allocation]) -> None:
        for a in allocs:
            self._pool.free(a)

    def reap(self) -> int:
        """Reclaims the memory of released frames; returns how many."""
        return self._reap(full=True)

    def _reap_oldest(self) -> int:
        self._reaps_since_full += 1
        full = self._reaps_since_full >= FULL_REAP_EVERY
        if full:
            self._reaps_since_full = 0
        return self._reap(full)

    def _reap(self, full: bool) -> int:
        """Reclaims released frames: all of them, or the oldest up to the first still out."""
        done = []
        for pos in self._in_flight:
            if ring.reap(self._seg, self.index, pos):
                done.append(pos)
            elif not full:
                break
        for pos in done:
            allocs, _, on_reclaim = self._in_flight.pop(pos)
            for a in allocs:
                self._pool.free(a)
            if on_reclaim is not None:
                on_reclaim()
        if full:
            self._pool.restore_headers()
        return len(done)

    def drain(self, timeout: float | None = None) -> None:
        """Waits until every published frame was released (TIMEOUT otherwise)."""
        self._check_open()
        ring.wait_for(self._seg, "space", self._drained, timeout)

    async def drain_async(self, timeout: float | None = None) -> None:
        """``drain`` for asyncio: the event loop sleeps on this producer's doorbell
        until the releases come (TIMEOUT after ``timeout`` seconds)."""
        self._check_open()
        await wait_async(self._seg, self._doorbell(), "space", self._drained, timeout)

    def _drained(self) -> bool | None:
        """True once every frame in flight was released and reclaimed, else None."""
        self.reap()
        return None if self._in_flight else True

    def _doorbell(self) -> Bell:
        if self._bell is None:
            self._bell = Bell(self._seg, self.index)
        return self._bell

    @property
    def subscribers(self) -> int:
        """The subscribers of a broadcast ring now: the consumers a frame
        published now goes to (a killed one counts until the next sweep).
        INVALID_ARGUMENT on a work-queue ring, which has consumers instead."""
        self._check_open()
        if not self._seg.broadcast:
            raise GpuringError("INVALID_ARGUMENT", "this ring is a work queue: it has consumers, not subscribers")
        return broadcast.subscriber_count(self._seg)

    def wait_for_subscribers(self, count: int, timeout: float | None = None) -> None:
        """Waits (checking every millisecond) until a broadcast ring has at
        least ``count`` subscribers. A frame goes only to the subscribers
        attached when it is published, and straight back to the producer when
        there are none. TIMEOUT after ``timeout`` seconds (None: no limit)."""
        deadline = deadline_after(timeout)
        while self.subscribers < count:
            if deadline is not None and time.monotonic() >= deadline:
                raise GpuringError("TIMEOUT", f"{self.subscribers} of {count} subscribers after {timeout} s")
            time.sleep(0.001)

    def _check_open(self) -> None:
        if self._closed:
            raise GpuringError("CLOSED", "the producer is closed")

    def close(self) -> None:
        """Leaves the ring. Frames still queued stay deliverable (their host
        arenas outlive us); device frames become unreadable once our process ends.
        After DETACHED (this producer lost its entry, SPEC.md §4) it succeeds too,
        and unlinks our arenas at once, as no one else knows them."""
        if self._closed:
            return
        seg, self._closed = self._seg, True
        if self._channel is not None:
            self._channel.close()
        if not detach(seg, self.index, self.generation):  # clears the doorbell bits first
            self._pool.unlink()  # our entry was taken: nobody else will unlink our arenas
        if self._bell is not None:
            self._bell.close()
        self._pool.close()
        seg.close()

    def __enter__(self) -> "Producer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _left(deadline: float | None) -> float | None:
    """Seconds until ``deadline`` (None: no limit), never below 0."""
    return None if deadline is None else max(deadline - time.monotonic(), 0.0)


def _short_at_timeout(short: GpuringError, in_flight: int) -> GpuringError:
    """Shared memory was still short when a wait for releases timed out: its own code, and why."""
    why = str(short).partition(": ")[2]
    return GpuringError(short.code, f"{why}; {in_flight} frames of this producer were still unreleased at the timeout")
