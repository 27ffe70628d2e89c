"""The CUDA driver API through ctypes, loaded at first use from libcuda.so.1 (never
linked), so the package imports and runs host frames on machines without a GPU.
Every call runs inside the device's primary context, which CuPy and PyTorch share."""
from __future__ import annotations

import contextlib
import ctypes
from collections import OrderedDict
from typing import Any, Iterator, NoReturn

from .errors import GpuringError

CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_BUFFER_ID = 7
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE = 10
CU_POINTER_ATTRIBUTE_RANGE_START_ADDR = 11
CU_POINTER_ATTRIBUTE_RANGE_SIZE = 12
CU_MEMORYTYPE_DEVICE = 2
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
CU_EVENT_DISABLE_TIMING = 0x2
CU_EVENT_DISABLE_TIMING_INTERPROCESS = 0x2 | 0x4
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_ALREADY_MAPPED = 208
CUDA_ERROR_NOT_READY = 600
_lib = None


class _IpcHandle(ctypes.Structure):
    """CUipcMemHandle / CUipcEventHandle: 64 bytes, passed *by value* to the open
    calls. Filled by memmove: a c_char array would stop copying at the first NUL."""
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]

    def __init__(self, handle: bytes) -> None:
        super().__init__()
        ctypes.memmove(ctypes.addressof(self), handle, 64)


def driver() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise GpuringError("CUDA_UNAVAILABLE", f"no CUDA driver on this machine (libcuda.so.1: {e}); "
                               "device columns need an NVIDIA GPU and driver") from None
        check(lib.cuInit(0), "cuInit")
        _lib = lib
    return _lib


def check(rc: int, what: str) -> None:
    if rc != 0:
        name = ctypes.c_char_p()
        if _lib is not None:
            _lib.cuGetErrorName(rc, ctypes.byref(name))
        code = "NOT_EXPORTABLE" if what == "cuIpcGetMemHandle" else "CUDA"
        raise GpuringError(code, f"{what} failed: {(name.value or b'?').decode()} ({rc})")


def call(fn: str, *args: Any) -> None:
    check(getattr(driver(), fn)(*args), fn)


_contexts: dict[int, ctypes.c_void_p] = {}


@contextlib.contextmanager
def primary_context(ordinal: int) -> Iterator[None]:
    """Makes the device's primary context current for the block. It is retained
    once and never released: releasing the last reference destroys the context
    and every IPC mapping and event in it, even if CuPy opens it again later."""
    ctx = _contexts.get(ordinal)
    if ctx is None:
        dev, ctx = ctypes.c_int(), ctypes.c_void_p()
        call("cuDeviceGet", ctypes.byref(dev), ordinal)
        call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        _contexts[ordinal] = ctx
    call("cuCtxPushCurrent_v2", ctx)
    try:
        yield
    finally:
        driver().cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))


def device_count() -> int:
    n = ctypes.c_int()
    call("cuDeviceGetCount", ctypes.byref(n))
    return n.value


_uuids: dict[int, bytes] = {}
_ordinals: dict[bytes, int] = {}


def device_uuid(ordinal: int) -> bytes:
    """The device's UUID, asked of the driver once per process (every buffer descriptor names it)."""
    known = _uuids.get(ordinal)
    if known is None:
        dev, uuid = ctypes.c_int(), (ctypes.c_ubyte * 16)()
        call("cuDeviceGet", ctypes.byref(dev), ordinal)
        call("cuDeviceGetUuid_v2", uuid, dev)
        known = _uuids[ordinal] = bytes(uuid)
    return known


def ordinal_of_uuid(uuid: bytes) -> int:
    """The ordinal of the visible device with this UUID (ordinals differ between
    processes). The devices a process sees do not change while it runs, so the
    scan is once per UUID, not once per frame."""
    known = _ordinals.get(uuid)
    if known is not None:
        return known
    for i in range(device_count()):
        if device_uuid(i) == uuid:
            _ordinals[uuid] = i
            return i
    raise GpuringError("DEVICE_NOT_FOUND", f"no visible CUDA device has UUID {uuid.hex()}; "
                       "the producer's GPU must be visible here too (CUDA_VISIBLE_DEVICES)")


def pointer_attribute(ptr: int, attribute: int, ctype: Any) -> int:
    out = ctype()
    call("cuPointerGetAttribute", ctypes.byref(out), attribute, ctypes.c_uint64(ptr))
    return int(out.value)


