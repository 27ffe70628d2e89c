"""Doorbells: participants that sleep on a socket instead of a futex (SPEC.md §6.1, gpuring/doorbell.h).

An event-loop participant (the Node consumer; here an asyncio wait, async_wait.py)
sleeps on an AF_UNIX datagram socket bound to the abstract name
"\\0gpuring.NAME.KEY" instead of a futex, and sets a bit in its entry's
``doorbell`` word while asleep. Every notifier rings those bells after its futex
notify: it clears each set bit of the kind it signals (fetch-and; one winner) and
sends one datagram per bit cleared; a publish stops after one sleeper it reached,
as only one consumer can take its frame. A thread that sleeps on its entry's
``doorbell`` word itself (FUTEX_WAIT; the Node consumer's ``nextSync()``) sets
BELL_FUTEX with its bit, and is rung with FUTEX_WAKE on the word instead (2.3).
A loop may also poll a pipe beside its socket (the Node participants and an
asyncio wait here do), naming its read end in the entry and setting BELL_PIPE
with its bit: a notifier of its own user rings it by writing one byte to
/proc/PID/fd/N, which wakes it sooner than a datagram (2.5). ``ring`` is the
notifier's side, ``Bell`` the sleeper's.
"""
from __future__ import annotations

import errno
import os
import secrets
import signal
import socket
import stat
from typing import TYPE_CHECKING

from . import layout as L

if TYPE_CHECKING:
    from .segment import Segment


def address(segment: str, key: int) -> bytes:
    return b"\0" + f"gpuring.{segment}.{key:016x}".encode()


def _count_at(seg: Segment, bit: int) -> int:
    return int(seg.control("data_doorbells" if bit == L.BELL_DATA else "space_doorbells"))


def _count_down(seg: Segment, at: int) -> None:
    """One less, never below zero: a damaged count must not wrap to 'everyone asleep'."""
    while True:
        n = seg.mem.load32(at)
        if n == 0 or seg.mem.cas32(at, n, n - 1):
            return


def _and(seg: Segment, index: int, bits: int) -> int:
    """ANDs ``bits`` out of entry ``index``'s word, taking each kind it cleared off its count; the word as it was."""
    word = seg.mem.and32(seg.participant(index, "doorbell"), ~bits)
    for bit in (L.BELL_DATA, L.BELL_SPACE):
        if word & bits & bit:
            _count_down(seg, _count_at(seg, bit))
    return word


def clear(seg: Segment, index: int, bits: int) -> int:
    """Clears ``bits`` of entry ``index``; returns those this call cleared (counts adjusted)."""
    return _and(seg, index, bits) & bits


def take(seg: Segment, index: int, bit: int) -> int:
    """Clears ``bit`` of entry ``index`` for a notifier: 0 if it was clear, else ``bit``,
    with BELL_FUTEX or BELL_PIPE added as the word holds them (how to ring it)."""
    word = _and(seg, index, bit)
    return word & (bit | L.BELL_FUTEX | L.BELL_PIPE) if word & bit else 0


def send(seg: Segment, index: int, how: int) -> bool:
    """Rings entry ``index``, whose bit ``take`` cleared: whether it reached a sleeper.
    FUTEX_WAKE that woke nobody (a dead owner, or one not yet in its wait, which the
    cleared bit ends at once) reached nobody, so the notifier may ring another."""
    if how & L.BELL_FUTEX:
        return seg.mem.futex_wake(seg.participant(index, "doorbell")) > 0
    if how & L.BELL_PIPE:
        reached = _pipe_ring(seg, index)
        if reached is not None:
            return reached
    return _send(seg, seg.mem.load64(seg.participant(index, "doorbell_key")))


