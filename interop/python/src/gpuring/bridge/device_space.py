"""The memory device buffers cross a bridge through (SPEC.md §14.3): page-locked
host memory on both ends, and on the sink the device allocations it publishes
as ``cuda-ipc`` buffers for the consumers of its ring.

Device buffers are staged, not handed to UCX as device memory: over TCP, UCX's
own cuda_copy path moved about 300 MB/s on an H100 host where copies through
page-locked memory and TCP move gigabytes (bench:remote --device, README).

Allocations come back to their pool when done and serve the next frames of
their size; a consumer keeps its IPC mappings open, so it maps each device
allocation of a sink once, not once per frame.
"""
from __future__ import annotations

import ctypes
from collections import defaultdict
from dataclasses import dataclass
from typing import Generic, TypeVar

from .. import cuda_driver as cu
from ..description import BufferDescriptor

SMALLEST_BYTES = 1 << 16
# Idle allocations kept for reuse, per pool: enough for a window of frames in flight (64 to 128 frames of
# 1 MiB, 16 of 16 MiB). With fewer, a bridge at full speed freed and made page-locked and device memory for
# nearly every frame, and both are slow (cuMemFreeHost, cuMemFree wait for the device).
IDLE_BYTES = 256 << 20
IDLE_AT_LEAST = 2  # per size, however large


@dataclass(frozen=True)
class PinnedSpace:
    """Page-locked host memory: ``view(at, n)`` is what a send reads or a receive fills."""
    ptr: int
    size: int

    def view(self, at: int, nbytes: int) -> memoryview:
        return memoryview((ctypes.c_char * nbytes).from_address(self.ptr + at)).cast("B")


@dataclass(frozen=True)
class DeviceSpace:
    """One device allocation; ``descriptor(at, n)`` names bytes of it in a published description."""
    ptr: int
    size: int
    ordinal: int
    uuid: bytes
    allocation_id: int
    handle: bytes

    def descriptor(self, at: int, nbytes: int) -> BufferDescriptor:
        return BufferDescriptor("cuda-ipc", self.ordinal, self.uuid, at, nbytes, self.allocation_id, self.handle)


Space = TypeVar("Space", PinnedSpace, DeviceSpace)


class _SizedPool(Generic[Space]):
    """Allocations in power-of-two sizes, kept for reuse. Not thread-safe: a
    bridge uses its pools on its event loop."""

    def __init__(self, ordinal: int) -> None:
        self.ordinal = ordinal
        self._idle: defaultdict[int, list[Space]] = defaultdict(list)
        self._idle_bytes = 0
        self.in_use = 0  # bytes taken and not given back

    def take(self, nbytes: int) -> Space:
        size = max(SMALLEST_BYTES, 1 << (max(nbytes, 1) - 1).bit_length())
        self.in_use += size
        if self._idle[size]:
            self._idle_bytes -= size
            return self._idle[size].pop()
        try:
            with cu.primary_context(self.ordinal):
                return self._allocate(size)
        except BaseException:
            self.in_use -= size
            raise

    def give_back(self, space: Space) -> None:
        self.in_use -= space.size
        idle = self._idle[space.size]
        if len(idle) < IDLE_AT_LEAST or self._idle_bytes + space.size <= IDLE_BYTES:
            idle.append(space)
            self._idle_bytes += space.size
            return
        with cu.primary_context(self.ordinal):
            self._free(space)

    def _allocate(self, size: int) -> Space:
        raise NotImplementedError

    def _free(self, space: Space) -> None:
        raise NotImplementedError


class PinnedPool(_SizedPool[PinnedSpace]):
    def _allocate(self, size: int) -> PinnedSpace:
        return PinnedSpace(cu.host_alloc(size), size)

    def _free(self, space: PinnedSpace) -> None:
        cu.host_free(space.ptr)


class DevicePool(_SizedPool[DeviceSpace]):
    def __init__(self, ordinal: int) -> None:
        super().__init__(ordinal)
        self._uuid = cu.device_uuid(ordinal)

    def _allocate(self, size: int) -> DeviceSpace:
        ptr = cu.mem_alloc(size)
        allocation_id = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64)
        return DeviceSpace(ptr, size, self.ordinal, self._uuid, allocation_id, cu.ipc_mem_handle(ptr))

    def _free(self, space: DeviceSpace) -> None:
        cu.mem_free(space.ptr)