def check_exportable(ptr: int) -> None:
    """Legacy CUDA IPC shares cudaMalloc / cuMemAlloc memory only (SPEC.md 9a):
    refuse anything else up front, naming what it is."""
    def refuse(what: str) -> NoReturn:
        raise GpuringError("NOT_EXPORTABLE", f"{what} cannot be shared with CUDA IPC; allocate with cudaMalloc "
                           "(CuPy's default pool, PyTorch's caching allocator without expandable segments)")
    try:
        kind = pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ctypes.c_uint)
    except GpuringError:
        refuse(f"{ptr:#x} is not memory CUDA knows and")
    if pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_IS_MANAGED, ctypes.c_uint):
        refuse("managed (unified) memory from cudaMallocManaged")
    if kind != CU_MEMORYTYPE_DEVICE:
        refuse("pinned host memory (cudaHostAlloc)")
    try:
        capable = pointer_attribute(ptr, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ctypes.c_uint)
    except GpuringError:
        capable = 1  # drivers before 11.3 do not know the attribute; cuIpcGetMemHandle decides
    if not capable:
        refuse("stream-ordered pool memory (cudaMallocAsync) or a virtual memory management allocation "
               "(cuMemCreate, PyTorch expandable segments)")


def ipc_mem_handle(base: int) -> bytes:
    handle = (ctypes.c_ubyte * 64)()
    call("cuIpcGetMemHandle", handle, ctypes.c_uint64(base))
    return bytes(handle)


def _allocate(fn: str, out: Any, nbytes: int, *flags: int) -> int:
    """Calls allocator ``fn`` into ``out``: OUT_OF_MEMORY when memory runs out, CUDA on any other error."""
    rc = getattr(driver(), fn)(ctypes.byref(out), ctypes.c_size_t(nbytes), *flags)
    if rc == CUDA_ERROR_OUT_OF_MEMORY:
        raise GpuringError("OUT_OF_MEMORY", f"{fn} of {nbytes} bytes: out of memory")
    check(rc, fn)
    return int(out.value or 0)


def mem_alloc(nbytes: int) -> int:
    """``nbytes`` of device memory from cuMemAlloc (exportable with CUDA IPC)
    in the current context."""
    return _allocate("cuMemAlloc_v2", ctypes.c_uint64(), nbytes)


def mem_free(ptr: int) -> None:
    driver().cuMemFree_v2(ctypes.c_uint64(ptr))


def host_alloc(nbytes: int) -> int:
    """``nbytes`` of page-locked host memory (cuMemHostAlloc), which the GPU
    copies to and from at full speed, in the current context."""
    return _allocate("cuMemHostAlloc", ctypes.c_void_p(), nbytes, 0)


def host_free(ptr: int) -> None:
    driver().cuMemFreeHost(ctypes.c_void_p(ptr))


def copy_to_host(host: int, device: int, nbytes: int) -> None:
    call("cuMemcpyDtoH_v2", ctypes.c_void_p(host), ctypes.c_uint64(device), ctypes.c_size_t(nbytes))


def copy_to_device(device: int, host: int, nbytes: int) -> None:
    call("cuMemcpyHtoD_v2", ctypes.c_uint64(device), ctypes.c_void_p(host), ctypes.c_size_t(nbytes))


