"""The frame-body codec: canonical bytes of a description, and a validating
decoder. Byte-identical to gpr_body_encode (C) and encodeFrame (TypeScript);
the decoder runs the same checks in the same order as gpr_body_validate, so a
damaged body gets the same error code in every language: FRAME_INVALID for
structure, FRAME_BOUNDS for an offset or length outside its container.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from .description import BufferDescriptor, ColumnDescriptor, FrameDescription
from .errors import GpuringError
from .format import FormatInfo, parse_format
from .layout import (BODY_HEADER as H, BODY_MAGIC, BODY_VERSION,
                     BODY_HEADER_BYTES, BUFFER_BYTES, HANDLE_BYTES, MAX_BODY_BYTES, MAX_BUFFERS,
                     MAX_COUNT, MAX_DEPTH, MAX_NODES, MEMORY_KINDS, NODE_BYTES, NODE_DICT_ORDERED,
                     NODE_MAP_KEYS_SORTED, NODE_NULLABLE)
from .metadata import Metadata, decode_metadata, encode_metadata, is_malformed, metadata_pairs

_NODE = struct.Struct("<IIIIIIIIiIQqQ")
_BUFFER = struct.Struct("<HHi16sQQQQ8s64s")
_HEADER = struct.Struct("<IHHIIIIIIQIIHHIQ64s")
_NODE_COUNT = struct.Struct("<I")
_SYNC = struct.Struct("<H")
_HEADER_NUMBERS = struct.Struct("<Q8xH")  # row_count, sync_kind: what a body's shape leaves open
assert _NODE.size == NODE_BYTES and _BUFFER.size == BUFFER_BYTES and _HEADER.size == BODY_HEADER_BYTES


def body_size(nodes: int, buffers: int, strings: int) -> int:
    return BODY_HEADER_BYTES + nodes * NODE_BYTES + buffers * BUFFER_BYTES + (strings + 7) // 8 * 8


def flatten_nodes(columns: list[ColumnDescriptor], out: list[ColumnDescriptor], depth: int = 1) -> None:
    """Appends the nodes of ``columns`` to ``out`` in body order (pre-order, §8).
    Descriptions come from applications: INVALID_ARGUMENT for a list that is not
    one, an item that is not a ColumnDescriptor, nesting past MAX_DEPTH (a column
    that contains itself) or more than MAX_NODES nodes."""
    if not isinstance(columns, (list, tuple)):
        raise _bad_argument(f"columns, children and dictionaries are lists, not {type(columns).__name__}")
    if columns and depth > MAX_DEPTH:
        raise _bad_argument(f"columns nest deeper than {MAX_DEPTH} levels")
    for c in columns:
        if not isinstance(c, ColumnDescriptor):
            raise _bad_argument(f"a column is a ColumnDescriptor, not {type(c).__name__}")
        if len(out) >= MAX_NODES:
            raise _bad_argument(f"more than {MAX_NODES} columns in all")
        out.append(c)
        flatten_nodes(c.children, out, depth + 1)


def _bad_argument(what: str) -> GpuringError:
    return GpuringError("INVALID_ARGUMENT", f"invalid frame description: {what}")


def _check_count(v: object, what: str, low: int = 0) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < low or v > MAX_COUNT:
        raise _bad_argument(f"{what} must be an integer from {low} to 2**53-1")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_bytes(v: object, n: int, what: str) -> None:
    if not isinstance(v, (bytes, bytearray)) or len(v) != n:
        raise _bad_argument(f"{what} must be {n} bytes")


def _check_buffer(b: BufferDescriptor) -> None:
    if not isinstance(b, BufferDescriptor):
        raise _bad_argument(f"a buffer is a BufferDescriptor, not {type(b).__name__}")
    if not all(_is_int(v) for v in (b.device_ordinal, b.allocation_id, b.pool_id)):
        raise _bad_argument("device ordinal, allocation id and pool id must be integers")
    _check_bytes(b.device_uuid, 16, "device uuid")
    _check_bytes(b.handle, HANDLE_BYTES, "handle")
    if b.kind not in MEMORY_KINDS:
        raise _bad_argument(f"unknown memory kind {b.kind!r}")
    if b.kind == "cuda-pool" and not 1 <= b.pool_id < 1 << 64:
        raise _bad_argument("a cuda-pool buffer needs a pool_id from 1 to 2**64-1")
    if not -1 <= b.device_ordinal <= 0x7FFFFFFF:
        raise _bad_argument("device ordinal out of range")
    _check_count(b.offset, "buffer offset")
    _check_count(b.length, "buffer length")
    if not 0 <= b.allocation_id < 1 << 64:
        raise _bad_argument("allocation id out of range")


def _check_metadata(pairs: object, what: str) -> None:
    if pairs is not None and not (isinstance(pairs, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(s, str) for s in p) for p in pairs)):
        raise _bad_argument(f"{what} must be None or a list of (key, value) string pairs")


def _check_description(d: FrameDescription, nodes: list[ColumnDescriptor]) -> None:
    _check_count(d.row_count, "row count")
    if d.sync_kind not in (0, 1, 2) or isinstance(d.sync_kind, bool):
        raise _bad_argument("sync kind must be 0, 1 or 2")
    _check_bytes(d.sync_handle, HANDLE_BYTES, "sync handle")
    _check_metadata(d.metadata, "schema metadata")
    for n in nodes:
        if not isinstance(n.name, str) or not isinstance(n.format, str) or not _is_int(n.dictionary):
            raise _bad_argument("a column's name and format must be strings and its dictionary an integer")
        if not isinstance(n.buffers, (list, tuple)):
            raise _bad_argument(f"column {n.name!r}: buffers are a list, not {type(n.buffers).__name__}")
        _check_metadata(n.metadata, f"column {n.name!r}: metadata")
        if not n.format:
            raise _bad_argument(f"column {n.name!r} has an empty format")
        _check_count(n.length, "length")
        _check_count(n.offset, "offset")
        _check_count(n.null_count, "null count", -1)
        if not -1 <= n.dictionary < len(d.dictionaries):
            raise _bad_argument(f"column {n.name!r} names dictionary {n.dictionary}")
        for b in n.buffers:
            _check_buffer(b)


def encode_frame(d: FrameDescription) -> bytes:
    """The canonical body of a description: nodes in pre-order (columns, then
    dictionaries), strings in node order (name, format, metadata) with schema
    metadata last, every reserved and padding byte zero."""
    if not isinstance(d, FrameDescription):
        raise GpuringError("INVALID_ARGUMENT", f"encode_frame() takes a FrameDescription, not {type(d).__name__}")
    nodes: list[ColumnDescriptor] = []
    flatten_nodes(d.columns, nodes)
    dictionary_roots: list[int] = []
    if not isinstance(d.dictionaries, (list, tuple)):
        raise _bad_argument(f"dictionaries are a list, not {type(d.dictionaries).__name__}")
    for dictionary in d.dictionaries:
        dictionary_roots.append(len(nodes))
        flatten_nodes([dictionary], nodes)
    _check_description(d, nodes)
    node_strings = [(n.name.encode(), n.format.encode(), encode_metadata(n.metadata)) for n in nodes]
    schema_metadata = encode_metadata(d.metadata)
    strings_length = sum(len(s) for parts in node_strings for s in parts) + len(schema_metadata)
    buffer_count = sum(len(n.buffers) for n in nodes)
    size = body_size(len(nodes), buffer_count, strings_length)
    if size > MAX_BODY_BYTES:
        raise GpuringError("INVALID_ARGUMENT", f"frame body would be {size} bytes; the limit is {MAX_BODY_BYTES}")
    out = bytearray(size)
    strings_at = BODY_HEADER_BYTES + len(nodes) * NODE_BYTES + buffer_count * BUFFER_BYTES
    at = 0

    def put(s: bytes) -> int:
        nonlocal at
        out[strings_at + at:strings_at + at + len(s)] = s
        at += len(s)
        return at - len(s)

    buffers_at = BODY_HEADER_BYTES + len(nodes) * NODE_BYTES
    for i, (n, (name, fmt, meta)) in enumerate(zip(nodes, node_strings)):
        flags = ((NODE_NULLABLE if n.nullable else 0) | (NODE_DICT_ORDERED if n.dictionary_ordered else 0)
                 | (NODE_MAP_KEYS_SORTED if n.map_keys_sorted else 0))
        dictionary_node = -1 if n.dictionary < 0 else dictionary_roots[n.dictionary]
        _NODE.pack_into(out, BODY_HEADER_BYTES + i * NODE_BYTES, put(name), len(name), put(fmt), len(fmt),
                        put(meta), len(meta), len(n.children), flags, dictionary_node, len(n.buffers),
                        n.length, n.null_count, n.offset)
        for b in n.buffers:
            _BUFFER.pack_into(out, buffers_at, MEMORY_KINDS.index(b.kind), 0, b.device_ordinal, b.device_uuid,
                              b.offset, b.length, b.allocation_id, b.pool_id if b.kind == "cuda-pool" else 0,
                              bytes(8), b.handle)
            buffers_at += BUFFER_BYTES
    metadata_offset = put(schema_metadata)
    _HEADER.pack_into(out, 0, BODY_MAGIC, BODY_VERSION, 0, size, len(nodes), buffer_count, len(d.columns),
                      len(d.dictionaries), strings_length, d.row_count, metadata_offset, len(schema_metadata),
                      d.sync_kind, 0, 0, 0, d.sync_handle)
    return bytes(out)


def with_buffers(body: bytes, d: FrameDescription) -> bytes:
    """``body`` with its buffers and its sync event written from ``d``, which
    must describe ``body`` in everything else (a bridge sink points a received
    body at its own memory this way). For a canonical ``body`` this is
    encode_frame(d), at a fraction of the cost."""
    out = bytearray(body)
    buffers_at = BODY_HEADER_BYTES + _NODE_COUNT.unpack_from(body, H["node_count"])[0] * NODE_BYTES
    for b in d.buffers():
        _check_buffer(b)
        _BUFFER.pack_into(out, buffers_at, MEMORY_KINDS.index(b.kind), 0, b.device_ordinal, b.device_uuid,
                          b.offset, b.length, b.allocation_id, b.pool_id if b.kind == "cuda-pool" else 0,
                          bytes(8), b.handle)
        buffers_at += BUFFER_BYTES
    _put_sync(out, d.sync_kind, d.sync_handle)
    return bytes(out)


def with_sync(body: bytes, sync_kind: int, sync_handle: bytes) -> bytes:
    """``body`` ordered by another event (or none: kind 0, handle zero); a
    prepared frame's body gets each publish's event this way."""
    out = bytearray(body)
    _put_sync(out, sync_kind, sync_handle)
    return bytes(out)


def _put_sync(out: bytearray, sync_kind: int, sync_handle: bytes) -> None:
    _SYNC.pack_into(out, H["sync_kind"], sync_kind)
    out[H["sync_handle"]:H["sync_handle"] + HANDLE_BYTES] = sync_handle


def _invalid(what: str) -> GpuringError:
    return GpuringError("FRAME_INVALID", f"frame body: {what}")


def _bounds(what: str) -> GpuringError:
    return GpuringError("FRAME_BOUNDS", f"frame body: {what}")


def _in_range(offset: int, length: int, limit: int) -> bool:
    return offset <= limit and length <= limit - offset



def _parse_format_bytes(raw: bytes) -> FormatInfo | None:
    """UTF-8 without NUL, as in C: a time zone is free text that the C Arrow
    export passes on NUL-terminated."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\0" in text else parse_format(text)

