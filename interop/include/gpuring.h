/*
 * gpuring.h: the gpuring wire format and its one implementation.
 *
 * This header is the normative byte layout (interop/SPEC.md explains it in
 * prose) and a complete header-only implementation of it: segment creation and
 * attachment, the participant table, the lock-free ring, dead-participant
 * recovery, host-memory arenas and the frame-body codec, and on top of them a
 * producer (gpuring/producer.h), a consumer (gpuring/consumer.h) and an Arrow C
 * data interface export of received frames (gpuring/arrow_export.h). The Node
 * addon and the C examples use this file; the Python package is written from
 * SPEC.md and checked against the same fixtures. Device memory: gpuring/cuda.h
 * (opt-in, loads the CUDA driver at run time).
 *
 * C11 or C++17, Linux, x86-64 or aarch64 (little-endian). Every shared word is a
 * fixed-width little-endian integer at a fixed offset, checked by static asserts.
 * Atomics use the GCC/Clang __atomic builtins on plain integers so that the same
 * structs compile as C and C++ and hold no pointers.
 */
#ifndef GPURING_H
#define GPURING_H

/* glibc fixes its feature set at the first system header. Included after one
 * read in strict ISO mode (-std=c11 without feature macros), POSIX itself
 * (clock_gettime, pread, O_CLOEXEC) is undeclared, which would surface as
 * dozens of unrelated errors below; say so once instead. (After one read in the
 * compilers' default mode everything needed is there.) */
