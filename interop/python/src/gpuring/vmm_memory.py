"""VMM memory across processes (SPEC.md §9d): allocations of the virtual
memory management API (``cuMemCreate``) that a producer maps side by side,
as PyTorch's expandable segments do.

Producer side: a buffer is described as a span, the chunks that cover it in
address order, each exported as a file descriptor kept until the frame is
reclaimed; its descriptor channel hands them out (kind 4). Consumer side: the
chunks are mapped side by side into an address range of the span's size, once
per frame holding them, and unmapped before the lease ends.
"""
from __future__ import annotations

import ctypes
import os
import threading
from typing import TYPE_CHECKING

from . import cuda_driver as cu
from .errors import GpuringError
from .pool_memory import KIND_VMM, MAX_FDS, fetch_descriptors

if TYPE_CHECKING:
    from .description import BufferDescriptor
    from .frame import Lease

_POSIX_FD = 1


class _AccessDesc(ctypes.Structure):
    """CUmemAccessDesc: read-write access for one device."""
    _fields_ = [("location_type", ctypes.c_int), ("location_id", ctypes.c_int), ("flags", ctypes.c_int)]


def is_vmm(ptr: int) -> bool:
    """Whether ``ptr`` lies in memory of the virtual memory management API."""
    handle = ctypes.c_uint64()
    if cu.driver().cuMemRetainAllocationHandle(ctypes.byref(handle), ctypes.c_void_p(ptr)) != 0:
        return False
    cu.call("cuMemRelease", handle)
    return True


def _chunk(address: int) -> tuple[int, int, int]:
    """(base, size, exported descriptor) of the chunk mapped at ``address``."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    cu.call("cuMemGetAddressRange_v2", ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(address))
    handle = ctypes.c_uint64()
    cu.call("cuMemRetainAllocationHandle", ctypes.byref(handle), ctypes.c_void_p(address))
    fd = ctypes.c_int(-1)
    rc = cu.driver().cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD, ctypes.c_ulonglong(0))
    cu.call("cuMemRelease", handle)
    if rc != 0:
        raise GpuringError("NOT_EXPORTABLE", "a virtual memory management allocation made without the POSIX "
                           f"file-descriptor handle type cannot be shared (CUDA {rc}); PyTorch's expandable "
                           "segments have it")
    return int(base.value), int(size.value), fd.value


class _Spans:
    """This process's exported spans: number -> (descriptors, sizes)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: dict[int, tuple[list[int], list[int]]] = {}
        self.next_id = 1

    def export(self, ptr: int, size: int) -> tuple[int, int, int, int]:
        """(span number, span base, span bytes, chunk count) of the chunks covering [ptr, ptr + size)."""
        fds: list[int] = []
        sizes: list[int] = []
        start = address = ptr
        try:
            while not fds or address < ptr + size:
                base, length, fd = _chunk(address)
                fds.append(fd)
                sizes.append(length)
                start = base if len(fds) == 1 else start
                address = base + length
                if len(fds) > MAX_FDS:
                    raise GpuringError("NOT_EXPORTABLE", f"a buffer spanning more than {MAX_FDS} VMM chunks")
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
        with self.lock:
            span = self.next_id
            self.next_id += 1
            self.spans[span] = (fds, sizes)
        return span, start, sum(sizes), len(fds)

    def get(self, span: int) -> tuple[list[int], list[int]] | None:
        with self.lock:
            return self.spans.get(span)

    def release(self, span: int) -> None:
        with self.lock:
            fds, _ = self.spans.pop(span, ([], []))
        for fd in fds:
            os.close(fd)


SPANS = _Spans()


def span_handle(span_bytes: int, chunks: int) -> bytes:
    """The 64-byte handle of a cuda-vmm buffer: span bytes u64, chunk count u32, zeros."""
    return span_bytes.to_bytes(8, "little") + chunks.to_bytes(4, "little") + bytes(52)


class VmmImports:
    """A consumer's mapped spans, by (producer, generation, span), counted by the leases using them."""

    def __init__(self, segment: str) -> None:
        self._segment = segment
        self._spans: dict[tuple[int, int, int], tuple[int, int, int, int]] = {}  # -> (base, bytes, ordinal, refs)
        self._lock = threading.Lock()  # leases end on any thread

    def map(self, b: BufferDescriptor, producer: tuple[int, int], lease: Lease) -> tuple[int, int]:
        """(address, bytes) of the span buffer ``b`` names, mapped until ``lease`` ends."""
        key = (producer[0], producer[1], b.allocation_id)
        ordinal = cu.ordinal_of_uuid(b.device_uuid)
        with self._lock, cu.primary_context(ordinal):
            hit = self._spans.get(key)
            if hit is None:
                hit = (*self._map_span(b, producer, ordinal), ordinal, 0)
            self._spans[key] = (hit[0], hit[1], ordinal, hit[3] + 1)
        lease.before_end(lambda: self._unref(key))
        return hit[0], hit[1]

    def _map_span(self, b: BufferDescriptor, producer: tuple[int, int], ordinal: int) -> tuple[int, int]:
        declared, chunks = int.from_bytes(b.handle[:8], "little"), int.from_bytes(b.handle[8:12], "little")
        fds, sizes = fetch_descriptors(self._segment, producer[0], producer[1], KIND_VMM, b.allocation_id)
        total = sum(sizes)
        base = ctypes.c_uint64()
        mapped = 0
        try:
            if len(fds) != chunks or total != declared:
                raise GpuringError("DESCRIPTOR_UNAVAILABLE", f"span {b.allocation_id}: {len(fds)} chunks of {total} "
                                   f"bytes, not the frame's {chunks} of {declared}")
            cu.call("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(total), ctypes.c_size_t(0),
                    ctypes.c_uint64(0), ctypes.c_ulonglong(0))
            for fd, size in zip(fds, sizes):
                handle = ctypes.c_uint64()
                cu.call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _POSIX_FD)
                try:
                    cu.call("cuMemMap", ctypes.c_uint64(base.value + mapped), ctypes.c_size_t(size), ctypes.c_size_t(0),
                            handle, ctypes.c_ulonglong(0))
                finally:
                    cu.call("cuMemRelease", handle)  # the mapping holds the allocation
                mapped += size
            access = _AccessDesc(1, ordinal, 3)  # a device, read-write
            cu.call("cuMemSetAccess", ctypes.c_uint64(base.value), ctypes.c_size_t(total), ctypes.byref(access),
                    ctypes.c_size_t(1))
        except BaseException:
            _unmap(base.value, mapped, total)
            raise
        finally:
            for fd in fds:
                os.close(fd)
        return base.value, total

    def _unref(self, key: tuple[int, int, int]) -> None:
        with self._lock:
            base, size, ordinal, refs = self._spans[key]
            if refs > 1:
                self._spans[key] = (base, size, ordinal, refs - 1)
                return
            del self._spans[key]
        with cu.primary_context(ordinal):
            _unmap(base, size, size)


def _unmap(base: int, mapped: int, reserved: int) -> None:
    if mapped:
        cu.driver().cuMemUnmap(ctypes.c_uint64(base), ctypes.c_size_t(mapped))
    if base:
        cu.driver().cuMemAddressFree(ctypes.c_uint64(base), ctypes.c_size_t(reserved))
