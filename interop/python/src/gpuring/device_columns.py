"""Device columns: CUDA arrays into frame descriptions (producer side) and frame
buffers back into CuPy arrays or torch tensors (consumer side).

Producers accept anything with ``__cuda_array_interface__`` (CuPy, numba,
PyTorch), objects with ``__dlpack__`` (converted by CuPy), and
:class:`DeviceColumn` for cuDF-style columns (data, null mask, offsets). A 1-D
array becomes a primitive column; a 2-D C-contiguous (rows, cols) array a
``fixed_size_list<cols>`` column, the layout of a rows x cols tensor.
PyTorch's caching allocator hands out pieces of larger blocks: each buffer is
described as (handle of the whole block, byte offset inside it).
"""
from __future__ import annotations

import ctypes
import threading
from typing import TYPE_CHECKING, Any, Callable
from dataclasses import dataclass, field

from . import cuda_driver as cu
from .description import DEVICE_KINDS, BufferDescriptor, ColumnDescriptor, FrameDescription
from .errors import GpuringError
from .pool_memory import EXPORTS, pool_of
from .vmm_memory import SPANS, is_vmm, span_handle

if TYPE_CHECKING:
    from .frame import Frame, Lease
from .layout import HANDLE_BYTES, SYNC_CUDA_EVENT

_FORMATS = {"i1": "c", "u1": "C", "i2": "s", "u2": "S", "i4": "i", "u4": "I", "i8": "l", "u8": "L",
            "f2": "e", "f4": "f", "f8": "g"}
_TYPESTRS = {v: "<" + k if k[1] != "1" else "|" + k for k, v in _FORMATS.items()}


@dataclass
class DeviceColumn:
    """A column given buffer by buffer, the way cuDF holds one: ``format`` is the
    Arrow C data interface format (``"u"`` for strings: offsets int32 plus
    characters uint8); each buffer is a device array or None."""
    format: str
    length: int
    data: object = None
    mask: object = None
    offsets: object = None
    null_count: int = 0
    offset: int = 0
    children: list[Any] = field(default_factory=list)


def _interface(obj: Any) -> dict[str, Any]:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None and hasattr(obj, "__dlpack__"):
        import cupy
        cai = cupy.from_dlpack(obj).__cuda_array_interface__
    if not isinstance(cai, dict):
        raise GpuringError("INVALID_ARGUMENT", f"{type(obj).__name__} is not a device array "
                           "(no __cuda_array_interface__ or __dlpack__)")
    return cai


def _contiguous(cai: dict[str, Any]) -> bool:
    strides = cai.get("strides")
    if strides is None:
        return True
    itemsize = int(cai["typestr"][2:])
    expected: list[int] = []
    acc = itemsize
    for n in reversed(cai["shape"]):
        expected.insert(0, acc)
        acc *= n
    return tuple(strides) == tuple(expected)


# Allocations this process exported as cuda-ipc, by handle: (buffer id, base). CUDA
# refuses to open a handle in the process that made it, so a frame published and read
# here uses the memory itself. A recycled address (same handle) replaces its entry.
_own_exports: dict[bytes, tuple[int, int]] = {}

# What publishing found out about a cuda-ipc or cuda-pool pointer, by address: the
# descriptor of the allocation's first byte (kind, device, buffer id, handle or export
# data, pool number) and its base. All of it belongs to the allocation, which its
# process-unique buffer id names, so one driver call tells whether the address still
# lies in it; a producer publishing the same arrays again (a caching allocator's
# blocks) then skips the driver calls that find them out, and for pool memory the
# export itself (cuMemPoolExportPointer: 12 us at 1 MiB, 70 us at 256 MiB on an
# H200 host, at every call). An address freed and allocated again has a new buffer
# id and is found out afresh: a new allocation at the address of a freed one can have
# other export data (the pool may have given its memory back meanwhile).
_known: dict[int, tuple[BufferDescriptor, int]] = {}
_KNOWN_MAX = 4096


def _known_export(ptr: int) -> tuple[BufferDescriptor, int] | None:
    known = _known.get(ptr)
    if known is None:
        return None
    try:
        same = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64) == known[0].allocation_id
    except GpuringError:
        same = False  # freed: the full path says what it is now
    if not same:
        _known.pop(ptr, None)
        return None
    return known


def _at(first: BufferDescriptor, offset: int, length: int) -> BufferDescriptor:
    """``first`` (an allocation's first byte) moved ``offset`` bytes in, ``length`` long. Built
    directly: dataclasses.replace() took 1.6 us a call on the dev box, this 0.2."""
    return BufferDescriptor(first.kind, first.device_ordinal, first.device_uuid, offset, length, first.allocation_id,
                            first.handle, first.pool_id)


