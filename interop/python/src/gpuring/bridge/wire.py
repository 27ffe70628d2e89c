"""The bridge's messages on the link (SPEC.md §14): fixed-width, little-endian.

Framed as Arrow's Dissociated IPC: a metadata stream (source to sink) whose
messages begin with DIPC's 5-byte prefix (a type byte, a 32-bit sequence
number), one tagged message per buffer body, and ``free_data`` messages back
(sink to source) naming the sequence numbers the source may let go. Everything
read from the link is untrusted: each decoder checks sizes and fields and raises
BRIDGE_PROTOCOL.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from ..errors import GpuringError

VERSION_MAJOR = 1
VERSION_MINOR = 2  # 1.1: inline frames (a sink's inline_bytes, FRAME flag INLINE) and templates; 1.2: batches
MAGIC = b"GPRBRIDG"

# Logical tags, within the connection's own tag namespace (SPEC.md §14.1).
TAG_HELLO = 0xE2 << 56    # both directions: HELLO, then AUTH
TAG_META = 0xE0 << 56     # source to sink: FRAME headers and descriptions, END
TAG_CONTROL = 0xE1 << 56  # sink to source: VERDICT, FREE_DATA, REFUSED
BODY_ONE_BUFFER = 0x80    # a body type DIPC leaves free: one buffer, its index in bits 32-55


def body_tag(seq: int, buffer_index: int) -> int:
    """The tag of buffer ``buffer_index`` (wire order) of frame ``seq``."""
    return BODY_ONE_BUFFER << 56 | (buffer_index & 0xFFFFFF) << 32 | (seq & 0xFFFFFFFF)


ROLE_SOURCE, ROLE_SINK = 1, 2
ROLES = {ROLE_SOURCE: "source", ROLE_SINK: "sink"}
ACK_PUBLISHED, ACK_RELEASED = 1, 2
ACK_MODES = {"published": ACK_PUBLISHED, "released": ACK_RELEASED}
FLAG_DEVICE = 1  # HELLO flags: this side can hold device buffers
FLAG_TEMPLATES = 2  # HELLO flags (sink): it keeps templates (templates.py)
FLAG_BATCH = 4  # HELLO flags (sink): it takes several inline frames in one META message
FRAME_INLINE = 1  # FRAME flags: the description and the buffers' bytes follow in this message
FRAME_KEEP = 2  # FRAME flags: keep this frame's description as template ``template``
FRAME_PATCH = 4  # FRAME flags: the description is a patch against template ``template``
FRAME_MORE = 8  # FRAME flags, inline frames only: another inline frame follows in this message
FRAME_FLAGS = FRAME_INLINE | FRAME_KEEP | FRAME_PATCH | FRAME_MORE

KIND_END, KIND_FRAME, KIND_FREE_DATA, KIND_REFUSED = 0x00, 0x81, 0x82, 0x83
VERDICT_ACCEPTED, VERDICT_VERSION, VERDICT_ROLE, VERDICT_AUTH, VERDICT_REFUSED = range(5)
VERDICTS = {VERDICT_ACCEPTED: "accepted", VERDICT_VERSION: "protocol version", VERDICT_ROLE: "roles",
            VERDICT_AUTH: "shared secret", VERDICT_REFUSED: "refused"}

HELLO = struct.Struct("<8sHHBBH32s16sIIQ32s16s")
assert HELLO.size == 128
AUTH_BYTES = 32
VERDICT = struct.Struct("<II248s")
assert VERDICT.size == 256
FRAME = struct.Struct("<BIB2xIIIIQQQI12s")
assert FRAME.size == 64
FREE_DATA_MAX = 64
FREE_DATA = struct.Struct(f"<B3xIQ{FREE_DATA_MAX}Q")
assert FREE_DATA.size == 528
REFUSED = struct.Struct("<BI3xI516s")
CONTROL_BYTES = FREE_DATA.size
assert REFUSED.size == CONTROL_BYTES  # control messages share one size: a receive must know it


def bad(what: str) -> GpuringError:
    return GpuringError("BRIDGE_PROTOCOL", f"malformed bridge message: {what}")


@dataclass
class Hello:
    role: int
    ack_mode: int
    flags: int
    nonce: bytes
    stream_id: bytes
    window: int
    max_frame_bytes: int
    ring: str
    inline_bytes: int = 0  # sink: the largest inline META message it takes (0: none)
    major: int = VERSION_MAJOR
    minor: int = VERSION_MINOR

    def pack(self) -> bytes:
        return HELLO.pack(MAGIC, self.major, self.minor, self.role, self.ack_mode, self.flags, self.nonce,
                          self.stream_id, self.window, self.inline_bytes, self.max_frame_bytes, self.ring.encode()[:31],
                          bytes(16))

    @staticmethod
    def unpack(raw: bytes) -> "Hello":
        if len(raw) != HELLO.size:
            raise bad(f"HELLO of {len(raw)} bytes")
        magic, major, minor, role, ack, flags, nonce, stream, window, inline, max_bytes, ring, _r = HELLO.unpack(raw)
        if magic != MAGIC:
            raise GpuringError("BRIDGE_REFUSED", "the peer is not a gpuring bridge (bad magic)")
        if role not in ROLES:
            raise bad(f"role {role}")
        return Hello(role, ack, flags, nonce, stream, window, max_bytes,
                     ring.split(b"\0", 1)[0].decode(errors="replace"), inline, major, minor)


def pack_verdict(status: int, reason: str) -> bytes:
    text = reason.encode()[:248]
    return VERDICT.pack(status, len(text), text)


def unpack_verdict(raw: bytes) -> tuple[int, str]:
    if len(raw) != VERDICT.size:
        raise bad(f"VERDICT of {len(raw)} bytes")
    status, n, text = VERDICT.unpack(raw)
    if status not in VERDICTS or n > 248:
        raise bad(f"VERDICT status {status}, reason length {n}")
    return status, text[:n].decode(errors="replace")


@dataclass
class FrameHeader:
    """What precedes a frame's description on the metadata stream."""
    seq: int
    description_length: int
    buffer_count: int
    origin_producer: int
    origin_generation: int
    origin_frame_id: int
    user_tag: int
    total_bytes: int
    kind: int = KIND_FRAME
    flags: int = 0
    template: int = 0

    @property
    def inline(self) -> bool:
        return bool(self.flags & FRAME_INLINE)

    def pack(self) -> bytes:
        return FRAME.pack(self.kind, self.seq, self.flags, self.description_length, self.buffer_count, self.origin_producer,
                          self.origin_generation, self.origin_frame_id, self.user_tag, self.total_bytes, self.template,
                          bytes(12))

    @staticmethod
    def unpack(raw: bytes, max_description: int) -> "FrameHeader":
        if len(raw) != FRAME.size:
            raise bad(f"frame header of {len(raw)} bytes")
        kind, seq, flags, dlen, count, producer, gen, frame_id, user_tag, total, template, _ = FRAME.unpack(raw)
        if kind not in (KIND_FRAME, KIND_END):
            raise bad(f"metadata type {kind:#x}")
        if flags & ~FRAME_FLAGS or flags & FRAME_KEEP and flags & FRAME_PATCH or flags & FRAME_MORE and not flags & FRAME_INLINE:
            raise bad(f"frame flags {flags:#x}")
        if bool(flags & (FRAME_KEEP | FRAME_PATCH)) != (template != 0):
            raise bad(f"template {template} with frame flags {flags:#x}")
        if kind == KIND_FRAME and not 0 < dlen <= max_description:
            raise bad(f"description of {dlen} bytes (at most {max_description})")
        return FrameHeader(seq, dlen, count, producer, gen, frame_id, user_tag, total, kind, flags, template)


