"""The decoded form of a frame body: what a frame says about its columns and
where their buffers are. ``encode_frame(d)`` and ``decode_frame(bytes)`` are
inverses (metadata aside: empty and absent encode alike).

``to_json``/``from_json`` give the language-neutral form the golden fixtures
use (fixtures/README.md): the TypeScript description with byte strings in hex
and the 64-bit allocation id as a decimal string.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from typing import Any, Iterator

from .layout import HANDLE_BYTES, MEMORY_KINDS
from .metadata import Metadata


DEVICE_KINDS = ("cuda-ipc", "cuda-pool", "cuda-vmm")


@dataclass
class BufferDescriptor:
    """One buffer of a column, in Arrow order (validity, offsets, data)."""
    kind: str = "absent"           # absent, host, cuda-ipc, cuda-pool or cuda-vmm
    device_ordinal: int = -1       # producer's device ordinal; -1 for host
    device_uuid: bytes = bytes(16)
    offset: int = 0                # bytes from the base of the allocation the handle names
    length: int = 0
    allocation_id: int = 0         # cuda-ipc, cuda-pool: CU_POINTER_ATTRIBUTE_BUFFER_ID; 0 for host
    handle: bytes = bytes(HANDLE_BYTES)  # host: arena name; cuda-ipc: CUipcMemHandle; cuda-pool: export data
    pool_id: int = 0               # cuda-pool: the producer's number for the pool (SPEC.md §9b); else 0

    @staticmethod
    def host(arena: str, offset: int, length: int) -> "BufferDescriptor":
        """A host buffer: ``length`` bytes at ``offset`` in the producer arena named ``arena``."""
        name = arena.encode()[:HANDLE_BYTES - 1]
        return BufferDescriptor("host", -1, bytes(16), offset, length, 0, name.ljust(HANDLE_BYTES, b"\0"))

    @property
    def arena_name(self) -> str:
        """Host buffers: the name of the arena that holds the bytes."""
        return self.handle.split(b"\0", 1)[0].decode(errors="replace")


@dataclass
class ColumnDescriptor:
    """One field of the schema together with its array data."""
    name: str
    format: str                    # Arrow C data interface format string
    length: int
    buffers: list[BufferDescriptor]
    nullable: bool = True
    dictionary_ordered: bool = False
    map_keys_sorted: bool = False
    metadata: Metadata = None
    dictionary: int = -1           # index into FrameDescription.dictionaries
    null_count: int = -1           # -1 when unknown
    offset: int = 0                # element offset; also indexes the validity bits
    children: list["ColumnDescriptor"] = field(default_factory=list)


@dataclass
class FrameDescription:
    row_count: int
    columns: list[ColumnDescriptor]
    dictionaries: list[ColumnDescriptor] = field(default_factory=list)
    metadata: Metadata = None
    sync_kind: int = 0             # 0 none, 2 a cuda-ipc event handle in sync_handle
    sync_handle: bytes = bytes(HANDLE_BYTES)

    def buffers(self) -> Iterator[BufferDescriptor]:
        """Every buffer of every column and dictionary, in wire order."""
        def visit(columns: list[ColumnDescriptor]) -> Iterator[BufferDescriptor]:
            for c in columns:
                yield from c.buffers
                yield from visit(c.children)
        yield from visit(self.columns)
        yield from visit(self.dictionaries)


def _meta_json(m: Metadata) -> list[list[str]] | None:
    return None if m is None else [[k, v] for k, v in m]


def _meta_from(m: list[list[str]] | None) -> Metadata:
    return None if m is None else [(k, v) for k, v in m]


def buffer_to_json(b: BufferDescriptor) -> dict[str, Any]:
    return {"kind": b.kind, "deviceOrdinal": b.device_ordinal, "deviceUuid": b.device_uuid.hex(),
            "offset": b.offset, "length": b.length, "allocationId": str(b.allocation_id),
            "handle": b.handle.hex(), **({"poolId": str(b.pool_id)} if b.kind == "cuda-pool" else {})}


def column_to_json(c: ColumnDescriptor) -> dict[str, Any]:
    return {"name": c.name, "format": c.format, "nullable": c.nullable,
            "dictionaryOrdered": c.dictionary_ordered, "mapKeysSorted": c.map_keys_sorted,
            "metadata": _meta_json(c.metadata), "dictionary": c.dictionary, "length": c.length,
            "nullCount": c.null_count, "offset": c.offset,
            "buffers": [buffer_to_json(b) for b in c.buffers],
            "children": [column_to_json(k) for k in c.children]}


def to_json(d: FrameDescription) -> dict[str, Any]:
    """The description as the fixtures' JSON form (fixtures/README.md)."""
    return {"rowCount": d.row_count, "metadata": _meta_json(d.metadata),
            "columns": [column_to_json(c) for c in d.columns],
            "dictionaries": [column_to_json(c) for c in d.dictionaries],
            "syncKind": d.sync_kind, "syncHandle": d.sync_handle.hex()}


def buffer_from_json(j: dict[str, Any]) -> BufferDescriptor:
    if j["kind"] not in MEMORY_KINDS:
        raise ValueError(f"unknown memory kind {j['kind']!r}")
    return BufferDescriptor(j["kind"], j["deviceOrdinal"], bytes.fromhex(j["deviceUuid"]), j["offset"],
                            j["length"], int(j["allocationId"]), bytes.fromhex(j["handle"]), int(j.get("poolId", 0)))


def column_from_json(j: dict[str, Any]) -> ColumnDescriptor:
    return ColumnDescriptor(j["name"], j["format"], j["length"], [buffer_from_json(b) for b in j["buffers"]],
                            j["nullable"], j["dictionaryOrdered"], j["mapKeysSorted"],
                            _meta_from(j["metadata"]), j["dictionary"], j["nullCount"], j["offset"],
                            [column_from_json(k) for k in j["children"]])


def from_json(j: dict[str, Any]) -> FrameDescription:
    """The description a fixtures JSON object gives (the inverse of ``to_json``)."""
    return FrameDescription(j["rowCount"], [column_from_json(c) for c in j["columns"]],
                            [column_from_json(c) for c in j["dictionaries"]], _meta_from(j["metadata"]),
                            j["syncKind"], bytes.fromhex(j["syncHandle"]))