def ipc_open(handle: bytes) -> int | None:
    """The mapping's address, or None when the driver says this process maps
    that memory already (CUDA_ERROR_ALREADY_MAPPED: a stale mapping of freed and
    reused memory is still open here)."""
    ptr = ctypes.c_uint64()
    rc = driver().cuIpcOpenMemHandle_v2(ctypes.byref(ptr), _IpcHandle(handle), CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
    if rc == CUDA_ERROR_ALREADY_MAPPED:
        return None
    check(rc, "cuIpcOpenMemHandle_v2")
    return ptr.value


def ipc_close(ptr: int) -> None:
    driver().cuIpcCloseMemHandle(ctypes.c_uint64(ptr))


# This process's interprocess events by handle, and back: CUDA refuses to open a handle
# in the process that made it, so a frame published and read here waits on the event itself.
_own_events: dict[bytes, int] = {}
_own_event_handles: dict[int, bytes] = {}


# Interprocess events whose frames were reclaimed, by device ordinal, to be
# recorded again. Consumers keep the events they opened (up to a bound), so an
# event per frame would have them open one per frame; reused, a producer's events
# number at most its frames in flight ever, and a handle never comes back naming
# another event. (Reuse is safe: a frame is reclaimed only when no consumer holds
# it, and a wait enqueued earlier waits for the recording it saw.)
_idle_events: dict[int, list[tuple[ctypes.c_void_p, bytes]]] = {}


def record_ipc_event(stream: int, ordinal: int) -> tuple[ctypes.c_void_p, bytes]:
    """An interprocess event of device ``ordinal`` (whose primary context is
    current) recorded on ``stream``, and its 64-byte handle; give it back with
    recycle_ipc_event once its frame is reclaimed."""
    idle = _idle_events.setdefault(ordinal, [])
    try:
        event, handle = idle.pop()
    except IndexError:
        event, raw = ctypes.c_void_p(), (ctypes.c_ubyte * 64)()
        call("cuEventCreate", ctypes.byref(event), CU_EVENT_DISABLE_TIMING_INTERPROCESS)
        call("cuIpcGetEventHandle", raw, event)
        handle = bytes(raw)
        _own_events[handle], _own_event_handles[event.value or 0] = event.value or 0, handle
    try:
        call("cuEventRecord", event, ctypes.c_void_p(stream))
    except GpuringError:
        idle.append((event, handle))
        raise
    return event, handle


def recycle_ipc_event(ordinal: int, event: ctypes.c_void_p) -> None:
    """Gives back an event of record_ipc_event whose frame was reclaimed."""
    handle = _own_event_handles.get(event.value or 0)
    if handle is not None:
        _idle_events.setdefault(ordinal, []).append((event, handle))


def record_event(stream: int) -> ctypes.c_void_p:
    """A process-local event recorded on ``stream``, after the work queued there so far."""
    event = ctypes.c_void_p()
    call("cuEventCreate", ctypes.byref(event), CU_EVENT_DISABLE_TIMING)
    try:
        call("cuEventRecord", event, ctypes.c_void_p(stream))
    except GpuringError:
        destroy_event(event)
        raise
    return event


def stream_idle(stream: int) -> bool:
    """Whether ``stream`` (of the current context) has no work left to do."""
    rc = driver().cuStreamQuery(ctypes.c_void_p(stream))
    if rc == CUDA_ERROR_NOT_READY:
        return False
    check(rc, "cuStreamQuery")
    return True


def event_complete(event: ctypes.c_void_p) -> bool:
    rc = driver().cuEventQuery(event)
    if rc == CUDA_ERROR_NOT_READY:
        return False
    check(rc, "cuEventQuery")
    return True


def stream_handle(stream: object) -> int:
    """The CUstream of ``stream``: an int, a CuPy stream (``.ptr``) or a PyTorch
    stream (``.cuda_stream``); 0 is the legacy default stream."""
    for attribute in ("ptr", "cuda_stream"):
        if hasattr(stream, attribute):
            return int(getattr(stream, attribute))
    if isinstance(stream, int) and stream >= 0:
        return stream
    raise GpuringError("INVALID_ARGUMENT", f"not a CUDA stream: {stream!r} (pass a CuPy or PyTorch stream, or a CUstream as an int)")


def destroy_event(event: ctypes.c_void_p) -> None:
    """Destroys a process-local event (record_event); interprocess ones are recycled."""
    driver().cuEventDestroy_v2(event)


# Other processes' events opened here, by device ordinal, least recently used
# first, each under its handle and the producer (participant index, generation)
# whose frame carried it: a handle names its event only while that producer
# lives, and a later process may be given the same bytes. A producer's pooled
# events come round again, and each open costs a driver call. At most
# _OPENED_EVENTS_MAX per device (as the Node core keeps), so a producer that
# makes an event per frame, or producers coming and going, cannot grow a
# consumer for good.
_OPENED_EVENTS_MAX = 256
_opened_events: dict[int, OrderedDict[tuple[bytes, tuple[str, int, int]], ctypes.c_void_p]] = {}


def wait_ipc_event(handle: bytes, ordinal: int, producer: tuple[str, int, int]) -> None:
    """Blocks until the producer's work before its event is done; device
    ``ordinal``'s primary context is current, ``producer`` is the frame's
    (ring, participant index, generation): producers of two rings may share an
    index and a generation."""
    own = _own_events.get(handle)
    if own is not None:  # made here: the frame holding it is held, so the event lives
        call("cuEventSynchronize", ctypes.c_void_p(own))
        return
    call("cuEventSynchronize", _opened_event(handle, ordinal, producer))


def _opened_event(handle: bytes, ordinal: int, producer: tuple[str, int, int]) -> ctypes.c_void_p:
    opened = _opened_events.setdefault(ordinal, OrderedDict())
    key = (handle, producer)
    event = opened.get(key)
    if event is not None:
        opened.move_to_end(key)
        return event
    event = ctypes.c_void_p()
    call("cuIpcOpenEventHandle", ctypes.byref(event), _IpcHandle(handle))
    opened[key] = event
    if len(opened) > _OPENED_EVENTS_MAX:  # no wait holds one: each ends before its call returns
        driver().cuEventDestroy_v2(opened.popitem(last=False)[1])
    return event
