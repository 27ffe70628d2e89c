"""Timeouts as callers give them (seconds; None for no limit), checked at the
API's edge and turned into ``time.monotonic()`` deadlines."""
from __future__ import annotations

import numbers
import time

from .errors import GpuringError


def deadline_after(timeout: float | None) -> float | None:
    """The deadline ``timeout`` seconds from now, None for none; INVALID_ARGUMENT
    unless ``timeout`` is None or a real number of seconds >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real) or not timeout >= 0:  # NaN fails >= 0
        raise GpuringError("INVALID_ARGUMENT", f"timeout must be None or a number of seconds >= 0, not {timeout!r}")
    return time.monotonic() + float(timeout)
