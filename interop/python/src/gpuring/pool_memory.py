"""Stream-ordered pool memory across processes (SPEC.md §9b) and the
descriptor channel that hands pool descriptors to consumers (§9c).

Producer side: a pointer into a pool made with the POSIX file-descriptor
handle type is described as the export data of its allocation plus this
process's number for the pool; each producer that published such memory serves
its channel on a thread, answering attached processes of its own user.

Consumer side: each pool is imported once per process (its descriptor fetched
over the producer's channel); each allocation is imported while frames hold
it and freed before the last of them is released, as CUDA requires importers
to free before the exporter does.
"""
from __future__ import annotations

import ctypes
import os
import socket
import struct
import threading
from typing import TYPE_CHECKING, Callable

from . import cuda_driver as cu
from .errors import GpuringError

if TYPE_CHECKING:
    from .description import BufferDescriptor
    from .frame import Lease
    from .segment import Segment

KIND_POOL = 3
KIND_VMM = 4
MAX_FDS = 253  # descriptors one reply carries (SCM_MAX_FD)
CHANNEL_MAGIC = 0x44525047  # "GPRD"
CHANNEL_TIMEOUT_S = 2.0
FOUND, UNKNOWN, UNSENDABLE = 0, 1, 2
_MESSAGE = struct.Struct("<IHHQ")
_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid
_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_POINTER_ATTRIBUTE_MEMPOOL_HANDLE = 17
_ATTR_RELEASE_THRESHOLD = 4  # CU_MEMPOOL_ATTR_RELEASE_THRESHOLD


class _PoolProps(ctypes.Structure):
    """CUmemPoolProps (88 bytes)."""
    _fields_ = [("alloc_type", ctypes.c_int), ("handle_types", ctypes.c_int), ("location_type", ctypes.c_int),
                ("location_id", ctypes.c_int), ("win32", ctypes.c_void_p), ("max_size", ctypes.c_size_t),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 54)]


def exportable_pool(device: int = 0, make_current: bool = True) -> int:
    """Creates a stream-ordered pool on ``device`` whose memory can be published
    (as cuda-pool) and returns its ``CUmemoryPool`` handle. With
    ``make_current`` (the default) it becomes the device's current pool, so
    ``cudaMallocAsync`` allocates from it: CuPy's ``MemoryAsyncPool`` and
    PyTorch's ``cudaMallocAsync`` backend then hand out publishable memory.
    The device's default pool cannot be exported."""
    props = _PoolProps(alloc_type=1, handle_types=_POSIX_FD, location_type=1, location_id=device)
    pool = ctypes.c_void_p()
    with cu.primary_context(device):
        cu.call("cuMemPoolCreate", ctypes.byref(pool), ctypes.byref(props))
        keep = ctypes.c_uint64(2**64 - 1)  # freed memory stays in the pool (no driver round trip per allocation)
        cu.call("cuMemPoolSetAttribute", pool, _ATTR_RELEASE_THRESHOLD, ctypes.byref(keep))
        if make_current:
            cu.call("cuDeviceSetMemPool", device, pool)
    return int(pool.value or 0)


def pool_of(ptr: int) -> int:
    """The pool ``ptr`` was allocated from, or 0 when it is not pool memory."""
    try:
        return cu.pointer_attribute(ptr, _POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ctypes.c_uint64)
    except GpuringError:
        return 0


class _Exports:
    """This process's exported pools (by handle: number and descriptor) and
    allocations (by base address, as the Node side keeps them: a recycled
    address replaces its entry, so the table stays as small as the pools)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[int, int] = {}
        self.fds: dict[int, int] = {}
        self.bases: dict[int, tuple[int, int, int]] = {}  # base -> (pool id, buffer id, size)

    def pool_id(self, pool: int) -> int:
        with self.lock:
            known = self.ids.get(pool)
            if known is not None:
                return known
            fd = ctypes.c_int(-1)
            rc = cu.driver().cuMemPoolExportToShareableHandle(ctypes.byref(fd), ctypes.c_void_p(pool), _POSIX_FD,
                                                              ctypes.c_ulonglong(0))
            if rc != 0:
                raise GpuringError("NOT_EXPORTABLE", "this memory comes from a stream-ordered pool made without a "
                                   "file-descriptor handle type (cudaMallocAsync's default pool is one); allocate from "
                                   f"gpuring.exportable_pool() or RMM's CudaAsyncMemoryResource(enable_ipc=True) (CUDA {rc})")
            self.ids[pool] = len(self.ids) + 1
            self.fds[self.ids[pool]] = fd.value
            return self.ids[pool]

    def describe(self, ptr: int, pool: int) -> tuple[int, int, int, bytes]:
        """(base, pool id, buffer id, export data) of the allocation holding ``ptr``."""
        pool_id = self.pool_id(pool)
        base = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ctypes.c_uint64)
        size = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_RANGE_SIZE, ctypes.c_uint64)
        alloc_id = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64)
        data = (ctypes.c_ubyte * 64)()
        cu.call("cuMemPoolExportPointer", data, ctypes.c_uint64(base))
        with self.lock:
            self.bases[base] = (pool_id, alloc_id, size)
        return base, pool_id, alloc_id, bytes(data)

    def descriptor(self, pool_id: int) -> int | None:
        with self.lock:
            return self.fds.get(pool_id)

    def own(self, pool_id: int, alloc_id: int) -> tuple[int, int] | None:
        """(base, size) of this process's allocation ``alloc_id`` of pool ``pool_id``, if exported."""
        with self.lock:
            return next(((base, size) for base, (p, a, size) in self.bases.items() if (p, a) == (pool_id, alloc_id)), None)