def ring(seg: Segment, bit: int, most: int | None = None) -> int | None:
    """Rings entries asleep waiting for ``bit``, at most ``most`` reachable ones (None: all);
    call after the seq_cst notify. A sleeper whose socket is gone (it died) reached
    nobody and does not count; a full queue already holds a wake-up, so it does.
    Returns the index of the last entry it reached, or None."""
    left = seg.mem.load32(_count_at(seg, bit))
    rung = None
    i = 0
    while left > 0 and (most is None or most > 0) and i < seg.participant_capacity:
        if seg.mem.load32(seg.participant(i, "doorbell")) & bit:
            left -= 1
            how = take(seg, i, bit)
            if how and send(seg, i, how):
                rung = i
                if most is not None:
                    most -= 1
        i += 1
    return rung


def heads_up(seg: Segment) -> int | None:
    """A producer about to publish rings the DATA sleeper (every one, on a broadcast
    ring) before its frame exists (SPEC.md §6.1, heads-up): whom it reached, for the
    publish's notification (``slot_protocol.notify_published``). No fence: a sleeper
    this misses is found by that notification. No system call while nobody sleeps."""
    if seg.mem.load32(seg.control("data_doorbells")) == 0:
        return None
    return ring(seg, L.BELL_DATA, None if seg.broadcast else 1)


def ring_again(seg: Segment, index: int) -> None:
    """Rings entry ``index`` for DATA only if its bit is set (it was woken by a
    heads-up, found nothing yet and slept again)."""
    how = take(seg, index, L.BELL_DATA)
    if how:
        send(seg, index, how)


def _send(seg: Segment, key: int) -> bool:
    """One datagram to the doorbell of ``key``: whether it reached a sleeper's queue."""
    try:
        _sender(seg).sendto(b"\0", socket.MSG_DONTWAIT, address(seg.name, key))
        return True
    except BlockingIOError:
        return True  # the queue is full: it already holds a wake-up
    except OSError:
        return False  # no such socket: a dead sleeper


def _pipes_allowed(seg: Segment) -> bool:
    """Whether this view may ring doorbell pipes: only where nobody but its own user can
    write the segment. An entry names a descriptor of a process, and a writer of another
    user could otherwise point our write at a pipe of ours it could not open itself.
    Also learns pipefs's device, which every anonymous pipe has."""
    if seg.bell_pipes is None:
        st = os.fstat(seg.fd)
        seg.bell_pipes = {}
        if st.st_uid == os.geteuid() and not st.st_mode & 0o022:
            ends = os.pipe()
            seg.pipefs_dev = os.fstat(ends[0]).st_dev
            for end in ends:
                os.close(end)
    return seg.pipefs_dev is not None


def _is_pipe(seg: Segment, st: os.stat_result, ino: int) -> bool:
    """The anonymous pipe of inode ``ino``: a file, a device or a named FIFO that an entry's
    descriptor number might name is never written."""
    return stat.S_ISFIFO(st.st_mode) and st.st_ino == ino and st.st_dev == seg.pipefs_dev


def _open_pipe(seg: Segment, pid: int, number: int, ino: int) -> int:
    """Our descriptor for writing to the pipe that ``pid``'s descriptor ``number`` is, or -1
    where it is not the pipe of inode ``ino`` or cannot be opened. Looked at first: opening
    a device may itself do something."""
    path = f"/proc/{pid}/fd/{number}"
    try:
        if not _is_pipe(seg, os.stat(path), ino):
            return -1
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return -1
    if _is_pipe(seg, os.fstat(fd), ino):
        return fd
    os.close(fd)
    return -1


