"""A frame a consumer holds: its description and its lease.

Ownership: the lease on the ring slot is held from ``Consumer.next()`` until
``release()`` (or the end of a ``with`` block) **and** until every array built
from the frame (``to_arrow``, ``to_cupy``, ``to_torch``) is gone, whichever is
later. Only then does the slot go back to its producer, which may then reuse
the memory. Releasing early is always safe; arrays never dangle.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from . import cuda_driver as cu
from .description import DEVICE_KINDS, FrameDescription
from .errors import GpuringError

if TYPE_CHECKING:
    from .body_shapes import Shape
    from .consumer import Consumer


class Lease:
    """Ends the lease when the last reference to it goes (frame or arrays),
    then runs what was registered with on_end (dropping mapping references)."""

    def __init__(self, end: Callable[[], None]) -> None:
        self._end: Callable[[], None] | None = end
        self._before: list[Callable[[], None]] = []
        self._after: list[Callable[[], None]] = []

    def before_end(self, fn: Callable[[], None]) -> None:
        """Runs ``fn`` before the release (pool imports are freed then, SPEC.md §9b)."""
        self._before.append(fn)

    def on_end(self, fn: Callable[[], None]) -> None:
        self._after.append(fn)

    def __del__(self) -> None:
        for fn in self._before:
            fn()
        end, self._end = self._end, None
        if end is not None:
            end()
        for fn in self._after:
            fn()


class Frame:
    """One record batch taken from a ring (``Consumer.next()``): ``description``
    says what it carries, ``frame_id`` and ``user_tag`` identify it. Read it with
    ``to_arrow()``, ``to_cupy()`` or ``to_torch()``; release it when done (see
    the module's ownership rules)."""

    def __init__(self, consumer: Consumer, description: FrameDescription, frame_id: int, user_tag: int, lease: Lease,
                 producer: tuple[int, int] = (0, 0), shape: Shape | None = None, body: bytes = b"") -> None:
        self.description = description
        self.frame_id = frame_id
        self.user_tag = user_tag
        self.producer = producer
        """(participant index, generation) of the producer that published the frame."""
        self._consumer = consumer
        self._lease: Lease | None = lease
        self._shape = shape
        self._body = body  # the validated private copy it was described from (a bridge forwards it)

    @property
    def row_count(self) -> int:
        """Rows in the frame."""
        return self.description.row_count

    @property
    def column_names(self) -> list[str]:
        """The top-level column names, in order."""
        return [c.name for c in self.description.columns]

    @property
    def on_device(self) -> bool:
        """Whether any buffer of the frame is CUDA device memory."""
        return any(b.kind in DEVICE_KINDS for b in self.description.buffers())

    def _held(self) -> Lease:
        if self._lease is None:
            raise GpuringError("FRAME_STATE", "the frame was released")
        return self._lease

    def to_arrow(self) -> Any:
        """The frame as a pyarrow RecordBatch, zero-copy over the producer's
        shared memory (host frames). Device frames: use to_cupy or to_torch."""
        lease = self._held()
        if self.on_device:
            raise GpuringError("UNSUPPORTED", "this frame holds device columns; use to_cupy() or to_torch()")
        return self._consumer._record_batch(self.description, lease, self._shape)

    def to_cupy(self) -> dict[str, Any]:
        """Device frame columns as CuPy arrays, mapped from the producer's device memory."""
        from .device_columns import to_cupy
        return to_cupy(self, self._held())

    def to_torch(self) -> dict[str, Any]:
        """Device frame columns as torch tensors (through __cuda_array_interface__)."""
        from .device_columns import to_torch
        return to_torch(self, self._held())

    def release(self, stream: object = None) -> None:
        """Gives the frame back. Arrays built from it keep the lease until they go.

        With ``stream`` (a CuPy or PyTorch stream, or a CUstream as an int; 0
        for the legacy default stream), the lease also lasts until that stream
        completes the work queued on it so far: release right after queueing
        GPU work that reads the frame, without waiting for it. ``close()``
        waits for such releases."""
        if stream is None or self._lease is None:
            self._lease = None
            return
        handle = cu.stream_handle(stream)
        device = next((b.device_uuid for b in self.description.buffers() if b.kind in DEVICE_KINDS), None)
        self._consumer._release_after(0 if device is None else cu.ordinal_of_uuid(device), handle, self._lease)
        self._lease = None

    def __enter__(self) -> "Frame":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