EXPORTS = _Exports()


def channel_address(segment: str, index: int, gen: int) -> bytes:
    return f"\0gpuring.{segment}.p{index}g{gen}.fd".encode()


def _peer(sock: socket.socket) -> tuple[int, int]:
    pid, uid, _gid = _CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return pid, uid


_serving: set[tuple[str, int, int]] = set()  # this process's producers with a channel


class DescriptorChannel:
    """One producer's channel, served on a daemon thread until close()."""

    def __init__(self, seg: Segment, index: int, gen: int, attached: Callable[[int], bool]) -> None:
        self._key = (seg.name, index, gen)
        self._attached = attached
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._listener.bind(channel_address(*self._key))
            self._listener.listen(64)
        except OSError as e:
            self._listener.close()
            raise GpuringError("SYSTEM", f"the descriptor channel of {seg.name}.p{index}g{gen}: {e}") from e
        _serving.add(self._key)
        self._thread = threading.Thread(target=self._serve, name="gpuring-descriptor-channel", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return  # closed
            with conn:
                try:
                    self._answer(conn)
                except OSError:
                    pass  # the peer went away; the next one is served

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(CHANNEL_TIMEOUT_S)
        pid, uid = _peer(conn)
        if uid != os.geteuid() or not self._attached(pid):
            return
        request = conn.recv(_MESSAGE.size)
        if len(request) != _MESSAGE.size:
            return
        magic, kind, _pad, ident = _MESSAGE.unpack(request)
        fds, sizes = _lookup(kind, ident) if magic == CHANNEL_MAGIC else ([], [])
        if not fds:
            conn.send(_MESSAGE.pack(CHANNEL_MAGIC, 0, 0, UNKNOWN))
        else:
            header = _MESSAGE.pack(CHANNEL_MAGIC, len(fds), 0, FOUND)
            socket.send_fds(conn, [header + struct.pack(f"<{len(sizes)}Q", *sizes)], fds)

    def close(self) -> None:
        _serving.discard(self._key)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        self._thread.join()


def _lookup(kind: int, ident: int) -> tuple[list[int], list[int]]:
    """What the channel hands out for (kind, ident): a pool's descriptor, or a span's chunks and sizes."""
    if kind == KIND_POOL:
        fd = EXPORTS.descriptor(ident)
        return ([fd], []) if fd is not None else ([], [])
    if kind == KIND_VMM:
        from .vmm_memory import SPANS
        return SPANS.get(ident) or ([], [])
    return [], []


def attached_pids(seg: Segment) -> Callable[[int], bool]:
    """Whether a pid is that of an ACTIVE participant of ``seg``."""
    from . import layout as L

    def attached(pid: int) -> bool:
        return any(L.pword_state(seg.participant_word(i)) == L.P_ACTIVE
                   and seg.mem.load32(seg.participant(i, "pid")) == pid for i in range(seg.participant_capacity))
    return attached


def fetch_descriptors(segment: str, index: int, gen: int, kind: int, ident: int) -> tuple[list[int], list[int]]:
    """The descriptors of (kind, ident) from producer (index, gen)'s channel, and
    for kind 4 the chunk sizes: one descriptor of a pool, or one per chunk of a span."""
    where = f"{segment}.p{index}g{gen}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as s:
        s.settimeout(CHANNEL_TIMEOUT_S)
        try:
            s.connect(channel_address(segment, index, gen))
        except OSError:
            raise GpuringError("DESCRIPTOR_UNAVAILABLE", f"{where}: the producer's descriptor channel is not there "
                               "(the producer exited)") from None
        if _peer(s)[1] != os.geteuid():
            raise GpuringError("DESCRIPTOR_UNAVAILABLE", f"{where}: the descriptor channel belongs to another user")
        try:
            s.send(_MESSAGE.pack(CHANNEL_MAGIC, kind, 0, ident))
            reply, fds, _flags, _addr = socket.recv_fds(s, _MESSAGE.size + 8 * MAX_FDS, MAX_FDS)
        except OSError:
            raise GpuringError("DESCRIPTOR_UNAVAILABLE", f"{where}: the producer did not answer") from None
    magic, count, _pad, status = _MESSAGE.unpack(reply[:_MESSAGE.size]) if len(reply) >= _MESSAGE.size else (0, 0, 0, 0)
    sizes_bytes = 8 * count if kind == KIND_VMM else 0
    if magic != CHANNEL_MAGIC or status != FOUND or count == 0 or len(fds) != count \
            or len(reply) != _MESSAGE.size + sizes_bytes or (kind != KIND_VMM and count != 1):
        for fd in fds:
            os.close(fd)
        raise GpuringError("DESCRIPTOR_UNAVAILABLE", f"{where}: the producer does not hand over kind {kind} id {ident}")
    sizes = list(struct.unpack_from(f"<{count}Q", reply, _MESSAGE.size)) if sizes_bytes else []
    return fds, sizes


class PoolImports:
    """A consumer's imported pools and allocations (see the module doc)."""

    def __init__(self, segment: str) -> None:
        self._segment = segment
        self._pools: dict[tuple[int, int, int], tuple[ctypes.c_void_p, int]] = {}  # -> (pool, ordinal)
        self._imports: dict[tuple[int, int, int, int], tuple[int, int, int]] = {}  # -> (ptr, size, refs)
        self._ordinals: dict[tuple[int, int, int, int], int] = {}
        self._lock = threading.Lock()  # leases end on any thread

    def _pool(self, key: tuple[int, int, int], ordinal: int) -> ctypes.c_void_p:
        known = self._pools.get(key)
        if known is not None:
            return known[0]
        fd = fetch_descriptors(self._segment, key[0], key[1], KIND_POOL, key[2])[0][0]
        pool = ctypes.c_void_p()
        try:
            cu.call("cuMemPoolImportFromShareableHandle", ctypes.byref(pool), ctypes.c_void_p(fd), _POSIX_FD,
                    ctypes.c_ulonglong(0))
        finally:
            os.close(fd)
        self._pools[key] = (pool, ordinal)
        return pool

    def close(self, live: Callable[[tuple[int, int]], bool] = lambda _: False) -> None:
        """Destroys the imported pools no frame still holds an allocation of,
        except those of producers ``live`` keeps (at close: none): an imported
        pool keeps its exporter's pool memory allocated (a dead producer's too)
        for as long as it exists."""
        with self._lock:
            kept = {key[:3] for key in self._imports} | {key for key in self._pools if live(key[:2])}
            pools = [p for key, p in self._pools.items() if key not in kept]
            self._pools = {key: p for key, p in self._pools.items() if key in kept}
        for pool, ordinal in pools:
            with cu.primary_context(ordinal):
                cu.call("cuMemPoolDestroy", pool)

    def map(self, b: BufferDescriptor, producer: tuple[int, int], lease: Lease) -> tuple[int, int]:
        """(address, allocation size) of the buffer's allocation here, held until ``lease`` ends."""
        own = EXPORTS.own(b.pool_id, b.allocation_id) if (self._segment, *producer) in _serving else None
        if own is not None:
            return own  # this process's memory: CUDA imports pools into other processes only
        if (self._segment, *producer) in _serving:
            raise GpuringError("DESCRIPTOR_UNAVAILABLE", "this process's producer exported no such pool allocation")
        key = (producer[0], producer[1], b.pool_id, b.allocation_id)
        ordinal = cu.ordinal_of_uuid(b.device_uuid)
        with self._lock, cu.primary_context(ordinal):
            hit = self._imports.get(key)
            if hit is None:
                pool = self._pool(key[:3], ordinal)
                ptr = ctypes.c_uint64()
                data = (ctypes.c_ubyte * 64).from_buffer_copy(b.handle)
                cu.call("cuMemPoolImportPointer", ctypes.byref(ptr), pool, data)
                size = cu.pointer_attribute(ptr.value, cu.CU_POINTER_ATTRIBUTE_RANGE_SIZE, ctypes.c_uint64)
                hit = (ptr.value, size, 0)
                self._ordinals[key] = ordinal
            self._imports[key] = (hit[0], hit[1], hit[2] + 1)
        lease.before_end(lambda: self._unref(key))
        return hit[0], hit[1]

    def _unref(self, key: tuple[int, int, int, int]) -> None:
        with self._lock:
            ptr, size, refs = self._imports[key]
            if refs > 1:
                self._imports[key] = (ptr, size, refs - 1)
                return
            del self._imports[key]
            ordinal = self._ordinals.pop(key)
        with cu.primary_context(ordinal):
            cu.call("cuMemFree_v2", ctypes.c_uint64(ptr))
