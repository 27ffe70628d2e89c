"""Creating, opening and validating a segment, and its participant table.

A segment is /dev/shm/gpuring.NAME: header, ring control, participant table,
slots (interop/SPEC.md). Geometry is read once at open, validated, and kept in
this object, so later writes to the shared header by a faulty peer cannot move it.
"""
from __future__ import annotations

import errno
import numbers
import os
import re
import socket
import struct
import threading
import time

from . import layout as L
from .deadline import deadline_after
from .errors import GpuringError
from .process import pid_namespace, pid_running, process_alive, realtime_ns, self_start_time
from .shared_memory import SharedMemory, open_shm

NAME_RULE = "names are 1 to 32 of A-Z a-z 0-9 _ -"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
_HEADER = struct.Struct("<QIIQQIIIIQQQQQII32s128s")
assert _HEADER.size == L.HEADER_BYTES


def check_name(name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise GpuringError("INVALID_ARGUMENT", f"bad segment name {name!r}: {NAME_RULE}")


def segment_path(name: str) -> str:
    return f"/dev/shm/gpuring.{name}"


def _new_segment_file(name: str, mode: int) -> tuple[int, bool]:
    """The file a new segment is built in, and whether it has its name already: an
    unnamed file in /dev/shm (O_TMPFILE), which no opener sees and which vanishes
    with a creator killed before it named it (_name_segment_file); or, where the
    kernel or filesystem lacks O_TMPFILE, the name itself, exclusively, which
    openers see half-built (SPEC.md §3.1)."""
    try:
        fd, named = open_shm("/dev/shm", os.O_TMPFILE | os.O_RDWR, mode), False
    except OSError:
        try:
            fd, named = open_shm(segment_path(name), os.O_RDWR | os.O_CREAT | os.O_EXCL, mode), True
        except FileExistsError:
            raise GpuringError("SEGMENT_EXISTS", f"segment '{name}' already exists", errno.EEXIST) from None
    return fd, named


def _name_segment_file(fd: int, name: str) -> None:
    """Gives the unnamed file of a ready segment its name: link(2) never replaces,
    so a name taken meanwhile is SEGMENT_EXISTS."""
    try:
        # linkat(AT_SYMLINK_FOLLOW) on /proc/self/fd/N; Python calls plain link(2),
        # which would link the symlink itself, unless a directory fd is given.
        fds = os.open("/proc/self/fd", os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.link(str(fd), segment_path(name), src_dir_fd=fds, follow_symlinks=True)
        finally:
            os.close(fds)
    except FileExistsError:
        raise GpuringError("SEGMENT_EXISTS", f"segment '{name}' already exists", errno.EEXIST) from None
    except OSError as e:
        raise GpuringError("SYSTEM", f"naming the new segment {segment_path(name)} failed: {e.strerror} "
                           "(is /proc mounted?)", e.errno) from None


def check_shm_space(size: int) -> None:
    vfs = os.statvfs("/dev/shm")
    if vfs.f_bavail * vfs.f_frsize < size:
        raise GpuringError("NO_SPACE", f"need {size} bytes in /dev/shm but only "
                           f"{vfs.f_bavail * vfs.f_frsize} are free; free space there or enlarge it "
                           "(docker run --shm-size=4g)", errno.ENOSPC)


def size_shm(fd: int, size: int) -> None:
    """Reserves the pages now, so a full /dev/shm is an error here, not a SIGBUS later."""
    os.ftruncate(fd, size)
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise GpuringError("NO_SPACE", f"/dev/shm ran out of space reserving {size} bytes", e.errno) from None
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
            raise GpuringError("SYSTEM", f"posix_fallocate failed: {e}", e.errno) from None


def check_header(raw: bytes, file_size: int, name: str) -> tuple[int, int, bool]:
    """Validates a ready header against this build and its file; returns
    (slot_count, participant_capacity, broadcast). Same checks, order and codes
    as gpr_header_check."""
    (magic, ready, header_size, layout_hash, _total, slots, slot_size, parts, part_size, control_at,
     parts_at, slots_at, pidns, _created, _creator, flags, *_rest) = _HEADER.unpack(raw)
    if ready >> 16 != L.VERSION_MAJOR:
        raise GpuringError("SEGMENT_VERSION", f"segment '{name}' has format version {ready >> 16}.{ready & 0xFFFF}; "
                           f"this build speaks {L.VERSION_MAJOR}.x")
    broadcast = flags == L.RING_BROADCAST
    expected = L.LAYOUT_HASH_BROADCAST if broadcast else L.LAYOUT_HASH
    if (flags & ~L.RING_BROADCAST or layout_hash != expected or header_size != L.HEADER_BYTES or slot_size != L.SLOT_BYTES
            or part_size != L.PARTICIPANT_BYTES or control_at != L.CONTROL_OFFSET):
        raise GpuringError("SEGMENT_LAYOUT", f"segment '{name}' has a different layout "
                           f"(hash {layout_hash:016x}, expected {expected:016x})")
    most = L.MAX_BROADCAST_PARTICIPANTS if broadcast else L.MAX_PARTICIPANTS
    if slots < 2 or slots > L.MAX_SLOTS or slots & (slots - 1) or not 1 <= parts <= most:
        raise GpuringError("SEGMENT_LAYOUT", f"segment '{name}' has impossible counts")
    p_at, s_at, total = L.segment_size(slots, parts)
    if parts_at != p_at or slots_at != s_at or _total != total:
        raise GpuringError("SEGMENT_LAYOUT", f"segment '{name}' has inconsistent offsets")
    if file_size < total:
        raise GpuringError("SEGMENT_TRUNCATED", f"segment '{name}' is {file_size} bytes but its header says {total}")
    if file_size != total:
        raise GpuringError("SEGMENT_LAYOUT", f"segment '{name}' is larger than its header says")
    if pidns != pid_namespace():
        raise GpuringError("PID_NAMESPACE", f"segment '{name}' was made in another PID namespace (container); "
                           "all participants must share one (docker run --pid=host or --ipc=host)")
    return slots, parts, broadcast


def _await_header(fd: int, name: str, timeout_s: float) -> tuple[bytes, int]:
    deadline = deadline_after(timeout_s)
    while True:
        size = os.fstat(fd).st_size
        raw = os.pread(fd, L.HEADER_BYTES, 0)
        magic = struct.unpack_from("<Q", raw)[0] if len(raw) >= 8 else 0
        if magic not in (0, L.SEGMENT_MAGIC):
            raise GpuringError("SEGMENT_FOREIGN", f"/dev/shm/gpuring.{name} exists but is not a gpuring segment")
        if magic and len(raw) < L.HEADER_BYTES:
            raise GpuringError("SEGMENT_TRUNCATED", f"segment '{name}' is shorter ({len(raw)} bytes) than its header")
        if magic and struct.unpack_from("<I", raw, 8)[0] != 0:
            return raw, size
        if deadline is not None and time.monotonic() >= deadline:
            raise GpuringError("SEGMENT_NOT_READY", f"segment '{name}' was never fully initialized (its creator "
                               f"may have died); remove it with: gpuring rm {name}")
        time.sleep(0.001)


class Segment:
    """A process's view of one segment. Use :meth:`create` or :meth:`open`."""

    def __init__(self, name: str, fd: int, slots: int, parts: int, broadcast: bool = False) -> None:
        self.name, self.fd = name, fd
        self.broadcast = broadcast  # every subscriber receives every frame (broadcast.py)
        self.slot_count, self.mask, self.participant_capacity = slots, slots - 1, parts
        _, self.slots_at, self.size = L.segment_size(slots, parts)
        self.mem = SharedMemory(fd, self.size)
        self.bell: socket.socket | None = None  # for ringing doorbells (doorbell.py), made on first use
        # Doorbell pipes this view rings (doorbell._pipe_ring): entry -> (pid, descriptor number,
        # inode, our descriptor or -1); None: not yet asked whether it may (doorbell._pipes_allowed).
        self.bell_pipes: dict[int, tuple[int, int, int, int]] | None = None
        self.pipefs_dev: int | None = None  # st_dev of every anonymous pipe; None: pipes not rung here
        self.bell_pipes_lock = threading.Lock()
        self.damage_cursor = 0  # where this process's next sweep looks for damaged slot words
        self.sweep_due = 0.0  # when this view's waits sweep next (slot_protocol.sweep_if_due); 0: not yet waited
        # The entry this view attached and the attached_unix_ns written there (_give_up).
        self._attached: tuple[int, int] | None = None
        # A broadcast subscriber's takes, by slot: position + 1 of the frame it took there
        # and has not released, else 0; None until it subscribes (broadcast.release_strays).
        self.takes: list[int] | None = None
        self.takes_lock = threading.Lock()
        # Broadcast rings: subscriber k -> a DROPPING cursor of its this view found, and when
        # it first did (monotonic ns): left that long, its dropper died (broadcast._settle_drop).
        self.drop_marks: dict[int, tuple[int, int]] = {}
        self.proxy_self = 0  # this process as a broadcast entry's proxy word names it (broadcast.proxy_take)

    @classmethod
    def create(cls, name: str, slots: int = 1024, participants: int = 64, mode: int = 0o600,
               delivery: str = "each") -> "Segment":
        check_name(name)
        if delivery not in ("each", "all"):
            raise GpuringError("INVALID_ARGUMENT", "delivery must be 'each' (a work queue) or 'all' (broadcast)")
        broadcast = delivery == "all"
        if broadcast and participants > L.MAX_BROADCAST_PARTICIPANTS:
            raise GpuringError("INVALID_ARGUMENT", f"a broadcast ring holds at most {L.MAX_BROADCAST_PARTICIPANTS} participants")
        for what, value in (("slot count", slots), ("participant capacity", participants), ("mode", mode)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise GpuringError("INVALID_ARGUMENT", f"{what} must be an integer, not {value!r}")
        if slots < 2 or slots > L.MAX_SLOTS or slots & (slots - 1):
            raise GpuringError("INVALID_ARGUMENT", f"slot count must be a power of two, 2 to {L.MAX_SLOTS}")
        if not 1 <= participants <= L.MAX_PARTICIPANTS:
            raise GpuringError("INVALID_ARGUMENT", f"participant capacity must be 1 to {L.MAX_PARTICIPANTS}")
        if os.path.lexists(segment_path(name)):  # before the space check, as gpr_segment_create
            raise GpuringError("SEGMENT_EXISTS", f"segment '{name}' already exists", errno.EEXIST)
        p_at, s_at, total = L.segment_size(slots, participants)
        check_shm_space(total)
        fd, named = _new_segment_file(name, mode)
        try:
            os.fchmod(fd, mode)  # the umask must not narrow an explicit mode
            size_shm(fd, total)
            seg = cls(name, fd, slots, participants, broadcast)
        except BaseException:
            os.close(fd)
            if named:
                os.unlink(segment_path(name))
            raise
        header = _HEADER.pack(L.SEGMENT_MAGIC, 0, L.HEADER_BYTES, L.LAYOUT_HASH_BROADCAST if broadcast else L.LAYOUT_HASH,
                              total, slots, L.SLOT_BYTES, participants, L.PARTICIPANT_BYTES, L.CONTROL_OFFSET, p_at,
                              s_at, pid_namespace(), realtime_ns(), os.getpid(), L.RING_BROADCAST if broadcast else 0,
                              name.encode(), bytes(128))
        seg.mem.write(0, header)
        for i in range(slots):
            seg.mem.store64(seg.slot(i), L.slot_word(i, L.EMPTY, 0))
        # The ready word last: an opener that sees it sees everything before it.
        seg.mem.store32(L.SEGMENT_HEADER["ready_version"], L.VERSION_MAJOR << 16 | L.VERSION_MINOR)
        if not named:
            try:
                _name_segment_file(fd, name)
            except BaseException:
                seg.close()
                raise
        return seg

    @classmethod
    def open(cls, name: str, timeout: float = 1.0, any_owner: bool = False) -> "Segment":
        """Opens and validates segment ``name``. One another user owns is refused
        (SEGMENT_OWNER) unless ``any_owner``: whoever creates the name first chooses
        the modes of the segment and of the joiners' arenas (SPEC.md §2)."""
        check_name(name)
        try:
            fd = open_shm(segment_path(name), os.O_RDWR)
        except FileNotFoundError:
            raise GpuringError("SEGMENT_NOT_FOUND", f"no segment named '{name}'", errno.ENOENT) from None
        owner = os.fstat(fd).st_uid
        if not any_owner and owner != os.geteuid():
            os.close(fd)
            raise GpuringError("SEGMENT_OWNER", f"segment '{name}' belongs to uid {owner}, not to this process "
                               f"(uid {os.geteuid()}): refusing to join; open it with any_owner=True if that user is trusted")
        try:
            raw, size = _await_header(fd, name, timeout)
            slots, parts, broadcast = check_header(raw, size, name)
            return cls(name, fd, slots, parts, broadcast)
        except BaseException:
            os.close(fd)
            raise

    @staticmethod
    def unlink(name: str) -> None:
        """Removes the name, the arenas named after it and its bridge origin logs
        (gpr_segment_unlink): SEGMENT_NOT_FOUND only when neither segment nor arena existed."""
        check_name(name)
        arena = re.compile(rf"gpuring\.{re.escape(name)}\.p\d+g\d+\.a\d+")
        origin_log = re.compile(rf"gpuring\.{re.escape(name)}\.origins\.[0-9a-f]{{32}}")  # a bridge sink's (§2)
        arenas = 0
        for f in os.listdir("/dev/shm"):
            is_arena = arena.fullmatch(f) is not None
            if is_arena or origin_log.fullmatch(f):
                try:
                    os.unlink(f"/dev/shm/{f}")
                    arenas += is_arena
                except (FileNotFoundError, PermissionError):
                    pass  # gone, or another user's file squatting an arena name
        try:
            os.unlink(segment_path(name))
        except FileNotFoundError:
            if not arenas:
                raise GpuringError("SEGMENT_NOT_FOUND", f"no segment named '{name}'", errno.ENOENT) from None

    def close(self) -> None:
        if self.fd < 0:
            return
        self.mem.close()
        os.close(self.fd)
        if self.bell is not None:
            self.bell.close()
        for *_, fd in (self.bell_pipes or {}).values():
            if fd >= 0:
                os.close(fd)
        self.bell_pipes = None
        self.fd = -1

    # ---- addresses of shared words (byte offsets into the mapping) ----
    @staticmethod
    def control(field: str) -> int:
        return L.CONTROL_OFFSET + L.CONTROL[field]

    @staticmethod
    def participant(index: int, field: str = "state") -> int:
        return L.PARTICIPANTS_OFFSET + index * L.PARTICIPANT_BYTES + L.PARTICIPANT[field]

    def slot(self, pos: int) -> int:
        return self.slots_at + (pos & self.mask) * L.SLOT_BYTES

    # ---- participants ----
    def participant_word(self, index: int) -> int:
        return self.mem.load64(self.participant(index))

    def check_held(self, index: int, gen: int) -> None:
        """Raises DETACHED unless entry ``index`` still holds the attachment of
        generation ``gen``. A sweep that judged the process dead, or a stray write
        into the segment, can take an entry from a live participant; its slot and
        entry writes after that would act for whoever holds the entry next (SPEC.md §4)."""
        if index >= self.participant_capacity or self.participant_word(index) != L.pword(gen, 0, L.P_ACTIVE):
            self._give_up()
            raise GpuringError("DETACHED", f"this participant no longer holds its entry in ring '{self.name}' (a sweep "
                               "judged it dead, or the segment was overwritten); close it and open a new one")

    @property
    def attached_index(self) -> int | None:
        """The entry this view attached, if any."""
        return None if self._attached is None else self._attached[0]

    def _give_up(self) -> None:
        """SPEC.md §4, "Giving up a damaged entry": our entry's state word changed.
        If it still says ACTIVE and the entry still holds our pid and the
        attached_unix_ns our attach wrote, nobody attached there since (an attach
        rewrites both): a write changed the word itself. Nobody else can tell, as
        the entry looks live while we run, so it would never be freed (and a
        broadcast subscriber's bit would hold every frame): it is marked DEAD."""
        if self._attached is None:
            return
        index, stamp = self._attached
        w = self.participant_word(index)
        if (L.pword_state(w) == L.P_ACTIVE and self.mem.load32(self.participant(index, "pid")) == os.getpid()
                and self.mem.load64(self.participant(index, "attached_unix_ns")) == stamp):
            self.mem.cas64(self.participant(index), w, L.pword(w >> 32, 0, L.P_DEAD))

    def attach(self, roles: int) -> tuple[int, int]:
        """Claims a free participant entry; returns (index, generation). Identity
        is written while the entry is ATTACHING, so no sweeper judges it half-written."""
        mem = self.mem
        try:
            start_time = self_start_time()
        except OSError as e:  # recorded wrong, we would be swept while alive
            raise GpuringError("SYSTEM", f"cannot read this process's start time from /proc/self/stat "
                               f"({e.strerror}), which identifies it to its peers; is /proc mounted, and is "
                               "the process below its file descriptor limit?", e.errno) from None
        for i in range(self.participant_capacity):
            w = self.participant_word(i)
            if L.pword_state(w) != L.P_FREE:
                continue
            gen = ((w >> 32) + 1) & 0xFFFFFFFF
            attaching = L.pword(gen, os.getpid(), L.P_ATTACHING)
            if not mem.cas64(self.participant(i), w, attaching):
                continue
            mem.store64(self.participant(i, "start_time"), start_time)
            mem.store32(self.participant(i, "pid"), os.getpid())
            mem.store32(self.participant(i, "roles"), roles)
            self._attached = (i, realtime_ns())
            mem.store64(self.participant(i, "attached_unix_ns"), self._attached[1])
            mem.store32(self.participant(i, "arena_count"), 0)
            for counter in ("published", "leased", "released", "doorbell_key", "doorbell_pipe_ino", "cursor", "missed",
                            "missed_seen"):
                mem.store64(self.participant(i, counter), 0)
            mem.store32(self.participant(i, "doorbell"), 0)
            mem.store32(self.participant(i, "doorbell_pipe"), 0)
            mem.store32(self.participant(i, "subscription"), 0)
            from .recovery import sweep_leftovers  # recovery.py builds on this module
            sweep_leftovers(self, i, attaching)
            mem.store64(self.participant(i), L.pword(gen, 0, L.P_ACTIVE))
            return i, gen
        raise GpuringError("PARTICIPANTS_FULL", f"segment '{self.name}' has no free participant entry "
                           f"({self.participant_capacity} in use)")

    def participant_alive(self, index: int) -> bool:
        if index >= self.participant_capacity:
            return False
        w = self.participant_word(index)
        pid = self.mem.load32(self.participant(index, "pid"))
        start = self.mem.load64(self.participant(index, "start_time"))
        if L.pword_state(w) == L.P_ATTACHING:
            return pid_running(L.pword_pid(w))
        return L.pword_state(w) == L.P_ACTIVE and process_alive(pid, start)

    def count(self, index: int, counter: str) -> None:
        """Counters in the caller's own entry: only the owner writes them."""
        at = self.participant(index, counter)
        self.mem.store64(at, self.mem.load64(at) + 1)
