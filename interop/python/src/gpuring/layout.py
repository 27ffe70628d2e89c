"""The wire format's numbers, mirrored from interop/include/gpuring.h (normative).

tests/test_layout.py checks every value here against schema/layout.json, which
the C and TypeScript suites check against the header itself.
"""
from __future__ import annotations

VERSION_MAJOR = 2
VERSION_MINOR = 5
LAYOUT_HASH = 0xDDB92FD56EC23D52
# A broadcast ring (SPEC.md §5.4, header flag RING_BROADCAST) has this hash instead.
LAYOUT_HASH_BROADCAST = 0xB6B792DEF69DA75D
RING_BROADCAST = 1
MAX_BROADCAST_PARTICIPANTS = 64
CURSOR_EVICTED = 1 << 63
CURSOR_DROPPING = 1 << 62
ON_SLOW = ("block", "drop-oldest", "evict")
SEGMENT_MAGIC = 0x00474E4952555047
ARENA_MAGIC = 0x414E455241525047
BODY_MAGIC = 0x46525047
BODY_VERSION = 1

NAME_MAX = 32
MAX_SLOTS = 1 << 20
MAX_PARTICIPANTS = 8190
MAX_BODY_BYTES = 64 << 20
MAX_NODES = 1 << 20
MAX_BUFFERS = 3 << 20
MAX_DEPTH = 64
MAX_ARENAS = 4096
MAX_COUNT = (1 << 53) - 1
HANDLE_BYTES = 64
ARENA_ALIGN = 64
ARENA_DEFAULT_SIZE = 64 << 20
ARENA_FIRST_SIZE = 1 << 20  # with no arena size chosen, arenas double from here up to the default

HEADER_BYTES = 256
CONTROL_OFFSET = 256
CONTROL_BYTES = 768
PARTICIPANTS_OFFSET = CONTROL_OFFSET + CONTROL_BYTES
PARTICIPANT_BYTES = 128
SLOT_BYTES = 128
REF_BYTES = 48
ARENA_HEADER_BYTES = 64
BODY_HEADER_BYTES = 128
NODE_BYTES = 64
BUFFER_BYTES = 128

# Field offsets, by struct (names as in the C header).
SEGMENT_HEADER = dict(magic=0, ready_version=8, header_size=12, layout_hash=16, total_size=24,
                      slot_count=32, slot_size=36, participant_capacity=40, participant_size=44,
                      control_offset=48, participants_offset=56, slots_offset=64,
                      pid_namespace=72, created_unix_ns=80, creator_pid=88, flags=92, name=96,
                      reserved=128)
CONTROL = dict(tail=0, head=128, data_seq=256, data_waiters=260, data_doorbells=264, space_seq=384,
               space_waiters=388, space_doorbells=392, redeliver=512, subscribers=576, recovered=640,
               redelivered=648)
PARTICIPANT = dict(state=0, pid=8, roles=12, start_time=16, attached_unix_ns=24, arena_count=32,
                   published=40, leased=48, released=56, doorbell=64, doorbell_pipe=68, doorbell_key=72, cursor=80,
                   missed=88, missed_seen=96, subscription=104, proxy=112, doorbell_pipe_ino=120)
SLOT = dict(word=0, pending=8, ref=16)
FRAME_REF = dict(frame_id=0, producer=8, producer_gen=12, body_arena=16, body_length=20,
                 body_offset=24, user_tag=32, flags=40)
ARENA_HEADER = dict(magic=0, size=8, owner_pid=16, owner_index=20, owner_gen=24, arena=28)
BODY_HEADER = dict(magic=0, version=4, flags=6, body_length=8, node_count=12, buffer_count=16,
                   root_count=20, dictionary_count=24, strings_length=28, row_count=32,
                   metadata_offset=40, metadata_length=44, sync_kind=48, sync_handle=64)
BODY_NODE = dict(name_offset=0, name_length=4, format_offset=8, format_length=12,
                 metadata_offset=16, metadata_length=20, child_count=24, flags=28, dictionary=32,
                 buffer_count=36, length=40, null_count=48, offset=56)
BODY_BUFFER = dict(kind=0, flags=2, device_ordinal=4, device_uuid=8, offset=24, length=32,
                   alloc_id=40, pool_id=48, reserved=56, handle=64)

SLOT_STATES = ("EMPTY", "WRITING", "READY", "CLAIMED", "LEASED", "RELEASED")
EMPTY, WRITING, READY, CLAIMED, LEASED, RELEASED = range(6)
PARTICIPANT_STATES = ("FREE", "ACTIVE", "DEAD", "ATTACHING", "FREEING")
P_FREE, P_ACTIVE, P_DEAD, P_ATTACHING, P_FREEING = range(5)
BELL_DATA, BELL_SPACE, BELL_FUTEX, BELL_PIPE = 1, 2, 4, 8
BELL_ALL = BELL_DATA | BELL_SPACE | BELL_FUTEX | BELL_PIPE
ROLE_PRODUCER, ROLE_CONSUMER, ROLE_BRIDGE = 1, 2, 4  # bridge: informational (SPEC.md §1.1, §14)
MEMORY_KINDS = ("absent", "host", "cuda-ipc", "cuda-pool", "cuda-vmm")
NODE_NULLABLE, NODE_DICT_ORDERED, NODE_MAP_KEYS_SORTED = 1, 2, 4
SYNC_NONE, SYNC_CUDA_EVENT = 0, 2

SEQ_MASK = (1 << 48) - 1
REDELIVER_NONE = SEQ_MASK


def slot_word(seq: int, state: int, owner: int) -> int:
    """seq:48 | state:3 | owner:13, owner being participant index + 1 (0 = nobody)."""
    return ((seq & SEQ_MASK) << 16) | ((state & 7) << 13) | (owner & 0x1FFF)


def word_seq(w: int) -> int:
    return w >> 16


def word_state(w: int) -> int:
    return (w >> 13) & 7


def word_owner(w: int) -> int:
    return w & 0x1FFF


def seq_diff(a: int, b: int) -> int:
    """a - b as a signed 48-bit difference (positions wrap modulo 2**48)."""
    d = (a - b) & SEQ_MASK
    return d - (1 << 48) if d >= 1 << 47 else d


def pword(gen: int, pid: int, state: int) -> int:
    """A participant word: gen:32 | pid:29 | state:3 (pid only in ATTACHING and FREEING)."""
    return (gen & 0xFFFFFFFF) << 32 | (pid & 0x1FFFFFFF) << 3 | state


def pword_state(w: int) -> int:
    return w & 7


def pword_pid(w: int) -> int:
    return (w & 0xFFFFFFFF) >> 3


def segment_size(slot_count: int, participant_capacity: int) -> tuple[int, int, int]:
    """(participants_offset, slots_offset, total_size) of a segment."""
    slots_at = PARTICIPANTS_OFFSET + participant_capacity * PARTICIPANT_BYTES
    total = slots_at + slot_count * SLOT_BYTES
    return PARTICIPANTS_OFFSET, slots_at, (total + 4095) & ~4095
