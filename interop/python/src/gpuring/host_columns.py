"""Host columns: pyarrow data into a producer's arena, and frame buffers back
out as pyarrow arrays that point into the producer's shared memory."""
from __future__ import annotations

import ctypes
from typing import Any, Callable

from .arena import Allocation, ArenaPool, arena_removed, open_arena
from .body_shapes import Shape
from .arrow_c import ArrowArray, ArrowNode, ArrowSchema, import_record_batch, read_exported
from .description import BufferDescriptor, ColumnDescriptor, FrameDescription
from .errors import GpuringError
from .format import parse_format
from .layout import ARENA_ALIGN
from .metadata import encode_metadata, metadata_pairs
from .segment import Segment
from .shared_memory import SharedMemory

# Where a host buffer lies in this process.
Address = Callable[[BufferDescriptor], int]


def as_record_batch(data: object) -> Any:
    """A pyarrow RecordBatch from a Table, RecordBatch or mapping of columns."""
    import pyarrow as pa

    if isinstance(data, pa.RecordBatch):
        return data
    if isinstance(data, pa.Table):
        if data.num_rows:
            return data.combine_chunks().to_batches()[0]
        # from_pylist has no converter for some types (dictionaries); an empty array of each type does.
        return pa.RecordBatch.from_arrays([pa.nulls(0, f.type) for f in data.schema], schema=data.schema)
    if isinstance(data, dict):
        try:
            return pa.RecordBatch.from_pydict({k: v.combine_chunks() if isinstance(v, pa.ChunkedArray) else v
                                               for k, v in data.items()})
        except (TypeError, ValueError, pa.ArrowException) as e:
            raise GpuringError("INVALID_ARGUMENT", f"cannot make host columns of this dict (pyarrow: {e}); "
                               "pass a pyarrow array or a sequence per column, all of one length") from e
    raise GpuringError("INVALID_ARGUMENT", f"cannot publish a {type(data).__name__} as host columns; "
                       "pass a pyarrow Table, RecordBatch or dict of arrays")


def _export(batch: Any) -> ArrowNode:
    s, a = ArrowSchema(), ArrowArray()
    batch._export_to_c(ctypes.addressof(a), ctypes.addressof(s))
    try:
        return read_exported(s, a)
    finally:
        a.release(ctypes.byref(a))
        s.release(ctypes.byref(s))


def _flags(c_flags: int) -> tuple[bool, bool, bool]:
    return bool(c_flags & 2), bool(c_flags & 1), bool(c_flags & 4)


class _Copier:
    """Lays every buffer of a batch out in one arena allocation, 64-byte aligned."""

    def __init__(self, pool: ArenaPool, alloc: Callable[[int], Allocation]) -> None:
        self.pool, self.alloc, self.total = pool, alloc, 0
        self.pending: list[tuple[int, int, int]] = []  # (offset in the allocation, address, size)

    def reserve(self, address: int, size: int) -> int:
        at = self.total
        self.pending.append((at, address, size))
        self.total += (size + ARENA_ALIGN - 1) // ARENA_ALIGN * ARENA_ALIGN
        return at

    def copy(self) -> Allocation:
        alloc = self.alloc(self.total)
        mem = self.pool.memory(alloc)
        for at, address, size in self.pending:
            ctypes.memmove(mem.base + alloc.offset + at, address, size)
        return alloc


def _column(node: ArrowNode, copier: _Copier, dictionaries: list[ColumnDescriptor],
            fixups: list[BufferDescriptor]) -> ColumnDescriptor:
    nullable, ordered, keys_sorted = _flags(node.flags)
    buffers: list[BufferDescriptor] = []
    for address, size in node.buffers:
        if not address:
            buffers.append(BufferDescriptor())
            continue
        b = BufferDescriptor("host", -1, bytes(16), copier.reserve(address, size), size)
        fixups.append(b)
        buffers.append(b)
    meta = metadata_pairs(node.metadata)
    column = ColumnDescriptor(node.name, node.format, node.length, buffers, nullable, ordered, keys_sorted,
                              meta, -1, node.null_count, node.offset,
                              [_column(c, copier, dictionaries, fixups) for c in node.children])
    if node.dictionary is not None:
        dictionaries.append(column)  # holds the index while nested dictionaries are added
        column.dictionary = len(dictionaries) - 1
        dictionaries[column.dictionary] = _column(node.dictionary, copier, dictionaries, fixups)
    return column


