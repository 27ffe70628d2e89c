"""Key-value metadata in the Arrow C data interface encoding: int32 count, then
per pair int32 key length, key bytes, int32 value length, value bytes (all
little-endian). Absent or empty metadata encodes as zero bytes."""
from __future__ import annotations

import struct

Metadata = list[tuple[str, str]] | None


class _Malformed:
    """What decode_metadata returns for bytes that are not one well-formed encoding."""


_MALFORMED = _Malformed()


def encode_metadata(pairs: Metadata) -> bytes:
    if not pairs:
        return b""
    out = [struct.pack("<i", len(pairs))]
    for key, value in pairs:
        for s in (key.encode(), value.encode()):
            out += [struct.pack("<i", len(s)), s]
    return b"".join(out)


def decode_metadata(data: bytes) -> Metadata | _Malformed:
    """Pairs, None for no metadata, or the module's _MALFORMED marker when the
    bytes are not exactly one well-formed encoding with UTF-8 keys and values."""
    if not data:
        return None
    if len(data) < 4:
        return _MALFORMED
    (count,) = struct.unpack_from("<i", data, 0)
    if count < 0 or count > len(data) / 8:
        return _MALFORMED
    at, pairs = 4, []

    def take(at: int) -> "tuple[str, int] | None":
        if at + 4 > len(data):
            return None
        (n,) = struct.unpack_from("<i", data, at)
        if n < 0 or at + 4 + n > len(data):
            return None
        try:
            return data[at + 4:at + 4 + n].decode("utf-8"), at + 4 + n
        except UnicodeDecodeError:
            return None

    for _ in range(count):
        key = take(at)
        value = take(key[1]) if key else None
        if key is None or value is None:
            return _MALFORMED
        pairs.append((key[0], value[0]))
        at = value[1]
    return pairs if at == len(data) else _MALFORMED


def is_malformed(decoded: object) -> bool:
    return decoded is _MALFORMED


def metadata_pairs(data: bytes) -> Metadata:
    """The pairs of metadata bytes already validated (or written by us)."""
    decoded = decode_metadata(data)
    if isinstance(decoded, _Malformed):
        raise ValueError("malformed metadata")
    return decoded
