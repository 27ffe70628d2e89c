"""A mapped shared-memory object and the atomic operations gpuring's protocol needs.

Python has no atomic compare-and-swap, so the atomics come from libatomic (GCC's
runtime, ``libatomic.so.1``) and futex waits from libc's ``syscall``, both
called through ctypes. Nothing is compiled: that is the "small native part" the
package README explains. ctypes releases the GIL around every foreign call, so a
futex wait blocks only the calling thread.

Loads on x86-64 are plain reads of a ``memoryview``: there a sequentially
consistent load is an ordinary aligned ``mov`` (the fences belong to stores and
read-modify-writes), so the read CPython's memoryview makes is the same
instruction at a twentieth of a ctypes call's cost, and a frame's dozen loads
stop being a tenth of a Python publish. Elsewhere loads go through libatomic.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import platform
from typing import Any

from .errors import GpuringError

_SEQ_CST = 5
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(platform.machine())
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_PLAIN_LOADS = platform.machine() == "x86_64"


def _load(names: list[str], what: str) -> ctypes.CDLL:
    errors = []
    for name in names:
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError as e:
            errors.append(str(e))
    raise GpuringError("NATIVE_LOAD", f"cannot load {what} ({'; '.join(errors)}); "
                       "install it (Debian/Ubuntu: apt install libatomic1)")


def _bind() -> tuple[dict[str, Any], ctypes.CDLL]:
    if _SYS_FUTEX is None:
        raise GpuringError("UNSUPPORTED", f"gpuring supports x86_64 and aarch64 Linux, not {platform.machine()}")
    atomic = _load(["libatomic.so.1", ctypes.util.find_library("atomic") or "libatomic.so"], "libatomic")
    libc = _load(["libc.so.6"], "libc")
    vp, i = ctypes.c_void_p, ctypes.c_int
    ops = {}
    for bits, t in ((8, ctypes.c_uint64), (4, ctypes.c_uint32)):
        for op, argtypes, restype in (("load", [vp, i], t), ("store", [vp, t, i], None),
                                      ("compare_exchange", [vp, vp, t, i, i], ctypes.c_bool),
                                      ("fetch_add", [vp, t, i], t), ("fetch_and", [vp, t, i], t),
                                      ("fetch_or", [vp, t, i], t)):
            fn = getattr(atomic, f"__atomic_{op}_{bits}")
            fn.argtypes, fn.restype = argtypes, restype
            ops[f"{op}{bits * 8}"] = fn
    libc.syscall.restype = ctypes.c_long
    return ops, libc


_ops, _libc = _bind()
_load64, _load32, _store64, _store32 = _ops["load64"], _ops["load32"], _ops["store64"], _ops["store32"]
_cas64, _add64, _add32 = _ops["compare_exchange64"], _ops["fetch_add64"], _ops["fetch_add32"]
_cas32, _and32, _or32 = _ops["compare_exchange32"], _ops["fetch_and32"], _ops["fetch_or32"]
_and64, _or64 = _ops["fetch_and64"], _ops["fetch_or64"]


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class SharedMemory:
    """One mapping of a /dev/shm object. Offsets are bytes from its start; every
    accessor checks them, so a bad offset read from shared memory raises
    instead of touching memory outside the mapping."""

    def __init__(self, fd: int, size: int) -> None:
        self.size = size
        self.map: mmap.mmap | None = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self._anchor = ctypes.c_char.from_buffer(self.map)
        self.base = ctypes.addressof(self._anchor)
        self.view = memoryview(self.map)
        self._u64 = self.view[:size - size % 8].cast("Q")
        self._u32 = self.view[:size - size % 4].cast("I")

    def close(self) -> None:
        if self.map is None:
            return
        self._u64.release()
        self._u32.release()
        self.view.release()
        del self._anchor
        try:
            self.map.close()
        except BufferError:
            pass  # arrays built on this memory still live; the mapping goes when they do
        self.map = None

    def _addr(self, offset: int, width: int) -> int:
        if offset < 0 or offset + width > self.size or offset % width:
            raise GpuringError("FRAME_BOUNDS", f"shared word at {offset} outside the mapping")
        return self.base + offset

    def load64(self, offset: int) -> int:
        if _PLAIN_LOADS and offset >= 0 and not offset & 7 and offset + 8 <= self.size:
            return self._u64[offset >> 3]
        return int(_load64(self._addr(offset, 8), _SEQ_CST))

    def load32(self, offset: int) -> int:
        if _PLAIN_LOADS and offset >= 0 and not offset & 3 and offset + 4 <= self.size:
            return self._u32[offset >> 2]
        return int(_load32(self._addr(offset, 4), _SEQ_CST))

    def store64(self, offset: int, value: int) -> None:
        _store64(self._addr(offset, 8), value, _SEQ_CST)

    def store32(self, offset: int, value: int) -> None:
        _store32(self._addr(offset, 4), value, _SEQ_CST)

    def cas64(self, offset: int, expected: int, desired: int) -> bool:
        exp = ctypes.c_uint64(expected)
        return bool(_cas64(self._addr(offset, 8), ctypes.byref(exp), desired, _SEQ_CST, _SEQ_CST))

    def add64(self, offset: int, value: int) -> int:
        return int(_add64(self._addr(offset, 8), value, _SEQ_CST))

    def add32(self, offset: int, value: int) -> int:
        return int(_add32(self._addr(offset, 4), value & 0xFFFFFFFF, _SEQ_CST))

    def cas32(self, offset: int, expected: int, desired: int) -> bool:
        exp = ctypes.c_uint32(expected)
        return bool(_cas32(self._addr(offset, 4), ctypes.byref(exp), desired, _SEQ_CST, _SEQ_CST))

    def and32(self, offset: int, value: int) -> int:
        """Atomic fetch-and; returns the previous value."""
        return int(_and32(self._addr(offset, 4), value & 0xFFFFFFFF, _SEQ_CST))

    def or32(self, offset: int, value: int) -> int:
        """Atomic fetch-or; returns the previous value."""
        return int(_or32(self._addr(offset, 4), value & 0xFFFFFFFF, _SEQ_CST))

    def and64(self, offset: int, value: int) -> int:
        """Atomic fetch-and; returns the previous value."""
        return int(_and64(self._addr(offset, 8), value & 0xFFFFFFFFFFFFFFFF, _SEQ_CST))

    def or64(self, offset: int, value: int) -> int:
        """Atomic fetch-or; returns the previous value."""
        return int(_or64(self._addr(offset, 8), value & 0xFFFFFFFFFFFFFFFF, _SEQ_CST))

    def read(self, offset: int, length: int) -> bytes:
        """A private copy: validate it, never the shared bytes themselves."""
        if offset < 0 or length < 0 or offset + length > self.size:
            raise GpuringError("FRAME_BOUNDS", f"{length} bytes at {offset} outside a {self.size}-byte mapping")
        return bytes(self.view[offset:offset + length])

    def write(self, offset: int, data: bytes | memoryview) -> None:
        if offset < 0 or offset + len(data) > self.size:
            raise GpuringError("FRAME_BOUNDS", f"{len(data)} bytes at {offset} outside the mapping")
        self.view[offset:offset + len(data)] = data

    def futex_wait(self, offset: int, expected: int, timeout_s: float | None) -> None:
        ts = None
        if timeout_s is not None:
            ts = _Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        _libc.syscall(_SYS_FUTEX, ctypes.c_void_p(self._addr(offset, 4)), _FUTEX_WAIT,
                      ctypes.c_uint32(expected), ctypes.byref(ts) if ts else None, None, 0)

    def futex_wake(self, offset: int) -> int:
        """Wakes every thread waiting on the word; how many it woke."""
        return int(_libc.syscall(_SYS_FUTEX, ctypes.c_void_p(self._addr(offset, 4)), _FUTEX_WAKE,
                                 0x7FFFFFFF, None, None, 0))

    def notify(self, seq: int, waiters: int) -> None:
        """Bumps a futex word and wakes its sleepers, if any announced themselves.
        The seq_cst RMW on ``waiters`` orders like the C side's fence."""
        if self.add32(waiters, 0) != 0:
            self.add32(seq, 1)
            self.futex_wake(seq)


def open_shm(path: str, flags: int, mode: int = 0o600) -> int:
    """shm_open(3) is open(2) under /dev/shm on Linux."""
    return os.open(path, flags | os.O_CLOEXEC, mode)