def _remember_export(ptr: int, first_byte: BufferDescriptor, base: int) -> None:
    if len(_known) >= _KNOWN_MAX:
        _known.pop(next(iter(_known)), None)  # the oldest
    _known[ptr] = (first_byte, base)


class _Exporter:
    """Turns device pointers into buffer descriptors; remembers the streams to sync."""

    def __init__(self) -> None:
        self.streams: set[int] = set()
        self.ordinal: int | None = None
        self.spans: list[int] = []

    def buffer(self, obj: Any) -> tuple[BufferDescriptor, int]:
        """(descriptor, element count) of one device array."""
        if obj is None:
            return BufferDescriptor(), 0
        cai = _interface(obj)
        if not _contiguous(cai):
            raise GpuringError("INVALID_ARGUMENT", "device arrays must be C-contiguous; call .contiguous() or cupy.ascontiguousarray first")
        if cai.get("stream") not in (None, 0):
            self.streams.add(int(cai["stream"]))
        ptr = int(cai["data"][0])
        count = 1
        for n in cai["shape"]:
            count *= n
        size = count * int(cai["typestr"][2:])
        if size == 0:
            return BufferDescriptor(), 0
        known = _known_export(ptr)
        if known is not None:
            first, base = known
            self.ordinal = first.device_ordinal
            return _at(first, ptr - base, size), count
        pool = pool_of(ptr)
        vmm = not pool and is_vmm(ptr)
        if not pool and not vmm:
            cu.check_exportable(ptr)
        ordinal = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ctypes.c_int)
        self.ordinal = ordinal
        if vmm:
            with cu.primary_context(ordinal):
                span, start, span_bytes, chunks = SPANS.export(ptr, size)
            self.spans.append(span)
            return BufferDescriptor("cuda-vmm", ordinal, cu.device_uuid(ordinal), ptr - start, size, span,
                                    span_handle(span_bytes, chunks)), count
        if pool:
            with cu.primary_context(ordinal):
                base, pool_id, alloc_id, data = EXPORTS.describe(ptr, pool)
            first = BufferDescriptor("cuda-pool", ordinal, cu.device_uuid(ordinal), 0, 0, alloc_id, data, pool_id)
            _remember_export(ptr, first, base)
            return _at(first, ptr - base, size), count
        with cu.primary_context(ordinal):
            base = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, ctypes.c_uint64)
            alloc_id = cu.pointer_attribute(ptr, cu.CU_POINTER_ATTRIBUTE_BUFFER_ID, ctypes.c_uint64)
            handle = cu.ipc_mem_handle(base)
        _own_exports[handle] = (alloc_id, base)
        first = BufferDescriptor("cuda-ipc", ordinal, cu.device_uuid(ordinal), 0, 0, alloc_id, handle)
        _remember_export(ptr, first, base)
        return _at(first, ptr - base, size), count

    def column(self, name: str, obj: Any) -> ColumnDescriptor:
        if isinstance(obj, DeviceColumn):
            return self.device_column(name, obj)
        cai = _interface(obj)
        fmt = _FORMATS.get(cai["typestr"][1:])
        if fmt is None:
            raise GpuringError("INVALID_ARGUMENT", f"column {name!r}: element type {cai['typestr']} has no Arrow "
                               "equivalent gpuring carries (booleans: cast to uint8)")
        shape = tuple(cai["shape"])
        data, count = self.buffer(obj)
        if len(shape) == 1:
            return ColumnDescriptor(name, fmt, shape[0], [BufferDescriptor(), data], False, null_count=0)
        if len(shape) == 2:
            child = ColumnDescriptor("item", fmt, count, [BufferDescriptor(), data], False, null_count=0)
            return ColumnDescriptor(name, f"+w:{shape[1]}", shape[0], [BufferDescriptor()], False,
                                    null_count=0, children=[child])
        raise GpuringError("INVALID_ARGUMENT", f"column {name!r}: {len(shape)}-D arrays are not columns; reshape to 1-D or 2-D")

    def device_column(self, name: str, c: DeviceColumn) -> ColumnDescriptor:
        buffers = [self.buffer(c.mask)[0]]
        if c.offsets is not None:
            buffers.append(self.buffer(c.offsets)[0])
        if c.data is not None or c.format not in ("+s", "+l", "+L") and not c.format.startswith("+w:"):
            buffers.append(self.buffer(c.data)[0])
        children = [self.column(f"{name}.{i}", k) for i, k in enumerate(c.children)]
        return ColumnDescriptor(name, c.format, c.length, buffers, True, null_count=c.null_count,
                                offset=c.offset, children=children)


@dataclass
class DeviceLayout:
    """Device columns described once: the description (without an ordering event),
    the streams their data was written on, the device, the arrays themselves and the
    VMM spans exported for them (released with the frame, or the prepared frame)."""
    description: FrameDescription
    streams: list[int]
    ordinal: int | None
    arrays: list[Any]
    spans: list[int]


