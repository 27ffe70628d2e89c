"""Process identity and liveness, as gpuring/process.h defines them: a pid is
not an identity (pids are reused), pid plus start time is."""
from __future__ import annotations

import os
import time


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read(1023)
    except OSError:
        return None
    end = data.rfind(b")")  # comm may contain spaces and parentheses
    if end < 0 or data[end + 1:end + 2] != b" ":
        return None
    fields = data[end + 2:].split(b" ")
    try:
        return fields[0].decode(), int(fields[19])
    except (IndexError, ValueError):
        return None


def running_start_time(pid: int) -> int | None:
    """The start time of process ``pid`` while it runs (exists, not a zombie), else None."""
    st = proc_stat(pid) if pid else None
    return st[1] if st is not None and st[0] not in ("Z", "X", "x") else None


def process_alive(pid: int, start_time: int) -> bool:
    """Alive while a process with this pid and start time runs."""
    return running_start_time(pid) == start_time


def pid_running(pid: int) -> bool:
    """Some process ``pid`` runs: for ATTACHING and FREEING words, which name a pid only."""
    return running_start_time(pid) is not None


def self_start_time() -> int:
    st = proc_stat(os.getpid())
    return st[1] if st else 0


def pid_namespace() -> int:
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def realtime_ns() -> int:
    return time.time_ns()