def pack_free_data(seqs: list[int]) -> bytes:
    assert len(seqs) <= FREE_DATA_MAX
    return FREE_DATA.pack(KIND_FREE_DATA, len(seqs), 0, *seqs, *([0] * (FREE_DATA_MAX - len(seqs))))


@dataclass
class Refusal:
    """The sink refuses a frame it cannot take (it then closes the link)."""
    seq: int
    code: str
    message: str


def pack_refused(seq: int, code: str, message: str) -> bytes:
    text = f"{code}: {message}".encode()[:516]
    return REFUSED.pack(KIND_REFUSED, seq, len(text), text)


def unpack_control(raw: bytes) -> list[int] | Refusal:
    """A control message from the sink: the sequence numbers freed, or a refusal."""
    if len(raw) != CONTROL_BYTES:
        raise bad(f"control message of {len(raw)} bytes")
    if raw[0] == KIND_FREE_DATA:
        _, count, _, *seqs = FREE_DATA.unpack(raw)
        if count > FREE_DATA_MAX:
            raise bad(f"free_data naming {count} frames")
        return list(seqs[:count])
    if raw[0] == KIND_REFUSED:
        _, seq, n, text = REFUSED.unpack(raw)
        code, _, message = text[:min(n, 516)].decode(errors="replace").partition(": ")
        return Refusal(seq, code, message)
    raise bad(f"control message type {raw[0]:#x}")
