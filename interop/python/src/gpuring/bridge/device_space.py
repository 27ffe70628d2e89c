"""Device memory a sink receives device buffers into, and publishes as
``cuda-ipc`` buffers for the consumers of its ring (SPEC.md §14.3).

Each frame lands in one cuMemAlloc allocation. Allocations come back to a pool
when their frame is reclaimed and serve the next frames of their size: a
consumer that keeps its IPC mappings open (every gpuring consumer does) maps
each of them once, not once per frame.
"""
from __future__ import annotations

import ctypes
from collections import defaultdict
from dataclasses import dataclass

from .. import cuda_driver as cu
from ..description import BufferDescriptor
from ..device_columns import DeviceView

SMALLEST_BYTES = 1 << 16
IDLE_PER_SIZE = 8  # allocations of one size kept for reuse; more are freed


@dataclass(frozen=True)
class DeviceSpace:
    """One allocation: ``view(at, n)`` is what a receive fills,
    ``descriptor(at, n)`` what the published description names."""
    ptr: int
    size: int
    ordinal: int
    uuid: bytes
    allocation_id: int
    handle: bytes

    def view(self, at: int, nbytes: int) -> DeviceView:
        return DeviceView(self.ptr + at, (nbytes,), "|u1", self)

    def descriptor(self, at: int, nbytes: int) -> BufferDescriptor:
        return BufferDescriptor("cuda-ipc", self.ordinal, self.uuid, at, nbytes, self.allocation_id, self.handle)


class DeviceSpacePool:
    """Allocations on device ``ordinal`` in power-of-two sizes; not thread-safe
    (a sink uses it on its event loop, where UCX copies into it too)."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self._uuid = cu.device_uuid(ordinal)
        self._idle: defaultdict[int, list[DeviceSpace]] = defaultdict(list)
        cu.make_current(ordinal)  # UCX copies into these buffers on this thread

    def take(self, nbytes: int) -> DeviceSpace:
        size = max(SMALLEST_BYTES, 1 << (max(nbytes, 1) - 1).bit_length())
        if self._idle[size]:
            return self._idle[size].pop()
        with cu.primary_context(self.ordinal):
            ptr = cu.mem_alloc(size)
            allocation_id = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64)
            handle = cu.ipc_mem_handle(ptr)
        return DeviceSpace(ptr, size, self.ordinal, self._uuid, allocation_id, handle)

    def give_back(self, space: DeviceSpace) -> None:
        idle = self._idle[space.size]
        if len(idle) < IDLE_PER_SIZE:
            idle.append(space)
            return
        with cu.primary_context(self.ordinal):
            cu.mem_free(space.ptr)
