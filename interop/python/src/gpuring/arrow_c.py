"""The Arrow C data interface (ArrowSchema/ArrowArray) in ctypes: how this
package reads any pyarrow array without knowing its type, and hands frames to
pyarrow zero-copy. Format strings, offsets, lengths and null counts mean the
same thing here as in a frame body, so the mapping is one node per struct.
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any

from .errors import GpuringError
from .format import FormatInfo, parse_format

_FLAG_DICT_ORDERED, _FLAG_NULLABLE, _FLAG_MAP_KEYS_SORTED = 1, 2, 4


class ArrowSchema(ctypes.Structure):
    pass


class ArrowArray(ctypes.Structure):
    pass


_SchemaRelease = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowSchema))
_ArrayRelease = ctypes.CFUNCTYPE(None, ctypes.POINTER(ArrowArray))
ArrowSchema._fields_ = [
    ("format", ctypes.c_char_p), ("name", ctypes.c_char_p), ("metadata", ctypes.c_void_p),
    ("flags", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("children", ctypes.POINTER(ctypes.POINTER(ArrowSchema))), ("dictionary", ctypes.POINTER(ArrowSchema)),
    ("release", _SchemaRelease), ("private_data", ctypes.c_void_p)]
ArrowArray._fields_ = [
    ("length", ctypes.c_int64), ("null_count", ctypes.c_int64), ("offset", ctypes.c_int64),
    ("n_buffers", ctypes.c_int64), ("n_children", ctypes.c_int64),
    ("buffers", ctypes.POINTER(ctypes.c_void_p)), ("children", ctypes.POINTER(ctypes.POINTER(ArrowArray))),
    ("dictionary", ctypes.POINTER(ArrowArray)), ("release", _ArrayRelease), ("private_data", ctypes.c_void_p)]


def metadata_bytes(address: int | None) -> bytes:
    """The raw C data interface metadata at ``address`` (gpuring's encoding too)."""
    if not address:
        return b""
    (count,) = struct.unpack("<i", ctypes.string_at(address, 4))
    at = 4
    for _ in range(2 * count):
        (n,) = struct.unpack("<i", ctypes.string_at(address + at, 4))
        at += 4 + n
    return ctypes.string_at(address, at)


@dataclass
class ArrowNode:
    """One node of an array in C data interface terms. ``buffers`` holds
    (address or 0, byte length) pairs when read from an export, and plain
    addresses (0 for absent) when built for an import."""
    name: str
    format: str
    flags: int
    metadata: bytes
    length: int
    null_count: int
    offset: int
    buffers: list[Any]
    children: list["ArrowNode"] = field(default_factory=list)
    dictionary: "ArrowNode | None" = None
    keep: list[Any] = field(default_factory=list)  # private memory the buffers point into, kept with the import


def _buffer_sizes(fmt: str, arr: ArrowArray) -> list[int]:
    f = parse_format(fmt)
    if f is None:
        raise GpuringError("INVALID_ARGUMENT", f"gpuring does not carry Arrow format {fmt!r} (SPEC.md §8.1 lists the types)")
    return buffer_sizes(f, arr)


def buffer_sizes(f: FormatInfo, arr: ArrowArray) -> list[int]:
    """Each buffer's bytes in an exported array of layout ``f`` (var-size data: up to its last offset)."""
    end = arr.offset + arr.length
    sizes = [(end + 7) // 8]
    if f.layout in ("fixed", "bool"):
        sizes.append((end * f.bit_width + 7) // 8)
    elif f.layout in ("varbin", "list"):
        sizes.append((end + 1) * f.offset_bytes if end else 0)
        if f.layout == "varbin":
            last = 0
            if end and arr.buffers[1]:
                raw = ctypes.string_at(arr.buffers[1] + end * f.offset_bytes, f.offset_bytes)
                last = int.from_bytes(raw, "little", signed=True)
            sizes.append(last)
    return sizes


def read_exported(schema: ArrowSchema, arr: ArrowArray) -> ArrowNode:
    """Walks an exported (schema, array) pair into ArrowNodes."""
    fmt = schema.format.decode()
    sizes = _buffer_sizes(fmt, arr)
    buffers = [(arr.buffers[i] or 0, sizes[i] if arr.buffers[i] else 0) for i in range(arr.n_buffers)]
    node = ArrowNode((schema.name or b"").decode(), fmt, schema.flags, metadata_bytes(schema.metadata),
                        arr.length, arr.null_count, arr.offset, buffers)
    node.children = [read_exported(schema.children[i][0], arr.children[i][0]) for i in range(arr.n_children)]
    if schema.dictionary:
        node.dictionary = read_exported(schema.dictionary[0], arr.dictionary[0])
    return node


class _Imported:
    """Keeps the ctypes structs of one import (and whatever owns the memory
    they point at) alive until pyarrow calls the root release callback."""
    live: dict[int, "_Imported"] = {}

    def __init__(self, owner: object) -> None:
        self.owner = owner
        self.objects: list[Any] = []


def _noop_child_array(p: Any) -> None:
    p[0].release = _ArrayRelease()


def _noop_child_schema(p: Any) -> None:
    p[0].release = _SchemaRelease()


_child_array_release = _ArrayRelease(_noop_child_array)
_child_schema_release = _SchemaRelease(_noop_child_schema)


# pyarrow moves the root struct before releasing it, so the key travels in private_data.
def _root_array_release(p: Any) -> None:
    p[0].release = _ArrayRelease()
    _Imported.live.pop(p[0].private_data, None)


def _root_schema_release(p: Any) -> None:
    p[0].release = _SchemaRelease()
    _Imported.live.pop(p[0].private_data, None)


_root_array_cb = _ArrayRelease(_root_array_release)
_root_schema_cb = _SchemaRelease(_root_schema_release)


def _build(node: ArrowNode, keep: _Imported, root: bool) -> tuple[ArrowSchema, ArrowArray]:
    s, a = ArrowSchema(), ArrowArray()
    strings = [node.format.encode(), node.name.encode(), node.metadata]
    keep.objects += [s, a, strings]
    s.format, s.name = strings[0], strings[1]
    s.metadata = ctypes.cast(ctypes.c_char_p(node.metadata), ctypes.c_void_p).value if node.metadata else None
    s.flags, s.n_children = node.flags, len(node.children)
    a.length, a.null_count, a.offset = node.length, node.null_count, node.offset
    bufs = (ctypes.c_void_p * max(1, len(node.buffers)))(*[b or None for b in node.buffers])
    a.n_buffers, a.buffers, a.n_children = len(node.buffers), bufs, len(node.children)
    built = [_build(c, keep, False) for c in node.children]
    sc = (ctypes.POINTER(ArrowSchema) * max(1, len(built)))(*[ctypes.pointer(x[0]) for x in built])
    ac = (ctypes.POINTER(ArrowArray) * max(1, len(built)))(*[ctypes.pointer(x[1]) for x in built])
    s.children, a.children = sc, ac
    keep.objects += [bufs, sc, ac, *node.keep]
    if node.dictionary is not None:
        ds, da = _build(node.dictionary, keep, False)
        s.dictionary, a.dictionary = ctypes.pointer(ds), ctypes.pointer(da)
    s.release = _root_schema_cb if root else _child_schema_release
    a.release = _root_array_cb if root else _child_array_release
    return s, a


def import_record_batch(root: ArrowNode, owner: object) -> Any:
    """A pyarrow RecordBatch over the memory ``root`` points at, with no copy.
    ``owner`` stays referenced until pyarrow drops the last buffer."""
    import pyarrow as pa

    keep = _Imported(owner)
    s, a = _build(root, keep, True)
    schema_keep = _Imported(None)
    schema_keep.objects = keep.objects
    a.private_data, s.private_data = id(keep), id(schema_keep)
    _Imported.live[id(keep)] = keep
    _Imported.live[id(schema_keep)] = schema_keep
    return pa.RecordBatch._import_from_c(ctypes.addressof(a), ctypes.addressof(s))
