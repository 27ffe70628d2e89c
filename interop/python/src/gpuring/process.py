"""Process identity and liveness, as gpuring/process.h defines them: a pid is
not an identity (pids are reused), pid plus start time is."""
from __future__ import annotations

import errno
import os
import time


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, or None when
    there is no such process (ENOENT, ESRCH). Raises OSError when /proc cannot
    tell (EMFILE, ENFILE, ENOMEM, EACCES, unparsable): that is not "dead", for a
    sweeper frees what a dead peer held."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(1023)
    except (FileNotFoundError, ProcessLookupError):
        return None
    if not data:  # reaped between the open and the read
        return None
    end = data.rfind(b")")  # comm may contain spaces and parentheses
    fields = data[end + 2:].split(b" ") if end >= 0 and data[end + 1:end + 2] == b" " else []
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        raise OSError(errno.EIO, f"unparsable /proc/{pid}/stat") from None


def running_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` while it runs (exists, not a zombie),
    else None; OSError when /proc cannot tell."""
    st = proc_stat(pid) if pid else None
    return st[1] if st is not None and st[0] not in ("Z", "X", "x") else None


def process_alive(pid: int, start_time: int) -> bool:
    """Alive while a process with this pid and start time runs, and while we cannot tell."""
    try:
        return running_start_time(pid) == start_time
    except OSError:
        return True


def pid_running(pid: int) -> bool:
    """Some process ``pid`` runs (or we cannot tell): for ATTACHING and FREEING
    words, which name a pid only."""
    try:
        return running_start_time(pid) is not None
    except OSError:
        return True


_self_start: tuple[int, int] = (0, 0)


def self_start_time() -> int:
    """This process's start time; cached per pid (a forked child reads its own),
    so that a later descriptor shortage cannot lose it. OSError if unreadable."""
    global _self_start
    pid = os.getpid()
    if _self_start[0] != pid:
        st = proc_stat(pid)
        if st is None:
            raise OSError(errno.ESRCH, "/proc/self/stat is missing")
        _self_start = (pid, st[1])
    return _self_start[1]


def pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def realtime_ns() -> int:
    return time.time_ns()
