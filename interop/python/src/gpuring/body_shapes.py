"""A consumer's cache of the frame-body shapes it has validated.

Frames of one stream differ in their numbers (row count, lengths, null counts,
offsets, where each buffer lies), not in their shape (names, formats, flags,
metadata, nesting, memory kinds). A body whose shape this cache validated
before gets only the checks its numbers can fail (codec._Validator.check_numbers)
and a description built from the kept names and formats: about a third of a
whole decode_frame for a one-column frame, less for wide ones. Any failure runs
the whole validator, so a damaged body gets the same error code as without the
cache (SPEC.md §8.2). The kept shape also carries work done once per shape by
the reader, such as the pyarrow schema of host frames (host_columns.py).
"""
from __future__ import annotations

import struct
from typing import Any

from .codec import BodyStatics, _Validator, validate
from .description import FrameDescription
from .errors import GpuringError
from .layout import BODY_HEADER as H, BODY_HEADER_BYTES, BODY_NODE, BUFFER_BYTES, MAX_BUFFERS, MAX_NODES, NODE_BYTES

CAPACITY = 64  # shapes per consumer; the oldest goes first

_COUNTS = struct.Struct("<II")  # node_count, buffer_count: adjacent in the header
_NODE_SHAPE = BODY_NODE["length"]  # a node's bytes before its numbers
_BUFFER_SHAPE = 8  # kind, flags, device ordinal: the rest of a buffer says where it lies


def shape_key(body: bytes) -> bytes | None:
    """Every byte of ``body`` the shape checks read, and none they do not:
    two bodies with equal keys pass or fail those checks alike. None when the
    header's counts do not fit the body (the whole validator says why)."""
    if len(body) < BODY_HEADER_BYTES:
        return None
    nodes, buffers = _COUNTS.unpack_from(body, H["node_count"])
    if nodes > MAX_NODES or buffers > MAX_BUFFERS:
        return None
    first_buffer = BODY_HEADER_BYTES + nodes * NODE_BYTES
    strings_at = first_buffer + buffers * BUFFER_BYTES
    if strings_at > len(body):
        return None
    parts = [body[:H["row_count"]], body[H["metadata_offset"]:H["sync_kind"]]]
    parts += [body[at:at + _NODE_SHAPE] for at in range(BODY_HEADER_BYTES, first_buffer, NODE_BYTES)]
    parts += [body[at:at + _BUFFER_SHAPE] for at in range(first_buffer, strings_at, BUFFER_BYTES)]
    parts.append(body[strings_at:])
    return b"".join(parts)


class Shape:
    """One validated shape: the validator of its first body, and what describing
    and reading its frames keep (``arrow``: the reader's, e.g. a pyarrow schema)."""

    def __init__(self, first: _Validator) -> None:
        self.first = first
        self.statics: BodyStatics = first.statics()
        self.arrow: Any = None

    def describe(self, body: bytes) -> FrameDescription:
        v = _Validator(body, self.first)
        v.check_numbers()
        return v.describe(self.statics)


class BodyShapes:
    """decode_frame with the shapes seen before kept (see the module)."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._shapes: dict[bytes, Shape] = {}

    def decode(self, body: bytes) -> tuple[FrameDescription, Shape]:
        """The description of ``body`` (a private copy, as for decode_frame) and its
        shape; raises what decode_frame raises."""
        key = shape_key(body)
        shape = None if key is None else self._shapes.get(key)
        if shape is not None:
            try:
                return shape.describe(body), shape
            except GpuringError:
                pass  # the whole validator says what is wrong, with decode_frame's code
        v = validate(body)
        shape = Shape(v)
        if key is not None:
            if len(self._shapes) >= self._capacity:
                del self._shapes[next(iter(self._shapes))]
            self._shapes[key] = shape
        return v.describe(shape.statics), shape