#if defined(__GLIBC__) && !defined(__USE_MISC)
#error "gpuring.h needs POSIX and glibc's default extensions, and a system header included before it was read in strict ISO C mode: include <gpuring.h> before any system header, or compile with -D_GNU_SOURCE"
#define GPR_WITHOUT_POSIX 1
#endif
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#ifdef __cplusplus
#define GPR_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
extern "C" {
#else
#define GPR_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gpuring's wire format is little-endian; this target is not"
#endif

GPR_STATIC_ASSERT(__atomic_always_lock_free(8, 0), "64-bit atomics must be lock-free");
GPR_STATIC_ASSERT(__atomic_always_lock_free(4, 0), "32-bit atomics must be lock-free");

#define GPR_INLINE static inline __attribute__((unused))

/* ------------------------------------------------------------------------ */
/* Versions and constants                                                    */
/* ------------------------------------------------------------------------ */

#define GPR_VERSION_MAJOR 2u
#define GPR_VERSION_MINOR 5u
/* "GPURING\0" read as a little-endian u64. */
#define GPR_SEGMENT_MAGIC 0x00474E4952555047ull
/* "GPRARENA" read as a little-endian u64. */
#define GPR_ARENA_MAGIC 0x414E455241525047ull
/* "GPRF" read as a little-endian u32. */
#define GPR_BODY_MAGIC 0x46525047u
#define GPR_BODY_VERSION 1u

/* FNV-1a 64 of GPR_LAYOUT_STRING; a test checks that the two agree. Any change
 * to a struct below must change the string, and so the hash. */
#define GPR_LAYOUT_STRING \
  "gpuring-layout-2;header=256;control=768;participant=128;slot=128;ref=48;" \
  "slotword=seq48.state3.owner13;arena=64;body=128;node=64;buffer=128;buffer.alloc_id@40;" \
  "pword=gen32.pid29.state3;control.doorbells@264,392;participant.doorbell@64.key@72"
#define GPR_LAYOUT_HASH 0xddb92fd56ec23d52ull
/* A broadcast ring (every consumer sees every frame, SPEC.md §5.4) has its own
 * layout string and hash, so that a reader that predates broadcast rings (2.1
 * and older, which ignore header flags) refuses one with SEGMENT_LAYOUT rather
 * than taking its frames as a work queue. */
#define GPR_LAYOUT_STRING_BROADCAST \
  GPR_LAYOUT_STRING ";delivery=all;control.subscribers@576;participant.cursor@80.missed@88.missed_seen@96.subscription@104.proxy@112;slot.pending@8"
#define GPR_LAYOUT_HASH_BROADCAST 0xb6b792def69da75dull

#define GPR_CACHE_LINE 128u
#define GPR_NAME_MAX 32u            /* segment name: [A-Za-z0-9_-]{1,32} */
#define GPR_SHM_NAME_MAX 64u        /* "/gpuring.NAME.pIgG.aN" fits, NUL included */
#define GPR_MAX_SLOTS (1u << 20)
#define GPR_MAX_PARTICIPANTS 8190u  /* owner field is 13 bits, 0 = nobody */
#define GPR_MAX_BODY_BYTES (64u << 20)
/* Every element or byte count fits a double exactly, so every language reads it. */
#define GPR_MAX_COUNT ((1ull << 53) - 1u)
#define GPR_MAX_NODES (1u << 20)
#define GPR_MAX_DEPTH 64u          /* nesting levels below a column root */
#define GPR_MAX_BUFFERS (3u << 20)
#define GPR_MAX_ARENAS 4096u
#define GPR_HANDLE_BYTES 64u
/* Segment header flag: a broadcast ring (SPEC.md §5.4). Its participant table
 * holds at most 64 entries: a frame's `pending` word has one bit per entry. */
#define GPR_RING_BROADCAST 1u
#define GPR_MAX_BROADCAST_PARTICIPANTS 64u

/* ------------------------------------------------------------------------ */
/* Errors: stable codes shared by every language binding.                    */
/* ------------------------------------------------------------------------ */

#define GPR_ERROR_LIST(X)                                                        \
  X(OK, "no error")                                                              \
  X(INVALID_ARGUMENT, "an argument is out of range or malformed")                \
  X(SEGMENT_EXISTS, "a segment of that name already exists")                    \
  X(SEGMENT_NOT_FOUND, "no segment of that name exists")                         \
  X(SEGMENT_FOREIGN, "the shared-memory object is not a gpuring segment")        \
  X(SEGMENT_VERSION, "the segment was made by an incompatible gpuring version") \
  X(SEGMENT_LAYOUT, "the segment's layout does not match this build")            \
  X(SEGMENT_TRUNCATED, "the segment is smaller than its header says")            \
  X(SEGMENT_NOT_READY, "the segment was never fully initialized")                \
  X(PID_NAMESPACE, "the segment belongs to another PID namespace")               \
  X(NO_SPACE, "not enough free space in /dev/shm")                               \
  X(PARTICIPANTS_FULL, "the participant table is full")                          \
  X(RING_FULL, "the ring is full")                                               \
  X(RING_EMPTY, "the ring is empty")                                             \
  X(TIMEOUT, "the wait timed out")                                               \
  X(ABORTED, "the operation was aborted")                                        \
  X(CLOSED, "the producer or consumer is closed")                                \
  X(FRAME_INVALID, "the frame record or body is malformed")                      \
  X(FRAME_BOUNDS, "an offset or length in the frame is out of bounds")           \
  X(FRAME_STATE, "the frame is not in the state this operation needs")           \
  X(ARENA_INVALID, "a host arena is missing, foreign or too small")              \
  X(OUT_OF_MEMORY, "an allocation failed")                                       \
  X(SYSTEM, "a system call failed")                                              \
  X(UNSUPPORTED, "this build or machine cannot do that")                         \
  X(CUDA_UNAVAILABLE, "no usable CUDA driver on this machine")                   \
  X(CUDA, "a CUDA driver call failed")                                           \
  X(DEVICE_NOT_FOUND, "no visible CUDA device has that ordinal or UUID")         \
  X(NOT_EXPORTABLE, "this memory cannot be shared with CUDA IPC")                \
  X(SEGMENT_OWNER, "the segment belongs to another user")                       \
  X(DESCRIPTOR_UNAVAILABLE, "the producer did not hand over a memory descriptor") \
  X(FRAMES_MISSED, "frames of a broadcast ring were dropped before this consumer took them") \
  X(EVICTED, "this consumer fell behind and was evicted from a broadcast ring") \
  X(BRIDGE_REFUSED, "the bridge at the other end refused: version, roles, secret or a frame") \
  X(BRIDGE_PROTOCOL, "a malformed message came over a bridge's link")          \
  X(UCX_UNAVAILABLE, "UCX (UCXX), which bridges need, is not installed")       \
  X(DETACHED, "this participant's entry was taken from it: close it and open again")

typedef enum gpr_code {
#define GPR_X_ENUM(name, text) GPR_E_##name,
  GPR_ERROR_LIST(GPR_X_ENUM)
#undef GPR_X_ENUM
  GPR_E_COUNT_
} gpr_code;

typedef struct gpr_error {
  gpr_code code;
  int sys_errno;      /* errno of the failing call, 0 if none */
  char message[200];  /* human-readable, says what to do where it can */
} gpr_error;

GPR_INLINE const char *gpr_code_name(gpr_code code) {
  static const char *const names[] = {
#define GPR_X_NAME(name, text) #name,
      GPR_ERROR_LIST(GPR_X_NAME)
#undef GPR_X_NAME
  };
  return (unsigned)code < GPR_E_COUNT_ ? names[code] : "UNKNOWN";
}

GPR_INLINE int gpr_fail(gpr_error *err, gpr_code code, int sys_errno, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
GPR_INLINE int gpr_fail(gpr_error *err, gpr_code code, int sys_errno, const char *fmt, ...) {
  if (err) {
    va_list ap;
    err->code = code;
    err->sys_errno = sys_errno;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return -(int)code;
}

/* ------------------------------------------------------------------------ */
/* Shared layout                                                             */
/* ------------------------------------------------------------------------ */

/* Segment header, offset 0. Written once by the creator; `ready_version` is
 * stored last (release) and is 0 until the segment is usable. */
typedef struct gpr_segment_header {
  uint64_t magic;                 /*   0 GPR_SEGMENT_MAGIC */
  uint32_t ready_version;         /*   8 (major << 16 | minor), 0 = initializing */
  uint32_t header_size;           /*  12 sizeof(gpr_segment_header) */
  uint64_t layout_hash;           /*  16 GPR_LAYOUT_HASH */
  uint64_t total_size;            /*  24 bytes of the whole segment */
  uint32_t slot_count;            /*  32 power of two */
  uint32_t slot_size;             /*  36 sizeof(gpr_slot) */
  uint32_t participant_capacity;  /*  40 */
  uint32_t participant_size;      /*  44 sizeof(gpr_participant) */
  uint64_t control_offset;        /*  48 */
  uint64_t participants_offset;   /*  56 */
  uint64_t slots_offset;          /*  64 */
  uint64_t pid_namespace;         /*  72 inode of the creator's /proc/self/ns/pid */
  uint64_t created_unix_ns;       /*  80 */
  uint32_t creator_pid;           /*  88 */
  uint32_t flags;                 /*  92 GPR_RING_BROADCAST; other bits reserved, 0 */
  char name[GPR_NAME_MAX];        /*  96 segment name, NUL-padded */
  uint8_t reserved[128];          /* 128 */
} gpr_segment_header;

/* Ring control, offset 256. Each hot word has its own 128-byte line (two cache
 * lines, so the adjacent-line prefetcher does not couple them). */
typedef struct gpr_control {
  uint64_t tail;                  /*   0 producers' position hint (48-bit) */
  uint8_t pad0[120];
  uint64_t head;                  /* 128 consumers' position hint (48-bit) */
  uint8_t pad1[120];
  uint32_t data_seq;              /* 256 futex: bumped when a frame becomes READY */
  uint32_t data_waiters;          /* 260 consumers sleeping on data_seq */
  uint32_t data_doorbells;        /* 264 participants with a DATA doorbell armed (gpuring/doorbell.h) */
  uint8_t pad2[116];
  uint32_t space_seq;             /* 384 futex: bumped on release and recycle */
  uint32_t space_waiters;         /* 388 producers sleeping on space_seq */
  uint32_t space_doorbells;       /* 392 participants with a SPACE doorbell armed */
  uint8_t pad3[116];
  uint64_t redeliver;             /* 512 lowest redelivered position (48) | gen (16) */
  uint8_t pad4[56];
  uint64_t subscribers;           /* 576 broadcast rings: bit i = entry i is a subscriber (gpuring/broadcast.h) */
  uint8_t pad4b[56];
  uint64_t recovered;             /* 640 slots repaired after a participant died */
  uint64_t redelivered;           /* 648 frames handed back for another consumer */
  uint8_t pad5[112];
} gpr_control;

enum gpr_participant_state {
  GPR_PARTICIPANT_FREE = 0,
  GPR_PARTICIPANT_ACTIVE = 1,
  GPR_PARTICIPANT_DEAD = 2, /* gone (crashed or detached) with frames still referencing it */
  GPR_PARTICIPANT_ATTACHING = 3, /* being taken; the word names the attaching pid */
  GPR_PARTICIPANT_FREEING = 4    /* being freed by one sweeper; the word names its pid */
};

enum gpr_role { GPR_ROLE_PRODUCER = 1u, GPR_ROLE_CONSUMER = 2u, GPR_ROLE_BRIDGE = 4u /* informational, SPEC §14 */ };

/* Participant entry. `state` packs (generation << 32 | pid << 3 | state); the
 * generation grows on every attach so that arenas of an earlier occupant are
 * never mistaken for the current one's. The pid part is non-zero only in the
 * transient states ATTACHING and FREEING: it names the process doing the
 * transition, so that a survivor can finish or undo it if that process dies. */
typedef struct gpr_participant {
  uint64_t state;                 /*   0 gen:32 | state:32 */
  uint32_t pid;                   /*   8 */
  uint32_t roles;                 /*  12 gpr_role bits */
  uint64_t start_time;            /*  16 /proc/PID/stat field 22, clock ticks since boot */
  uint64_t attached_unix_ns;      /*  24 */
  uint32_t arena_count;           /*  32 arenas this participant created: a0 .. a(n-1) */
  uint32_t reserved0;             /*  36 */
  uint64_t published;             /*  40 frames published (written by owner) */
  uint64_t leased;                /*  48 frames taken (written by owner) */
  uint64_t released;              /*  56 frames released (written by owner) */
  uint32_t doorbell;              /*  64 GPR_BELL_* bits: asleep, ring me (gpuring/doorbell.h) */
  uint32_t doorbell_pipe;         /*  68 the owner's pipe read end, a descriptor number in its process (2.5) */
  uint64_t doorbell_key;          /*  72 names the owner's doorbell socket; 0 = none */
  /* Broadcast rings only (gpuring/broadcast.h); zero in a work-queue ring. */
  uint64_t cursor;                /*  80 next position this subscriber reads; GPR_CURSOR_EVICTED bit */
  uint64_t missed;                /*  88 frames dropped for it (added by producers) */
  uint64_t missed_seen;           /*  96 of those, how many it has reported (written by owner) */
  uint32_t subscription;          /* 104 0 = not subscribed, else on_slow policy + 1 */
  uint32_t reserved2;             /* 108 */
  uint64_t proxy;                 /* 112 who acts for this subscriber now: pid << 32 | start time mod 2^32; 0 = nobody */
  uint64_t doorbell_pipe_ino;     /* 120 that pipe's inode number; 0 = no pipe (2.5) */
} gpr_participant;

enum gpr_slot_state {
  GPR_SLOT_EMPTY = 0,    /* free for position seq */
  GPR_SLOT_WRITING = 1,  /* owner (a producer) is writing the reference */
  GPR_SLOT_READY = 2,    /* published, waiting for a consumer */
  GPR_SLOT_CLAIMED = 3,  /* owner (a consumer) took it, not yet handed to its user */
  GPR_SLOT_LEASED = 4,   /* owner (a consumer) holds the frame */
  GPR_SLOT_RELEASED = 5  /* owner (the producer) must reclaim its memory */
};

/* What a slot carries: where the frame body lies. Copied out, then validated. */
typedef struct gpr_frame_ref {
  uint64_t frame_id;              /*   0 producer-assigned, unique per producer generation */
  uint32_t producer;              /*   8 participant index */
  uint32_t producer_gen;          /*  12 participant generation */
  uint32_t body_arena;            /*  16 arena number of the producer */
  uint32_t body_length;           /*  20 */
  uint64_t body_offset;           /*  24 byte offset inside that arena */
  uint64_t user_tag;              /*  32 free for the application */
  uint32_t flags;                 /*  40 reserved, 0 */
  uint32_t reserved;              /*  44 */
} gpr_frame_ref;

typedef struct gpr_slot {
  uint64_t word;                  /*   0 seq:48 << 16 | state:3 << 13 | owner:13 */
  /* Broadcast rings: bit i = subscriber i has yet to release the frame. Beside
   * the word, in its cache line: a claim and a release read or write both. */
  uint64_t pending;               /*   8 */
  gpr_frame_ref ref;              /*  16 */
  uint8_t reserved[64];           /*  64 */
} gpr_slot;

/* Every arena (a shared-memory object holding host buffers) begins so. */
typedef struct gpr_arena_header {
  uint64_t magic;                 /*   0 GPR_ARENA_MAGIC */
  uint64_t size;                  /*   8 bytes of the whole arena */
  uint32_t owner_pid;             /*  16 */
  uint32_t owner_index;           /*  20 */
  uint32_t owner_gen;             /*  24 */
  uint32_t arena;                 /*  28 */
  uint8_t reserved[32];           /*  32 */
} gpr_arena_header;

/* Frame body: header, nodes, buffers, string table. */
typedef struct gpr_body_header {
  uint32_t magic;                 /*   0 GPR_BODY_MAGIC */
  uint16_t version;               /*   4 GPR_BODY_VERSION */
  uint16_t flags;                 /*   6 reserved, 0 */
  uint32_t body_length;           /*   8 whole body, bytes */
  uint32_t node_count;            /*  12 */
  uint32_t buffer_count;          /*  16 */
  uint32_t root_count;            /*  20 top-level fields (columns) */
  uint32_t dictionary_count;      /*  24 dictionary trees after the roots */
  uint32_t strings_length;        /*  28 bytes of string table (unpadded) */
  uint64_t row_count;             /*  32 */
  uint32_t metadata_offset;       /*  40 schema metadata, in the string table */
  uint32_t metadata_length;       /*  44 */
  uint16_t sync_kind;             /*  48 GPR_SYNC_NONE or GPR_SYNC_CUDA_EVENT */
  uint16_t reserved0;             /*  50 */
  uint32_t reserved1;             /*  52 */
  uint64_t reserved2;             /*  56 */
  uint8_t sync_handle[GPR_HANDLE_BYTES]; /* 64 */
} gpr_body_header;

/* sync_kind values; 1 is reserved (never written, accepted). */
enum gpr_sync_kind { GPR_SYNC_NONE = 0, GPR_SYNC_CUDA_EVENT = 2 };

enum gpr_node_flags {
  GPR_NODE_NULLABLE = 1u,
  GPR_NODE_DICT_ORDERED = 2u,
  GPR_NODE_MAP_KEYS_SORTED = 4u
};

typedef struct gpr_body_node {
  uint32_t name_offset;           /*   0 */
  uint32_t name_length;           /*   4 */
  uint32_t format_offset;         /*   8 Arrow C data interface format string */
  uint32_t format_length;         /*  12 */
  uint32_t metadata_offset;       /*  16 Arrow C data interface metadata encoding */
  uint32_t metadata_length;       /*  20 */
  uint32_t child_count;           /*  24 */
  uint32_t flags;                 /*  28 gpr_node_flags */
  int32_t dictionary;             /*  32 node index of the dictionary root, -1 none */
  uint32_t buffer_count;          /*  36 */
  uint64_t length;                /*  40 elements */
  int64_t null_count;             /*  48 */
  uint64_t offset;                /*  56 elements (also indexes validity bits) */
} gpr_body_node;

enum gpr_memory_kind { GPR_MEM_ABSENT = 0, GPR_MEM_HOST = 1, GPR_MEM_CUDA_IPC = 2, GPR_MEM_CUDA_POOL = 3, GPR_MEM_CUDA_VMM = 4 };

typedef struct gpr_body_buffer {
  uint16_t kind;                  /*   0 gpr_memory_kind */
  uint16_t flags;                 /*   2 reserved, 0 */
  int32_t device_ordinal;         /*   4 producer's ordinal, -1 for host */
  uint8_t device_uuid[16];        /*   8 zero for host */
  uint64_t offset;                /*  24 bytes from the base of the allocation named by handle */
  uint64_t length;                /*  32 bytes */
  uint64_t alloc_id;              /*  40 cuda-ipc, cuda-pool: CU_POINTER_ATTRIBUTE_BUFFER_ID of the
                                   *     allocation (never reused in the exporting process, unlike
                                   *     addresses and handles), so mapping caches tell recycled memory
                                   *     apart; cuda-vmm: the producer's span number (§9d); 0 for host */
  uint64_t pool_id;               /*  48 cuda-pool: the producer's number for the pool (§9b); else 0 */
  uint8_t reserved[8];            /*  56 */
  uint8_t handle[GPR_HANDLE_BYTES]; /* 64 host: NUL-terminated arena name; cuda-ipc: CUipcMemHandle;
                                     *    cuda-pool: CUmemPoolPtrExportData; cuda-vmm: span bytes u64,
                                     *    chunk count u32, zeros */
} gpr_body_buffer;

/* A cuda-vmm buffer's handle (§9d): the span's bytes (u64) and chunk count (u32), then zeros. */
GPR_INLINE void gpr_vmm_handle_write(uint8_t handle[GPR_HANDLE_BYTES], uint64_t bytes, uint32_t chunks) {
  memset(handle, 0, GPR_HANDLE_BYTES);
  memcpy(handle, &bytes, 8);
  memcpy(handle + 8, &chunks, 4);
}

GPR_INLINE void gpr_vmm_handle_read(const uint8_t handle[GPR_HANDLE_BYTES], uint64_t *bytes, uint32_t *chunks) {
  memcpy(bytes, handle, 8);
  memcpy(chunks, handle + 8, 4);
}

#define GPR_CHECK_SIZE(type, size) GPR_STATIC_ASSERT(sizeof(type) == (size), #type " size")
#define GPR_CHECK_OFFSET(type, field, off) \
  GPR_STATIC_ASSERT(offsetof(type, field) == (off), #type "." #field " offset")

GPR_CHECK_SIZE(gpr_segment_header, 256);
GPR_CHECK_OFFSET(gpr_segment_header, magic, 0);
GPR_CHECK_OFFSET(gpr_segment_header, ready_version, 8);
GPR_CHECK_OFFSET(gpr_segment_header, header_size, 12);
GPR_CHECK_OFFSET(gpr_segment_header, layout_hash, 16);
GPR_CHECK_OFFSET(gpr_segment_header, total_size, 24);
GPR_CHECK_OFFSET(gpr_segment_header, slot_count, 32);
GPR_CHECK_OFFSET(gpr_segment_header, slot_size, 36);
GPR_CHECK_OFFSET(gpr_segment_header, participant_capacity, 40);
GPR_CHECK_OFFSET(gpr_segment_header, participant_size, 44);
GPR_CHECK_OFFSET(gpr_segment_header, control_offset, 48);
GPR_CHECK_OFFSET(gpr_segment_header, participants_offset, 56);
GPR_CHECK_OFFSET(gpr_segment_header, slots_offset, 64);
GPR_CHECK_OFFSET(gpr_segment_header, pid_namespace, 72);
GPR_CHECK_OFFSET(gpr_segment_header, created_unix_ns, 80);
GPR_CHECK_OFFSET(gpr_segment_header, creator_pid, 88);
GPR_CHECK_OFFSET(gpr_segment_header, flags, 92);
GPR_CHECK_OFFSET(gpr_segment_header, name, 96);
GPR_CHECK_OFFSET(gpr_segment_header, reserved, 128);

GPR_CHECK_SIZE(gpr_control, 768);
GPR_CHECK_OFFSET(gpr_control, tail, 0);
GPR_CHECK_OFFSET(gpr_control, head, 128);
GPR_CHECK_OFFSET(gpr_control, data_seq, 256);
GPR_CHECK_OFFSET(gpr_control, data_waiters, 260);
GPR_CHECK_OFFSET(gpr_control, space_seq, 384);
GPR_CHECK_OFFSET(gpr_control, data_doorbells, 264);
GPR_CHECK_OFFSET(gpr_control, space_waiters, 388);
GPR_CHECK_OFFSET(gpr_control, space_doorbells, 392);
GPR_CHECK_OFFSET(gpr_control, redeliver, 512);
GPR_CHECK_OFFSET(gpr_control, subscribers, 576);
GPR_CHECK_OFFSET(gpr_control, recovered, 640);
GPR_CHECK_OFFSET(gpr_control, redelivered, 648);

GPR_CHECK_SIZE(gpr_participant, 128);
GPR_CHECK_OFFSET(gpr_participant, state, 0);
GPR_CHECK_OFFSET(gpr_participant, pid, 8);
GPR_CHECK_OFFSET(gpr_participant, roles, 12);
GPR_CHECK_OFFSET(gpr_participant, start_time, 16);
GPR_CHECK_OFFSET(gpr_participant, attached_unix_ns, 24);
GPR_CHECK_OFFSET(gpr_participant, arena_count, 32);
GPR_CHECK_OFFSET(gpr_participant, published, 40);
GPR_CHECK_OFFSET(gpr_participant, leased, 48);
GPR_CHECK_OFFSET(gpr_participant, released, 56);
GPR_CHECK_OFFSET(gpr_participant, doorbell, 64);
GPR_CHECK_OFFSET(gpr_participant, doorbell_pipe, 68);
GPR_CHECK_OFFSET(gpr_participant, doorbell_key, 72);
GPR_CHECK_OFFSET(gpr_participant, cursor, 80);
GPR_CHECK_OFFSET(gpr_participant, missed, 88);
GPR_CHECK_OFFSET(gpr_participant, missed_seen, 96);
GPR_CHECK_OFFSET(gpr_participant, subscription, 104);
GPR_CHECK_OFFSET(gpr_participant, proxy, 112);
GPR_CHECK_OFFSET(gpr_participant, doorbell_pipe_ino, 120);

GPR_CHECK_SIZE(gpr_frame_ref, 48);
GPR_CHECK_OFFSET(gpr_frame_ref, frame_id, 0);
GPR_CHECK_OFFSET(gpr_frame_ref, producer, 8);
GPR_CHECK_OFFSET(gpr_frame_ref, producer_gen, 12);
GPR_CHECK_OFFSET(gpr_frame_ref, body_arena, 16);
GPR_CHECK_OFFSET(gpr_frame_ref, body_length, 20);
GPR_CHECK_OFFSET(gpr_frame_ref, body_offset, 24);
GPR_CHECK_OFFSET(gpr_frame_ref, user_tag, 32);
GPR_CHECK_OFFSET(gpr_frame_ref, flags, 40);

GPR_CHECK_SIZE(gpr_slot, 128);
GPR_CHECK_OFFSET(gpr_slot, word, 0);
GPR_CHECK_OFFSET(gpr_slot, ref, 16);
GPR_CHECK_OFFSET(gpr_slot, pending, 8);

GPR_CHECK_SIZE(gpr_arena_header, 64);
GPR_CHECK_OFFSET(gpr_arena_header, size, 8);
GPR_CHECK_OFFSET(gpr_arena_header, owner_pid, 16);
GPR_CHECK_OFFSET(gpr_arena_header, arena, 28);

GPR_CHECK_SIZE(gpr_body_header, 128);
GPR_CHECK_OFFSET(gpr_body_header, body_length, 8);
GPR_CHECK_OFFSET(gpr_body_header, node_count, 12);
GPR_CHECK_OFFSET(gpr_body_header, buffer_count, 16);
GPR_CHECK_OFFSET(gpr_body_header, root_count, 20);
GPR_CHECK_OFFSET(gpr_body_header, dictionary_count, 24);
GPR_CHECK_OFFSET(gpr_body_header, strings_length, 28);
GPR_CHECK_OFFSET(gpr_body_header, row_count, 32);
GPR_CHECK_OFFSET(gpr_body_header, metadata_offset, 40);
GPR_CHECK_OFFSET(gpr_body_header, metadata_length, 44);
GPR_CHECK_OFFSET(gpr_body_header, sync_kind, 48);
GPR_CHECK_OFFSET(gpr_body_header, sync_handle, 64);

GPR_CHECK_SIZE(gpr_body_node, 64);
GPR_CHECK_OFFSET(gpr_body_node, format_offset, 8);
GPR_CHECK_OFFSET(gpr_body_node, metadata_offset, 16);
GPR_CHECK_OFFSET(gpr_body_node, child_count, 24);
GPR_CHECK_OFFSET(gpr_body_node, flags, 28);
GPR_CHECK_OFFSET(gpr_body_node, dictionary, 32);
GPR_CHECK_OFFSET(gpr_body_node, buffer_count, 36);
GPR_CHECK_OFFSET(gpr_body_node, length, 40);
GPR_CHECK_OFFSET(gpr_body_node, null_count, 48);
GPR_CHECK_OFFSET(gpr_body_node, offset, 56);

GPR_CHECK_SIZE(gpr_body_buffer, 128);
GPR_CHECK_OFFSET(gpr_body_buffer, device_ordinal, 4);
GPR_CHECK_OFFSET(gpr_body_buffer, device_uuid, 8);
GPR_CHECK_OFFSET(gpr_body_buffer, offset, 24);
GPR_CHECK_OFFSET(gpr_body_buffer, length, 32);
GPR_CHECK_OFFSET(gpr_body_buffer, alloc_id, 40);
GPR_CHECK_OFFSET(gpr_body_buffer, pool_id, 48);
GPR_CHECK_OFFSET(gpr_body_buffer, reserved, 56);
GPR_CHECK_OFFSET(gpr_body_buffer, handle, 64);

#define GPR_CONTROL_OFFSET 256u
#define GPR_PARTICIPANTS_OFFSET (GPR_CONTROL_OFFSET + 768u)

#ifndef GPR_WITHOUT_POSIX /* (the #error above says why) */
#include "gpuring/process.h"
#include "gpuring/segment.h"
#include "gpuring/doorbell.h"
#include "gpuring/descriptor_channel.h"
#include "gpuring/ring.h"
#include "gpuring/broadcast.h"
#include "gpuring/recovery.h"
#include "gpuring/arena.h"
#include "gpuring/format.h"
#include "gpuring/body.h"
#include "gpuring/producer.h"
#include "gpuring/consumer.h"
#include "gpuring/arrow_export.h"
#endif

#ifdef __cplusplus
}
#endif

#endif /* GPURING_H */
