"""Every failure gpuring reports is a :class:`GpuringError` with a stable ``code``.

The codes are the same in Python, TypeScript (``GpuringError.code``) and C
(``gpr_code_name``), so a program can branch on them whichever side raised them.
"""
from __future__ import annotations

ERROR_CODES: tuple[str, ...] = (
    "OK", "INVALID_ARGUMENT", "SEGMENT_EXISTS", "SEGMENT_NOT_FOUND", "SEGMENT_FOREIGN",
    "SEGMENT_VERSION", "SEGMENT_LAYOUT", "SEGMENT_TRUNCATED", "SEGMENT_NOT_READY",
    "PID_NAMESPACE", "NO_SPACE", "PARTICIPANTS_FULL", "RING_FULL", "RING_EMPTY", "TIMEOUT",
    "ABORTED", "CLOSED", "FRAME_INVALID", "FRAME_BOUNDS", "FRAME_STATE", "ARENA_INVALID",
    "OUT_OF_MEMORY", "SYSTEM", "UNSUPPORTED", "CUDA_UNAVAILABLE", "CUDA", "DEVICE_NOT_FOUND",
    "NOT_EXPORTABLE", "SEGMENT_OWNER", "DESCRIPTOR_UNAVAILABLE", "FRAMES_MISSED", "EVICTED",
    "BRIDGE_REFUSED", "BRIDGE_PROTOCOL", "UCX_UNAVAILABLE", "DETACHED", "NATIVE_LOAD",
)


class GpuringError(Exception):
    """A gpuring failure. ``code`` is one of :data:`ERROR_CODES`; ``errno`` is set
    when a system call failed."""

    def __init__(self, code: str, message: str, errno: int | None = None, missed: int | None = None) -> None:
        if code not in ERROR_CODES:
            raise ValueError(f"unknown gpuring error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.errno = errno
        #: FRAMES_MISSED and EVICTED (broadcast rings): how many frames this consumer lost.
        self.missed = missed
