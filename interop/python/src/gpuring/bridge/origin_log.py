"""What a sink remembers of the frames it published, per source stream, kept in
a shared-memory file so that it outlives the sink (SPEC.md §14.4).

A sink drops a frame whose origin (producer, generation, frame id in the source
ring) it already published. Kept only in memory, that knowledge died with a
killed sink, and the source's unacknowledged frames, published already, came
twice. The log is written right after each publish, so a killed sink repeats at
most the one frame it was publishing.

File ``/dev/shm/gpuring.RING.origins.SOURCE`` (SOURCE: the source's stream id in
hex), mode 0600, private to the reference bridge (no other program reads it);
``gpuring rm RING`` removes it with the ring:

    offset 0   u64 magic "GPRORIGN"   u32 version 1   u32 capacity
    offset 16  16 bytes: the sink ring's stream id (a ring made again under the name starts afresh)
    offset 32  16 bytes: the source stream id
    offset 48  u64 count: origins appended so far   8 bytes reserved
    offset 64  capacity entries of 16 bytes: u32 producer, u32 generation, u64 frame id;
               entry i holds the origin appended as number count - capacity + i (mod capacity)

An entry is written before ``count`` covers it, so a sink killed between the two
leaves the log as it was. A file that is short, foreign, another version or
another ring's is replaced.
"""
from __future__ import annotations

import mmap
import os
import stat
import struct
from collections import OrderedDict
from typing import Iterator

from ..errors import GpuringError

Origin = tuple[int, int, int]

MAGIC = 0x4E4749524F525047  # "GPRORIGN"
VERSION = 1
HEADER = struct.Struct("<QII16s16sQ8x")
ENTRY = struct.Struct("<IIQ")
COUNT_AT = 48


def log_path(ring: str, source_stream: bytes) -> str:
    return f"/dev/shm/gpuring.{ring}.origins.{source_stream.hex()}"


class OriginLog:
    """The last ``capacity`` origins published from one source stream into ring
    ``ring`` (stream id ``sink_stream``), in memory and in the log file."""

    def __init__(self, ring: str, sink_stream: bytes, source_stream: bytes, capacity: int) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[Origin, None] = OrderedDict()
        identity = (MAGIC, VERSION, capacity, sink_stream, source_stream)
        size = HEADER.size + capacity * ENTRY.size
        fd = os.open(log_path(ring, source_stream), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            st = os.fstat(fd)
            if st.st_uid != os.geteuid() or not stat.S_ISREG(st.st_mode):
                raise GpuringError("SEGMENT_OWNER", f"{log_path(ring, source_stream)} is not this user's file")
            header = HEADER.unpack_from(os.pread(fd, HEADER.size, 0)) if st.st_size == size else None
            fresh = header is None or header[:5] != identity or header[5] >= 1 << 62  # a count no sink reaches
            if fresh:
                os.ftruncate(fd, 0)
                os.posix_fallocate(fd, 0, size)  # a full /dev/shm fails here, not as SIGBUS later
            self._map = mmap.mmap(fd, size)
        except OSError as e:
            raise GpuringError("NO_SPACE" if e.errno == 28 else "SYSTEM",
                               f"origin log {log_path(ring, source_stream)}: {e.strerror}", e.errno) from None
        finally:
            os.close(fd)
        if fresh:
            HEADER.pack_into(self._map, 0, *identity, 0)
        self._count = HEADER.unpack_from(self._map, 0)[5]
        for origin in self._logged():
            self._remember(origin)

    def _logged(self) -> Iterator[Origin]:
        first = max(0, self._count - self.capacity)
        for n in range(first, self._count):
            yield ENTRY.unpack_from(self._map, HEADER.size + (n % self.capacity) * ENTRY.size)

    def __contains__(self, origin: Origin) -> bool:
        return origin in self._seen

    def published(self, origin: Origin, lasting: bool) -> None:
        """``origin`` was published; ``lasting``: its frame outlives this sink
        (host memory), so a restarted sink must drop it too. A frame in this
        sink's device memory dies with it and is taken again then."""
        self._remember(origin)
        if lasting:
            ENTRY.pack_into(self._map, HEADER.size + (self._count % self.capacity) * ENTRY.size, *origin)
            self._count += 1
            struct.pack_into("<Q", self._map, COUNT_AT, self._count)

    def _remember(self, origin: Origin) -> None:
        self._seen[origin] = None
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def close(self) -> None:
        self._map.close()