def layout_device(data: object, stream: object = None) -> DeviceLayout:
    """``data``'s device columns described, with no event recorded yet (order_after)."""
    if not isinstance(data, dict) or not data:
        raise GpuringError("INVALID_ARGUMENT", "device columns are published as a non-empty dict of name: array")
    ex = _Exporter()
    columns = [ex.column(name, obj) for name, obj in data.items()]
    rows = {c.length for c in columns}
    if len(rows) != 1:
        raise GpuringError("INVALID_ARGUMENT", f"columns have different lengths: {sorted(rows)}")
    if stream is not None:
        ex.streams.add(cu.stream_handle(stream))
    return DeviceLayout(FrameDescription(rows.pop(), columns), sorted(ex.streams), ex.ordinal, list(data.values()),
                        ex.spans)


def order_after(description: FrameDescription, streams: list[int], ordinal: int | None) -> list[ctypes.c_void_p]:
    """Readers wait on one event that follows the work queued now on ``streams``
    (the legacy default stream, 1, when none is named): recorded, and named in
    ``description``'s sync fields, only when some stream has work left; otherwise
    the data is complete and the description says "no event" (SPEC.md §9a), so
    readers have nothing to open or wait on. The events, to recycle once the frame
    is reclaimed."""
    description.sync_kind, description.sync_handle = 0, bytes(HANDLE_BYTES)
    if ordinal is None:
        return []
    events: list[ctypes.c_void_p] = []
    with cu.primary_context(ordinal):
        busy = [s for s in streams or [1] if not cu.stream_idle(s)]
        if busy:
            for s in busy[:-1]:
                events.append(cu.record_ipc_event(s, ordinal)[0])
                cu.call("cuStreamWaitEvent", ctypes.c_void_p(busy[-1]), events[-1], 0)
            event, handle = cu.record_ipc_event(busy[-1], ordinal)
            events.append(event)
            description.sync_kind, description.sync_handle = SYNC_CUDA_EVENT, handle
    return events


def describe_device(data: object, stream: object = None) -> tuple[FrameDescription, object]:
    """A description of device columns, and what the producer must keep alive
    until the frame is released (the arrays and the event)."""
    layout = layout_device(data, stream)
    events = order_after(layout.description, layout.streams, layout.ordinal)
    return layout.description, KeepAlive(layout.arrays, layout.ordinal, events, layout.spans)


class KeepAlive:
    """What a frame's producer holds until the frame is reclaimed: the arrays,
    the ordering events (then recorded again for later frames) and the exported
    VMM spans (their descriptors)."""

    def __init__(self, arrays: list[Any], ordinal: int | None, events: list[ctypes.c_void_p], spans: list[int]) -> None:
        self.arrays, self.ordinal, self.events, self.spans = arrays, ordinal, events, spans

    def __del__(self) -> None:
        for e in self.events:
            cu.recycle_ipc_event(self.ordinal or 0, e)
        for span in self.spans:
            SPANS.release(span)


class _DeviceView:
    """Exposes one mapped buffer through __cuda_array_interface__; CuPy and
    PyTorch keep it (and with it the frame's lease) alive as long as their array."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str, lease: Lease) -> None:
        self.__cuda_array_interface__: dict[str, Any] = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "version": 3, "strides": None, "stream": None}
        self._lease = lease


def wait_for_writes(frame: Frame) -> int:
    """Blocks until the producer's writes to the frame's device buffers are
    done (its event, SPEC.md §9); returns the ordinal of the frame's device."""
    d = frame.description
    device = next((b for b in d.buffers() if b.kind in DEVICE_KINDS), None)
    ordinal = cu.ordinal_of_uuid(device.device_uuid) if device else 0
    if d.sync_kind == SYNC_CUDA_EVENT:
        with cu.primary_context(ordinal):
            cu.wait_ipc_event(d.sync_handle, ordinal, (frame._consumer._seg.name, *frame.producer))
    return ordinal


def _views(frame: Frame, lease: Lease) -> tuple[dict[str, _DeviceView], int]:
    d = frame.description
    ordinal = wait_for_writes(frame)
    views: dict[str, _DeviceView] = {}
    for c in d.columns:
        leaf = c
        shape: tuple[int, ...] = (c.length,)
        if c.format.startswith("+w:") and c.children:
            leaf, shape = c.children[0], (c.length, int(c.format[3:]))
        typestr = _TYPESTRS.get(leaf.format)
        data = leaf.buffers[-1] if leaf.buffers else None
        if typestr is None or data is None or data.kind not in DEVICE_KINDS or leaf.buffers[0].kind != "absent":
            raise GpuringError("UNSUPPORTED", f"column {c.name!r} ({c.format}) is not a dense numeric device column; "
                               "read it from Node or as host memory")
        itemsize = int(typestr[2:])
        need = (leaf.offset + leaf.length) * itemsize
        if data.length < need:
            raise GpuringError("FRAME_BOUNDS", f"column {c.name!r}: buffer of {data.length} bytes, {need} needed")
        ptr = address(frame, data, lease) + leaf.offset * itemsize
        views[c.name] = _DeviceView(ptr, shape, typestr, lease)
    return views, ordinal