def describe_host(data: object, pool: ArenaPool, alloc: Callable[[int], Allocation]) -> tuple[FrameDescription, Allocation]:
    """Copies a batch's buffers into the producer's arena (one allocation from
    ``alloc``) and describes them. The returned allocation is freed when the
    frame is released."""
    batch = as_record_batch(data)
    root = _export(batch)
    copier = _Copier(pool, alloc)
    dictionaries: list[ColumnDescriptor] = []
    fixups: list[BufferDescriptor] = []
    columns = [_column(c, copier, dictionaries, fixups) for c in root.children]
    copied = copier.copy()
    name = pool.name(copied.arena)
    for b in fixups:
        b.offset += copied.offset
        b.handle = BufferDescriptor.host(name, 0, 0).handle
    meta = batch.schema.metadata
    metadata = [(k.decode(), v.decode()) for k, v in meta.items()] if meta else None
    return FrameDescription(batch.num_rows, columns, dictionaries, metadata), copied


class ArenaMaps:
    """A consumer's mapped arenas, by name. Arrays hold their maps alive."""

    def __init__(self, seg: Segment) -> None:
        self.seg = seg
        self.maps: dict[str, SharedMemory] = {}

    def memory(self, name: str) -> SharedMemory:
        mem = self.maps.get(name)
        if mem is None:
            mem = self.maps[name] = open_arena(self.seg, name)
        return mem

    def forget_removed(self, live: Callable[[tuple[int, int]], bool]) -> None:
        """Drops the maps of arenas no frame can refer to any more (arena_removed):
        the rest of a long-lived consumer's life would keep every departed
        producer's arenas allocated in /dev/shm. Arrays still built on one keep
        it mapped until they go."""
        for name in [n for n in self.maps if arena_removed(self.seg, n, live)]:
            self.maps.pop(name).close()

    def address(self, b: BufferDescriptor) -> int:
        name = b.arena_name
        mem = self.memory(name)
        if b.offset + b.length > mem.size:
            raise GpuringError("FRAME_BOUNDS", f"buffer [{b.offset}, +{b.length}) outside arena {name} ({mem.size} bytes)")
        return int(mem.base + b.offset)


def _private_buffers(c: ColumnDescriptor, address: Address, dictionaries: list[ColumnDescriptor]) -> dict[int, bytes]:
    """The buffers of a column an importer must get as checked private copies
    (SPEC.md §8.2), by position: value offsets, or a dictionary column's validity
    and indices. Empty for the rest, which pyarrow reads in place."""
    if c.dictionary >= 0:
        return _private_indices(c, address, dictionaries[c.dictionary].length)
    offsets = _private_offsets(c, address)
    return {} if offsets is None else {1: offsets}


def _private_offsets(c: ColumnDescriptor, address: Address) -> bytes | None:
    """The value offsets of a var-size column, ``offsets[0 .. offset + length]``,
    copied out of shared memory and checked (SPEC.md §8.2): pyarrow indexes
    values with them and trusts them, and the producer's memory may change
    between a check and a read, so pyarrow gets this copy, never the shared
    bytes. None for a column without value offsets."""
    f = parse_format(c.format)
    if c.length == 0 or f is None or f.layout not in ("varbin", "list"):
        return None
    w = f.offset_bytes
    copy = ctypes.string_at(address(c.buffers[1]), (c.offset + c.length + 1) * w)
    lo, hi = (int.from_bytes(copy[(c.offset + k) * w:(c.offset + k + 1) * w], "little", signed=True) for k in (0, c.length))
    limit = c.buffers[2].length if f.layout == "varbin" else c.children[0].length
    if lo < 0 or hi < lo or hi > limit:
        raise GpuringError("FRAME_BOUNDS", f"column '{c.name}': value offsets [{lo}, {hi}] exceed its {limit} values")
    _check_offsets_ascend(c, copy[c.offset * w:], w)
    return copy


