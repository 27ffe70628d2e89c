"""Host-memory arenas: the shared-memory objects that hold frame bodies and host
column buffers (gpuring/arena.h).

A producer owns its arenas and allocates from them first-fit; consumers open an
arena by the name a buffer descriptor carries, after checking that the name
belongs to this segment and that the file is an arena of the stated size.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import Callable

from . import layout as L
from .errors import GpuringError
from .recovery import arena_path, refers_to
from .segment import Segment, check_shm_space, size_shm
from .shared_memory import SharedMemory, open_shm

_HEADER = struct.Struct("<QQIIII32s")
assert _HEADER.size == L.ARENA_HEADER_BYTES


def _align(v: int, a: int) -> int:
    return (v + a - 1) & ~(a - 1)


@dataclass(frozen=True)
class Allocation:
    arena: int
    offset: int
    length: int


class _Arena:
    def __init__(self, number: int, fd: int, size: int) -> None:
        self.number, self.fd, self.size = number, fd, size
        self.mem = SharedMemory(fd, size)
        self.free = [[L.ARENA_HEADER_BYTES, size - L.ARENA_HEADER_BYTES]]  # sorted, coalesced

    def take(self, n: int) -> int | None:
        for i, r in enumerate(self.free):
            if r[1] >= n:
                at = r[0]
                r[0] += n
                r[1] -= n
                if not r[1]:
                    del self.free[i]
                return at
        return None

    def give_back(self, offset: int, length: int) -> None:
        i = 0
        while i < len(self.free) and self.free[i][0] < offset:
            i += 1
        prev = i > 0 and self.free[i - 1][0] + self.free[i - 1][1] == offset
        nxt = i < len(self.free) and offset + length == self.free[i][0]
        if prev and nxt:
            self.free[i - 1][1] += length + self.free.pop(i)[1]
        elif prev:
            self.free[i - 1][1] += length
        elif nxt:
            self.free[i][0], self.free[i][1] = offset, self.free[i][1] + length
        else:
            self.free.insert(i, [offset, length])


class ArenaPool:
    """A producer's arenas. Not thread-safe: one producer object, one thread."""

    def __init__(self, seg: Segment, index: int, gen: int, default_size: int = 0) -> None:
        """`default_size` 0: regular arenas double from ARENA_FIRST_SIZE up to
        ARENA_DEFAULT_SIZE (gpuring/arena.h), so a producer of small frames does not
        reserve 64 MiB of /dev/shm before its first one."""
        self.seg, self.index, self.gen = seg, index, gen
        self.mode = os.fstat(seg.fd).st_mode & 0o777
        self.default_size = _align(default_size, 4096) if default_size else L.ARENA_DEFAULT_SIZE
        self.growing = default_size == 0
        self.arenas: list[_Arena | None] = []  # None: a number skipped (squatted name)

    def name(self, number: int) -> str:
        return arena_path(self.seg.name, self.index, self.gen, number)[len("/dev/shm"):]

    def _open_file(self) -> tuple[int, int, str]:
        """Creates the next arena number's file: (number, fd, path). A name another
        user created first (/dev/shm is sticky: it can be neither removed nor safely
        used) is skipped, its number left as a placeholder (None), so pre-creating
        names cannot stop a producer (gpuring/arena.h, SPEC.md §10a)."""
        while True:
            if len(self.arenas) >= L.MAX_ARENAS:
                raise GpuringError("OUT_OF_MEMORY", f"this producer already has {L.MAX_ARENAS} arenas")
            number = len(self.arenas)
            self.seg.check_held(self.index, self.gen)  # arena_count lives in the entry: ours only while we hold it
            # Counted before the file exists: a sweeper always knows every name we may leave.
            self.seg.mem.store32(self.seg.participant(self.index, "arena_count"), number + 1)
            path = arena_path(self.seg.name, self.index, self.gen, number)
            try:
                os.unlink(path)  # a stale arena of a crashed earlier occupant of this entry
            except (FileNotFoundError, PermissionError):
                pass
            try:
                return number, open_shm(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, self.mode), path
            except FileExistsError:
                self.arenas.append(None)

    def _regular_size(self) -> int:
        """The size of the next arena that a larger allocation does not size."""
        if not self.growing:
            return self.default_size
        return min(self.default_size, L.ARENA_FIRST_SIZE << min(len(self.arenas), 32))

    def _create(self, min_bytes: int) -> _Arena:
        """An arena of the regular size, or the allocation's when larger; of the
        allocation's size (pages) when /dev/shm holds that and not the regular
        size, so that a producer near the end of /dev/shm gets what it asks for."""
        want = min_bytes + L.ARENA_HEADER_BYTES
        regular = self._regular_size()
        size = regular if want <= regular else _align(want, 2 << 20)
        try:
            check_shm_space(size)
        except GpuringError:
            least = _align(want, 4096)
            if least >= size:
                raise
            check_shm_space(least)
            size = least
        number, fd, path = self._open_file()
        try:
            os.fchmod(fd, self.mode)
            size_shm(fd, size)
            arena = _Arena(number, fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(path)
            raise
        self.arenas.append(arena)
        self._restore_header(arena)
        return arena

    def _restore_header(self, arena: _Arena) -> None:
        """Rewrites ``arena``'s header in shared memory when it differs from what it
        must carry, so that a stray write there does not make every consumer that
        maps the arena later refuse it (ARENA_INVALID) while we live (SPEC.md §9)."""
        want = _HEADER.pack(L.ARENA_MAGIC, arena.size, os.getpid(), self.index, self.gen, arena.number, bytes(32))
        if arena.mem.read(0, L.ARENA_HEADER_BYTES) != want:
            arena.mem.write(0, want)

    def restore_headers(self) -> None:
        """_restore_header for every arena; run with the producer's full reaps, off the per-frame path."""
        for a in filter(None, self.arenas):
            self._restore_header(a)

    def alloc(self, n: int) -> Allocation:
        """``n`` bytes (rounded up to 64), in a new arena when none has room."""
        want = _align(max(n, 1), L.ARENA_ALIGN)
        for a in filter(None, self.arenas):
            at = a.take(want)
            if at is not None:
                return Allocation(a.number, at, want)
        a = self._create(want)
        at = a.take(want)
        assert at is not None, "a new arena holds the allocation it was made for"
        return Allocation(a.number, at, want)

    def free(self, alloc: Allocation) -> None:
        arena = self.arenas[alloc.arena] if alloc.arena < len(self.arenas) else None
        if arena is not None:
            arena.give_back(alloc.offset, alloc.length)

    def memory(self, alloc: Allocation) -> SharedMemory:
        arena = self.arenas[alloc.arena]
        if arena is None:
            raise GpuringError("ARENA_INVALID", f"arena {alloc.arena} of this producer is closed")
        return arena.mem

    def unlink(self) -> None:
        """Unlinks the arena files. Only for a producer whose entry was taken from it
        (detach raised DETACHED): otherwise the sweeper that frees the entry does it
        once no slot refers to them. The names are ours alone: no attach hands out our
        generation at our index again (SPEC.md §4)."""
        for number, a in enumerate(self.arenas):
            if a is not None:
                try:
                    os.unlink(arena_path(self.seg.name, self.index, self.gen, number))
                except (FileNotFoundError, PermissionError):
                    pass

    def close(self) -> None:
        """Unmaps; the names stay until a sweep frees this entry, as consumers may still need them."""
        for a in filter(None, self.arenas):
            a.mem.close()
            os.close(a.fd)
        self.arenas = []


_ARENA_NAME = re.compile(r"/gpuring\.([A-Za-z0-9_-]{1,32})\.p(0|[1-9][0-9]*)g(0|[1-9][0-9]*)\.a(0|[1-9][0-9]*)")


def arena_removed(seg: Segment, name: str, live: Callable[[tuple[int, int]], bool]) -> bool:
    """Whether no frame can refer to arena ``name`` any more (SPEC.md §9): its
    producer is gone (``live`` says no), its file was removed (only once no
    slot refers to the producer, §4 Free) and no slot refers to it (a producer
    that lost its entry removes its arenas at once, under frames still held)."""
    m = _ARENA_NAME.fullmatch(name)
    if m is None or live((int(m.group(2)), int(m.group(3)))) or os.path.exists("/dev/shm" + name):
        return False
    return not refers_to(seg, int(m.group(2)))


def open_arena(seg: Segment, name: str) -> SharedMemory:
    """Maps an arena named in a frame, after checking it is one of this segment's."""
    m = _ARENA_NAME.fullmatch(name)
    if (not m or m.group(1) != seg.name or int(m.group(2)) >= seg.participant_capacity
            or int(m.group(3)) >= 1 << 32 or int(m.group(4)) >= L.MAX_ARENAS):
        raise GpuringError("ARENA_INVALID", f"{name[:64]!r} is not an arena of segment '{seg.name}'")
    index, gen, arena = int(m.group(2)), int(m.group(3)), int(m.group(4))
    try:
        fd = open_shm("/dev/shm" + name, os.O_RDWR)
    except OSError as e:
        raise GpuringError("ARENA_INVALID", f"cannot open arena {name}: {e.strerror}", e.errno) from None
    try:
        raw = os.pread(fd, L.ARENA_HEADER_BYTES, 0)
        size = os.fstat(fd).st_size
        if len(raw) != L.ARENA_HEADER_BYTES:
            raise GpuringError("ARENA_INVALID", f"arena {name} is truncated or foreign")
        magic, hsize, _pid, h_index, h_gen, h_arena, _r = _HEADER.unpack(raw)
        if magic != L.ARENA_MAGIC or hsize != size or (h_index, h_gen, h_arena) != (index, gen, arena):
            raise GpuringError("ARENA_INVALID", f"arena {name} is truncated or foreign")
        return SharedMemory(fd, size)
    finally:
        os.close(fd)