class NodeStatic(NamedTuple):
    """A validated node's fields that every body of its shape shares."""
    name: str
    format: str
    nullable: bool
    dictionary_ordered: bool
    map_keys_sorted: bool
    metadata: Metadata
    dictionary: int  # index into the description's dictionaries, -1 for none
    child_count: int
    buffer_count: int


class BodyStatics(NamedTuple):
    nodes: list[NodeStatic]
    metadata: Metadata  # the schema's


class _Validator:
    def __init__(self, body: bytes, shape: "_Validator | None" = None) -> None:
        """Reads ``body`` and checks its header; with ``shape``, a validated body
        whose shape (shape_key) ``body`` shares, only its numbers are read, for
        check_numbers."""
        if shape is not None:
            self._read_numbers(body, shape)
            return
        if len(body) < BODY_HEADER_BYTES:
            raise _invalid("shorter than its header")
        self.body = body
        (magic, version, _flags, body_length, self.node_count, self.buffer_count, self.root_count,
         self.dictionary_count, self.strings_length, self.row_count, self.metadata_offset,
         self.metadata_length, self.sync_kind, *_rest) = _HEADER.unpack_from(body, 0)
        if magic != BODY_MAGIC or version != BODY_VERSION:
            raise _invalid("bad magic or version")
        if (body_length != len(body) or self.node_count > MAX_NODES or self.buffer_count > MAX_BUFFERS
                or self.sync_kind > 2
                or body_size(self.node_count, self.buffer_count, self.strings_length) != len(body)):
            raise _invalid("counts do not add up to its length")
        if self.row_count > MAX_COUNT:
            raise _bounds("row count out of range")
        if self.root_count + self.dictionary_count > self.node_count:
            raise _invalid("more trees than nodes")
        self.strings_at = BODY_HEADER_BYTES + self.node_count * NODE_BYTES + self.buffer_count * BUFFER_BYTES
        if not _in_range(self.metadata_offset, self.metadata_length, self.strings_length):
            raise _bounds("metadata outside the string table")
        if is_malformed(decode_metadata(self.string(self.metadata_offset, self.metadata_length))):
            raise _invalid("malformed schema metadata")
        self.nodes = [_NODE.unpack_from(body, BODY_HEADER_BYTES + i * NODE_BYTES) for i in range(self.node_count)]
        first = BODY_HEADER_BYTES + self.node_count * NODE_BYTES
        self.buffers = [_BUFFER.unpack_from(body, first + i * BUFFER_BYTES) for i in range(self.buffer_count)]
        self.is_root = bytearray(self.node_count)
        self.formats: list[FormatInfo] = []

    def _read_numbers(self, body: bytes, shape: "_Validator") -> None:
        self.body = body
        self.node_count, self.buffer_count, self.strings_at = shape.node_count, shape.buffer_count, shape.strings_at
        self.root_count, self.dictionary_count = shape.root_count, shape.dictionary_count
        self.strings_length, self.metadata_offset, self.metadata_length = \
            shape.strings_length, shape.metadata_offset, shape.metadata_length
        self.is_root, self.formats = shape.is_root, shape.formats
        self.row_count, self.sync_kind = _HEADER_NUMBERS.unpack_from(body, H["row_count"])
        self.nodes = [_NODE.unpack_from(body, BODY_HEADER_BYTES + i * NODE_BYTES) for i in range(self.node_count)]
        first = BODY_HEADER_BYTES + self.node_count * NODE_BYTES
        self.buffers = [_BUFFER.unpack_from(body, first + i * BUFFER_BYTES) for i in range(self.buffer_count)]

    def check_numbers(self) -> None:
        """The checks of decode_frame that a body's numbers can fail, for a body
        whose shape passed all the others."""
        if self.sync_kind > 2:
            raise _invalid("counts do not add up to its length")
        if self.row_count > MAX_COUNT:
            raise _bounds("row count out of range")
        next_buffer = 0
        for i in range(self.node_count):
            next_buffer = self.check_node_numbers(i, next_buffer)

    def string(self, offset: int, length: int) -> bytes:
        return self.body[self.strings_at + offset:self.strings_at + offset + length]

    def check_trees(self) -> None:
        """Every tree complete, at most MAX_DEPTH deep, root_count + dictionary_count of them."""
        stack: list[int] = []
        trees = 0
        for i, n in enumerate(self.nodes):
            child_count = n[6]
            if not stack:
                trees += 1
                self.is_root[i] = 1 if trees <= self.root_count else 2
            if child_count > self.node_count - i - 1:
                raise _invalid(f"node {i}: more children than nodes")
            if child_count and len(stack) == MAX_DEPTH:
                raise _invalid(f"node {i}: nested deeper than 64 levels")
            if child_count:
                stack.append(child_count)
            else:
                while stack:
                    stack[-1] -= 1
                    if stack[-1]:
                        break
                    stack.pop()
        if stack or trees != self.root_count + self.dictionary_count:
            raise _invalid("node trees do not match the counts")

    def check_node(self, i: int, next_buffer: int) -> int:
        self.check_node_shape(i)
        return self.check_node_numbers(i, next_buffer)

    def check_node_shape(self, i: int) -> None:
        """What a node says that is the same in every frame of its shape (body_shapes.py):
        strings, format, flags, buffer count, dictionary reference."""
        (name_off, name_len, fmt_off, fmt_len, meta_off, meta_len, _children, flags, dictionary,
         buffer_count, *_numbers) = self.nodes[i]
        lim = self.strings_length
        if not (_in_range(name_off, name_len, lim) and _in_range(fmt_off, fmt_len, lim)
                and _in_range(meta_off, meta_len, lim)):
            raise _bounds(f"node {i}: string outside the string table")
        if is_malformed(decode_metadata(self.string(meta_off, meta_len))):
            raise _invalid(f"node {i}: malformed metadata")
        try:
            self.string(name_off, name_len).decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(f"node {i}: name is not UTF-8") from None
        f = _parse_format_bytes(self.string(fmt_off, fmt_len))
        if f is None or fmt_len == 0:
            raise _invalid(f"node {i}: unsupported or malformed format string")
        self.formats.append(f)
        if flags & ~7:
            raise _invalid(f"node {i}: unknown flags")
        if buffer_count != f.buffers:
            raise _invalid(f"node {i}: wrong number of buffers for its type")
        if dictionary != -1 and (dictionary <= i or dictionary >= self.node_count
                                 or self.is_root[dictionary] != 2 or not f.is_integer):
            raise _invalid(f"node {i}: bad dictionary reference")

    def check_node_numbers(self, i: int, next_buffer: int) -> int:
        """The checks on a node's numbers (lengths, null count, offset, its buffers'
        bounds and handles), after check_node_shape; returns its first buffer's successor."""
        length, null_count, offset = self.nodes[i][10:]
        f = self.formats[i]
        if null_count < -1 or (null_count > 0 and null_count > length):
            raise _bounds(f"node {i}: null count out of range")
        if length > MAX_COUNT or offset > MAX_COUNT - length:
            raise _bounds(f"node {i}: length or offset out of range")
        if self.is_root[i] == 1 and length != self.row_count:
            raise _bounds(f"node {i}: column length differs from row count")
        if f.buffers > self.buffer_count - next_buffer:
            raise _invalid(f"node {i}: more buffers than the header says")
        self._check_buffers(i, next_buffer, f)
        self._check_children(i, f)
        return next_buffer + f.buffers

    def _check_buffers(self, i: int, first: int, f: FormatInfo) -> None:
        n = self.nodes[i]
        end = n[12] + n[10]
        for b in range(f.buffers):
            kind, _flags, ordinal, _uuid, offset, length, _alloc, pool_id, _res, handle = self.buffers[first + b]
            if kind > 4:
                raise _invalid(f"node {i}: unknown memory kind")
            if ordinal < -1:
                raise _invalid(f"node {i}: device ordinal below -1")
            if kind == 0:
                if length != 0:
                    raise _invalid(f"node {i}: absent buffer has a length")
                if (n[11] > 0) if b == 0 else (end > 0):
                    raise _invalid(f"node {i}: a required buffer is absent")
                if offset > MAX_COUNT:
                    raise _bounds(f"node {i}: absent buffer offset out of range")
                continue
            if length > MAX_COUNT or offset > MAX_COUNT - length:
                raise _bounds(f"node {i}: buffer offset + length out of range")
            if kind == 1 and 0 not in handle:
                raise _invalid(f"node {i}: host handle is not NUL-terminated")
            if kind == 3 and pool_id == 0:
                raise _invalid(f"node {i}: cuda-pool buffer without a pool id")
            if kind == 4 and _alloc == 0:
                raise _invalid(f"node {i}: cuda-vmm buffer without a span id")
            need = 0
            if b == 0:
                need = (end + 7) // 8
            elif f.layout in ("fixed", "bool"):
                need = (end * f.bit_width + 7) // 8
            elif b == 1 and f.layout in ("varbin", "list"):
                need = (end + 1) * f.offset_bytes if end else 0
            if length < need:
                raise _bounds(f"node {i}: buffer too small for offset + length")

    def _check_children(self, i: int, f: FormatInfo) -> None:
        n = self.nodes[i]
        end = n[12] + n[10]
        if f.children >= 0 and n[6] != f.children:
            raise _invalid(f"node {i}: wrong number of children for its type")
        if f.layout == "fixed-list" and end > MAX_COUNT // f.list_size:
            raise _bounds(f"node {i}: fixed-size list too long")
        need = end if f.layout == "struct" else end * f.list_size if f.layout == "fixed-list" else 0
        c = i + 1
        for _ in range(n[6]):
            if self.nodes[c][10] < need:
                raise _bounds(f"node {i}: child shorter than its parent needs")
            pending = 1
            while pending:
                pending += self.nodes[c][6] - 1
                c += 1

    def statics(self) -> "BodyStatics":
        """What describe() takes from the body that every frame of its shape shares."""
        dictionary_roots = [i for i, r in enumerate(self.is_root) if r == 2]
        nodes = []
        for name_off, name_len, fmt_off, fmt_len, meta_off, meta_len, child_count, flags, dictionary, buffer_count, \
                *_numbers in self.nodes:
            nodes.append(NodeStatic(
                self.string(name_off, name_len).decode(), self.string(fmt_off, fmt_len).decode(errors="replace"),
                bool(flags & NODE_NULLABLE), bool(flags & NODE_DICT_ORDERED), bool(flags & NODE_MAP_KEYS_SORTED),
                metadata_pairs(self.string(meta_off, meta_len)),
                -1 if dictionary < 0 else dictionary_roots.index(dictionary), child_count, buffer_count))
        return BodyStatics(nodes, metadata_pairs(self.string(self.metadata_offset, self.metadata_length)))

    def describe(self, statics: "BodyStatics | None" = None) -> FrameDescription:
        """The description; ``statics`` are those of an earlier body of this shape, if any."""
        shared = statics or self.statics()
        next_node = next_buffer = 0

        def build() -> ColumnDescriptor:
            nonlocal next_node, next_buffer
            i = next_node
            next_node += 1
            s, (length, null_count, offset) = shared.nodes[i], self.nodes[i][10:]
            buffers = [BufferDescriptor(MEMORY_KINDS[k], o, u, off, ln, a, h, p if k == 3 else 0)
                       for k, _f, o, u, off, ln, a, p, _r, h in self.buffers[next_buffer:next_buffer + s.buffer_count]]
            next_buffer += s.buffer_count
            children = [build() for _ in range(s.child_count)]
            return ColumnDescriptor(s.name, s.format, length, buffers, s.nullable, s.dictionary_ordered,
                                    s.map_keys_sorted, _copy(s.metadata), s.dictionary, null_count, offset, children)

        columns = [build() for _ in range(self.root_count)]
        dictionaries = [build() for _ in range(self.dictionary_count)]
        return FrameDescription(self.row_count, columns, dictionaries, _copy(shared.metadata),
                                self.sync_kind, self.body[H["sync_handle"]:H["sync_handle"] + HANDLE_BYTES])


def _copy(metadata: Metadata) -> Metadata:
    """Descriptions are the caller's to change: none shares a list with another."""
    return None if metadata is None else list(metadata)


def validate(body: bytes) -> _Validator:
    """Every check of decode_frame, in its order; the validator then describes the body."""
    if not isinstance(body, (bytes, bytearray, memoryview)):
        raise GpuringError("INVALID_ARGUMENT", f"a frame body is bytes, not {type(body).__name__}")
    v = _Validator(bytes(body))
    v.check_trees()
    next_buffer = 0
    for i in range(v.node_count):
        next_buffer = v.check_node(i, next_buffer)
    if next_buffer != v.buffer_count:
        raise _invalid("fewer buffers used than declared")
    return v


def decode_frame(body: bytes) -> FrameDescription:
    """Validates a frame body and returns its description. ``body`` must be a
    private copy (``bytes``): shared memory could change between check and use."""
    return validate(body).describe()