def _private_indices(c: ColumnDescriptor, address: Address, entries: int) -> dict[int, bytes]:
    """The validity and indices of a dictionary-encoded column, copied out of
    shared memory and checked (SPEC.md §8.2): every index not marked null names
    one of the dictionary's ``entries``. pyarrow trusts indices, and the shared
    ones (or the null bits) may change after a check, so it gets these copies."""
    import pyarrow as pa
    import pyarrow.compute as pc

    f = parse_format(c.format)
    if c.length == 0 or f is None:
        return {}
    end = c.offset + c.length
    validity = None if c.buffers[0].kind == "absent" else ctypes.string_at(address(c.buffers[0]), (end + 7) // 8)
    indices = ctypes.string_at(address(c.buffers[1]), end * (f.bit_width // 8))
    index_type = getattr(pa, f"{'' if c.format.islower() else 'u'}int{f.bit_width}")()  # c C s S i I l L
    view = pa.Array.from_buffers(index_type, c.length, [None if validity is None else pa.py_buffer(validity),
                                                        pa.py_buffer(indices)], -1, c.offset)
    lo, hi = (pc.min_max(view)[k].as_py() for k in ("min", "max"))
    if lo is not None and (lo < 0 or hi >= entries):
        bad = lo if lo < 0 else hi
        raise GpuringError("FRAME_BOUNDS", f"column '{c.name}': dictionary index {bad} is outside its {entries} entries")
    return {1: indices} if validity is None else {0: validity, 1: indices}


def _check_offsets_ascend(c: ColumnDescriptor, offsets_bytes: bytes, width: int) -> None:
    """Every offset of the slice, not only its ends: pyarrow indexes values with
    all of them. Vectorized with pyarrow, which reading host columns needs anyway."""
    import pyarrow as pa
    import pyarrow.compute as pc

    offsets = pa.Array.from_buffers(pa.int32() if width == 4 else pa.int64(), c.length + 1,
                                    [None, pa.py_buffer(offsets_bytes)])
    ascending = pc.greater_equal(offsets[1:], offsets[:-1])
    if not pc.all(ascending).as_py():
        k = pc.index(ascending, False).as_py() + 1
        raise GpuringError("FRAME_BOUNDS", f"column '{c.name}': value offset {k} is {offsets[k].as_py()}, "
                           f"below the one before it ({offsets[k - 1].as_py()})")


def _import_node(c: ColumnDescriptor, address: Address, dictionaries: list[ColumnDescriptor]) -> ArrowNode:
    private = _private_buffers(c, address, dictionaries)
    flags = (2 if c.nullable else 0) | (1 if c.dictionary_ordered else 0) | (4 if c.map_keys_sorted else 0)
    node = ArrowNode(c.name, c.format, flags, encode_metadata(c.metadata), c.length, c.null_count, c.offset,
                      [0 if b.kind == "absent" else address(b) for b in c.buffers],
                      [_import_node(k, address, dictionaries) for k in c.children])
    for at, bytes_ in private.items():
        copy = ctypes.create_string_buffer(bytes_, len(bytes_))
        node.buffers[at] = ctypes.addressof(copy)
        node.keep.append(copy)
    if c.dictionary >= 0:
        node.dictionary = _import_node(dictionaries[c.dictionary], address, dictionaries)
    return node


def record_batch(d: FrameDescription, address: Address, owner: object, shape: Shape | None = None) -> Any:
    """A pyarrow RecordBatch over a frame's buffers; ``address(buffer)`` gives
    each buffer's host address. ``owner`` lives as long as any of its arrays.
    The first frame of a ``shape`` goes through the C data interface, which
    builds the pyarrow types from the format strings; later ones reuse those
    types and only wrap their buffers (about a fifth of the cost)."""
    if shape is not None and shape.arrow is not None:
        return _from_buffers(d, shape.arrow, address, owner)
    root = ArrowNode("", "+s", 0, encode_metadata(d.metadata), d.row_count, 0, 0, [0],
                      [_import_node(c, address, d.dictionaries) for c in d.columns])
    batch = import_record_batch(root, owner)
    if shape is not None:
        shape.arrow = batch.schema
    return batch


def _from_buffers(d: FrameDescription, schema: Any, address: Address, owner: object) -> Any:
    import pyarrow as pa
    return pa.RecordBatch.from_arrays([_array(pa, f.type, c, d, address, owner) for f, c in zip(schema, d.columns)],
                                      schema=schema)


def _array(pa: Any, t: Any, c: ColumnDescriptor, d: FrameDescription, address: Address, owner: object) -> Any:
    """One column over its buffers, each holding ``owner``. A module function, not a
    closure: a recursive closure is a reference cycle that would hold the lease until
    the garbage collector runs."""
    private = _private_buffers(c, address, d.dictionaries)
    buffers = [None if b.kind == "absent" else pa.foreign_buffer(address(b), b.length, owner) for b in c.buffers]
    for at, bytes_ in private.items():
        buffers[at] = pa.py_buffer(bytes_)
    if t.id == pa.lib.Type_DICTIONARY:  # Array.from_buffers aborts the process on a dictionary type
        values = _array(pa, t.value_type, d.dictionaries[c.dictionary], d, address, owner)
        return pa.DictionaryArray.from_buffers(t, c.length, buffers, values, c.null_count, c.offset)
    kids = [_array(pa, t.field(k).type if t.id == pa.lib.Type_STRUCT else t.value_type, child, d, address, owner)
            for k, child in enumerate(c.children)]
    return pa.Array.from_buffers(t, c.length, buffers, c.null_count, c.offset, kids)