def address(frame: Frame, b: BufferDescriptor, lease: Lease) -> int:
    """Where device buffer ``b`` of the frame lies in this process, mapped until ``lease`` ends."""
    if b.kind == "cuda-ipc":
        return frame._consumer._device_mappings().map(b, frame.producer, lease)
    imports = frame._consumer._pool_imports() if b.kind == "cuda-pool" else frame._consumer._vmm_imports()
    base, size = imports.map(b, frame.producer, lease)
    if b.offset + b.length > size:
        raise GpuringError("FRAME_BOUNDS", f"a device buffer [{b.offset}, +{b.length}) lies outside its {size}-byte allocation")
    return base + b.offset


def to_cupy(frame: Frame, lease: Lease) -> dict[str, Any]:
    """Built from explicit UnownedMemory: asking the runtime which device an IPC
    mapping lives on can answer 'none', and cupy.asarray then tries to copy."""
    import cupy
    views, ordinal = _views(frame, lease)
    arrays: dict[str, Any] = {}
    for name, v in views.items():
        cai = v.__cuda_array_interface__
        dtype = cupy.dtype(cai["typestr"])
        size = dtype.itemsize
        for n in cai["shape"]:
            size *= n
        mem = cupy.cuda.UnownedMemory(cai["data"][0], size, owner=v, device_id=ordinal)
        arrays[name] = cupy.ndarray(cai["shape"], dtype, cupy.cuda.MemoryPointer(mem, 0))
    return arrays


def to_torch(frame: Frame, lease: Lease) -> dict[str, Any]:
    import torch
    views, ordinal = _views(frame, lease)
    return {name: torch.as_tensor(v, device=f"cuda:{ordinal}") for name, v in views.items()}


class DeviceMappings:
    """A consumer's opened IPC handles, keyed by (handle, allocation id) so a
    recycled allocation is never served from a stale mapping, and counted by
    the leases whose arrays use them. Idle mappings stay open for the next
    frame; when the exporter reuses freed memory that one of them still maps,
    the driver refuses the new mapping, and the idle ones are closed. Idle
    mappings of a producer that is gone are closed too (forget_dead): a mapping
    keeps the dead process's memory allocated. All are closed with the consumer."""

    def __init__(self) -> None:
        self.open: dict[tuple[bytes, int], tuple[int, int]] = {}
        self.refs: dict[tuple[bytes, int], int] = {}
        self.producers: dict[tuple[bytes, int], tuple[int, int]] = {}  # -> (index, generation) that published it
        self._lock = threading.Lock()  # leases end on any thread

    def map(self, b: BufferDescriptor, producer: tuple[int, int], lease: Lease) -> int:
        """The buffer's address here; the mapping is held until ``lease`` ends."""
        own = _own_exports.get(b.handle)
        if own is not None and own[0] == b.allocation_id:
            return own[1] + b.offset  # this process's memory: its producer keeps it until the frame is released
        key = (b.handle, b.allocation_id)
        hit = self.open.get(key)
        if hit is None:
            ordinal = cu.ordinal_of_uuid(b.device_uuid)
            with cu.primary_context(ordinal):
                ptr = cu.ipc_open(b.handle)
                if ptr is None:
                    self.close_idle()
                    ptr = cu.ipc_open(b.handle)
                if ptr is None:
                    raise GpuringError("CUDA", "cuIpcOpenMemHandle: the memory is mapped here already, by a frame still held")
            hit = self.open[key] = (ptr, ordinal)
            self.producers[key] = producer
        with self._lock:
            self.refs[key] = self.refs.get(key, 0) + 1
        lease.on_end(lambda: self._unref(key))
        return hit[0] + b.offset

    def _unref(self, key: tuple[bytes, int]) -> None:
        with self._lock:
            self.refs[key] -= 1

    def close_idle(self, live: Callable[[tuple[int, int]], bool] = lambda _: False) -> None:
        """Closes the mappings no frame holds, except those of producers ``live`` keeps."""
        with self._lock:
            idle = [k for k in self.open if self.refs.get(k, 0) == 0 and not live(self.producers[k])]
        for key in idle:
            ptr, ordinal = self.open.pop(key)
            del self.producers[key]
            with cu.primary_context(ordinal):
                cu.ipc_close(ptr)

    def close(self) -> None:
        for ptr, ordinal in self.open.values():
            with cu.primary_context(ordinal):
                cu.ipc_close(ptr)
        self.open, self.producers = {}, {}