def _pipe_ring(seg: Segment, index: int) -> bool | None:
    """Rings entry ``index`` with one byte down the pipe it names: True reached (or the
    pipe is full, so holds a ring already), False its reader is gone (the owner died),
    None this view cannot ring that pipe (ring the socket). A write to a pipe without
    a reader raises SIGPIPE, which Python ignores; a program that restored its default
    action (ending the process) is rung on the socket instead."""
    ino = seg.mem.load64(seg.participant(index, "doorbell_pipe_ino"))
    pid = seg.mem.load32(seg.participant(index, "pid"))
    number = seg.mem.load32(seg.participant(index, "doorbell_pipe"))
    if not ino or not pid or signal.getsignal(signal.SIGPIPE) != signal.SIG_IGN:
        return None
    with seg.bell_pipes_lock:
        if not _pipes_allowed(seg):
            return None
        assert seg.bell_pipes is not None
        cached = seg.bell_pipes.get(index)
        if cached is None or cached[:3] != (pid, number, ino):
            if cached is not None and cached[3] >= 0:
                os.close(cached[3])
            cached = seg.bell_pipes[index] = (pid, number, ino, _open_pipe(seg, pid, number, ino))
        if cached[3] < 0:
            return None
        try:
            os.write(cached[3], b"\0")
            return True
        except BlockingIOError:
            return True
        except BrokenPipeError:
            os.close(cached[3])
            seg.bell_pipes[index] = (pid, number, ino, -1)
            return False
        except OSError:
            return None


def _sender(seg: Segment) -> socket.socket:
    if seg.bell is None:
        seg.bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    return seg.bell


class Bell:
    """The doorbell of participant ``index``: its socket, bound on first use under
    a fresh random key, which is stored in the entry before any bit is set, and a
    pipe beside it (2.5). One task sleeps on it at a time."""

    def __init__(self, seg: Segment, index: int) -> None:
        self._seg, self._index = seg, index
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        while True:
            key = secrets.randbits(64) or 1
            try:
                self.socket.bind(address(seg.name, key))
                break
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    self.socket.close()
                    raise
        self.socket.setblocking(False)
        # Notifiers of our own user write a byte down the pipe instead of the
        # socket: a pipe wakes its poller 20-30% sooner. The write end stays
        # open, unused: without a writer the read end would poll as hung up.
        self.pipe = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._pipe_ino = os.fstat(self.pipe[0]).st_ino
        self._key = key
        seg.mem.store64(seg.participant(index, "doorbell_key"), key)

    @property
    def fds(self) -> tuple[int, int]:
        """What a loop polls while asleep: the socket and the pipe's read end."""
        return self.socket.fileno(), self.pipe[0]

    def arm(self, bit: int) -> None:
        """Asleep until ``bit`` rings: the rings of earlier sleeps are read first
        (one read after arming could be the ring meant for this sleep)."""
        self.drain()
        # Notifiers ring the socket and the pipe the entry names: ones damage
        # changed (SPEC.md §10a) would leave this sleeper woken only by its timeouts.
        seg, mem = self._seg, self._seg.mem
        # The pipe's descriptor before its inode, as SPEC.md §6.1 orders them.
        for field, value, width in (("doorbell_key", self._key, 64), ("doorbell_pipe", self.pipe[0], 32),
                                    ("doorbell_pipe_ino", self._pipe_ino, 64)):
            at = seg.participant(self._index, field)
            if (mem.load64(at) if width == 64 else mem.load32(at)) != value:
                (mem.store64 if width == 64 else mem.store32)(at, value)
        word = seg.participant(self._index, "doorbell")
        if mem.load32(word) & L.BELL_FUTEX:  # left by damage: notifiers would wake the word
            mem.and32(word, ~L.BELL_FUTEX)
        if not mem.or32(word, bit | L.BELL_PIPE) & bit:
            mem.add32(_count_at(seg, bit), 1)

    def disarm(self, bit: int) -> bool:
        """Awake again: clears ``bit`` if no notifier did; whether one did (it rang)."""
        return not clear(self._seg, self._index, bit)

    def drain(self) -> None:
        try:
            while True:
                self.socket.recv(16)
        except BlockingIOError:
            pass
        try:
            while os.read(self.pipe[0], 64):
                pass
        except BlockingIOError:
            pass

    def close(self) -> None:
        """After detach, which freed the entry (its pipe fields and bits with it):
        no notifier looks for the key or the pipe any more."""
        self.socket.close()
        for end in self.pipe:
            os.close(end)
