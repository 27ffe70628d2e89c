"""Schema once per stream (SPEC.md §14.3, templates): a frame whose description
differs from an earlier one on the link only in its numbers travels as a patch
of those numbers against that earlier description, the template.

The numbers are the row count, each node's length, null count and offset, and
each buffer's length. Everything else a sink keeps from the template (names,
formats, metadata, buffer kinds); what a source's buffers point at (offsets,
handles, allocation ids) and the sync event it ignores anyway, since it rewrites
every buffer to name its own memory and clears the event. The sink builds the
whole body from template and patch and validates it like any other (§8.2).
"""
from __future__ import annotations

import struct

from ..layout import BODY_BUFFER, BODY_HEADER, BODY_HEADER_BYTES, BUFFER_BYTES, HANDLE_BYTES, NODE_BYTES, BODY_NODE
from . import wire as W

MAX_TEMPLATES = 16  # per link: ids 1 .. 16

_COUNTS = struct.Struct("<II")  # node_count, buffer_count: adjacent in the body header
_NODE_NUMBERS = struct.Struct("<QqQ")  # length, null_count, offset: adjacent in a node
# Per buffer: what points into the source's memory, which neither side compares.
_BUFFER_SOURCE = [(BODY_BUFFER["offset"], 8), (BODY_BUFFER["alloc_id"], 16), (BODY_BUFFER["handle"], HANDLE_BYTES)]


def _counts(body: bytes) -> tuple[int, int]:
    return _COUNTS.unpack_from(body, BODY_HEADER["node_count"])


def patch_length(body: bytes) -> int:
    nodes, buffers = _counts(body)
    return 8 + nodes * _NODE_NUMBERS.size + buffers * 8


def _numbers_at(body: bytes) -> tuple[list[int], list[int]]:
    """Where each node's numbers and each buffer's length lie in ``body``."""
    nodes, buffers = _counts(body)
    node_at = [BODY_HEADER_BYTES + i * NODE_BYTES + BODY_NODE["length"] for i in range(nodes)]
    first_buffer = BODY_HEADER_BYTES + nodes * NODE_BYTES
    buffer_at = [first_buffer + j * BUFFER_BYTES + BODY_BUFFER["length"] for j in range(buffers)]
    return node_at, buffer_at


def _shape(body: bytes) -> bytes:
    """``body`` with the numbers, the source's pointers and the sync event zeroed:
    two frames of one shape differ in nothing a patch does not carry."""
    out = bytearray(body)
    node_at, buffer_at = _numbers_at(body)
    out[BODY_HEADER["row_count"]:BODY_HEADER["row_count"] + 8] = bytes(8)
    out[BODY_HEADER["sync_kind"]:BODY_HEADER["sync_handle"] + HANDLE_BYTES] = \
        bytes(BODY_HEADER["sync_handle"] + HANDLE_BYTES - BODY_HEADER["sync_kind"])
    for at in node_at:
        out[at:at + _NODE_NUMBERS.size] = bytes(_NODE_NUMBERS.size)
    for at in buffer_at:
        buffer = at - BODY_BUFFER["length"]
        out[at:at + 8] = bytes(8)
        for field, size in _BUFFER_SOURCE:
            out[buffer + field:buffer + field + size] = bytes(size)
    return bytes(out)


def _patch(body: bytes) -> bytes:
    node_at, buffer_at = _numbers_at(body)
    parts = [body[BODY_HEADER["row_count"]:BODY_HEADER["row_count"] + 8]]
    parts += [body[at:at + _NODE_NUMBERS.size] for at in node_at]
    parts += [body[at:at + 8] for at in buffer_at]
    return b"".join(parts)


class SourceTemplates:
    """A source's templates on one link: the first frame of each shape is sent
    whole and kept (flag KEEP), later ones as a patch (flag PATCH)."""

    def __init__(self) -> None:
        self._ids: dict[bytes, int] = {}

    def encode(self, body: bytes) -> tuple[int, int, bytes]:
        """(FRAME flags, template id, what goes as the description) for ``body``."""
        shape = _shape(body)
        template = self._ids.get(shape)
        if template is not None:
            return W.FRAME_PATCH, template, _patch(body)
        if len(self._ids) < MAX_TEMPLATES:
            template = self._ids[shape] = len(self._ids) + 1
            return W.FRAME_KEEP, template, body
        return 0, 0, body  # a link with more shapes than templates sends the rest whole


class SinkTemplates:
    """A sink's templates on one link, by id."""

    def __init__(self) -> None:
        self._bodies: dict[int, bytes] = {}

    def keep(self, template: int, body: bytes) -> None:
        if not 1 <= template <= MAX_TEMPLATES:
            raise W.bad(f"template {template} (1 to {MAX_TEMPLATES})")
        self._bodies[template] = body

    def body(self, template: int, patch: bytes) -> bytes:
        """The whole description body of a PATCH frame, to decode and validate."""
        base = self._bodies.get(template)
        if base is None:
            raise W.bad(f"a patch against template {template}, which this link has not kept")
        if len(patch) != patch_length(base):
            raise W.bad(f"a patch of {len(patch)} bytes against template {template} (of {patch_length(base)})")
        out = bytearray(base)
        node_at, buffer_at = _numbers_at(base)
        out[BODY_HEADER["row_count"]:BODY_HEADER["row_count"] + 8] = patch[:8]
        at = 8
        for where in node_at:
            out[where:where + _NODE_NUMBERS.size] = patch[at:at + _NODE_NUMBERS.size]
            at += _NODE_NUMBERS.size
        for where in buffer_at:
            out[where:where + 8] = patch[at:at + 8]
            at += 8
        return bytes(out)
