"""What an Arrow C data interface format string means for a column's layout.

Mirrors gpr_format_parse (interop/include/gpuring/format.h) rule for rule; the
fixture suite holds the three implementations to the same answers.
"""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FormatInfo:
    layout: str          # fixed, bool, varbin, list, fixed-list, struct
    bit_width: int = 0   # fixed: bits per element
    offset_bytes: int = 0  # varbin, list: 4 or 8
    list_size: int = 0   # fixed-list
    buffers: int = 2     # buffers per node, Arrow order
    children: int = 0    # required number of children; -1 any
    is_integer: bool = False


_INTS = "cCsSiIlL"
_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,9})")


def _uint(s: str, max_value: int) -> int | None:
    if not _DECIMAL.fullmatch(s):
        return None
    v = int(s)
    return v if v <= max_value else None


def _decimal(s: str) -> FormatInfo | None:
    parts = s[2:].split(",")
    if len(parts) not in (2, 3):
        return None
    precision = _uint(parts[0], 76)
    scale = _uint(parts[1][1:] if parts[1].startswith("-") else parts[1], 76)
    width = _uint(parts[2], 256) if len(parts) == 3 else 128
    if precision is None or scale is None or width is None:
        return None
    if width not in (128, 256) or precision < 1 or (width == 128 and precision > 38):
        return None
    return FormatInfo("fixed", width)


def _temporal(s: str) -> FormatInfo | None:
    if re.fullmatch(r"td[Dm]", s):
        return FormatInfo("fixed", 32 if s[2] == "D" else 64)
    if re.fullmatch(r"tt[smun]", s):
        return FormatInfo("fixed", 32 if s[2] in "sm" else 64)
    if re.match(r"ts[smun]:", s, re.S) or re.fullmatch(r"tD[smun]", s):
        return FormatInfo("fixed", 64)
    return None


def _nested(s: str) -> FormatInfo | None:
    if s in ("+l", "+L"):
        return FormatInfo("list", offset_bytes=4 if s == "+l" else 8, buffers=2, children=1)
    if s == "+s":
        return FormatInfo("struct", buffers=1, children=-1)
    if s.startswith("+w:"):
        n = _uint(s[3:], 0x7FFFFFFF)
        return FormatInfo("fixed-list", list_size=n, buffers=1, children=1) if n else None
    return None


def parse_format(s: str) -> FormatInfo | None:
    """Layout of a format string, or None if gpuring does not carry it."""
    if len(s) == 1:
        if s in _INTS:
            return FormatInfo("fixed", 8 << (_INTS.index(s) >> 1), is_integer=True)
        if s in "efg":
            return FormatInfo("fixed", {"e": 16, "f": 32, "g": 64}[s])
        if s == "b":
            return FormatInfo("bool", 1)
        if s in "zuZU":
            return FormatInfo("varbin", 8, offset_bytes=4 if s in "zu" else 8, buffers=3)
        return None
    if s.startswith("w:"):
        n = _uint(s[2:], 0x0FFFFFFF)
        return FormatInfo("fixed", n * 8) if n else None
    if s.startswith("d:"):
        return _decimal(s)
    if s.startswith("t"):
        return _temporal(s)
    if s.startswith("+"):
        return _nested(s)
    return None
