/* spec_ring.h: the ring protocol of interop/SPEC.md, written from that document
 * alone (no gpuring.h), for spec_producer.c and spec_consumer.c. Each function
 * names the section it implements. It is the proof that SPEC.md suffices, not a
 * library: errors print and return -1, and only what the two programs need is
 * here (host memory only; waiting on the futex or on a doorbell). Both
 * kinds of ring: work queues (§5.2, §5.3) and broadcast rings (§5.4).
 *
 * Shared memory is read through the helpers below: every word at a fixed
 * offset of a validated geometry, atomics with the orders SPEC.md names. */
#ifndef SPEC_RING_H
#define SPEC_RING_H
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* §1.1 constants */
#define SEG_MAGIC 0x00474E4952555047ull
#define ARENA_MAGIC 0x414E455241525047ull
#define BODY_MAGIC 0x46525047u
#define LAYOUT_HASH 0xddb92fd56ec23d52ull
#define LAYOUT_HASH_BROADCAST 0xb6b792def69da75dull
#define FLAG_BROADCAST 1u
#define CURSOR_EVICTED (1ull << 63)
#define CURSOR_DROPPING (1ull << 62)
#define VERSION_MAJOR 2u
#define MASK48 ((1ull << 48) - 1u)
#define NOTHING_PENDING MASK48
#define ROLE_PRODUCER 1u
#define ROLE_CONSUMER 2u

/* §12 field offsets: segment header, control (from 256), participant entry, slot, reference */
enum { H_READY = 8, H_HEADER_SIZE = 12, H_HASH = 16, H_TOTAL = 24, H_SLOTS = 32, H_SLOT_SIZE = 36,
       H_PCAP = 40, H_PSIZE = 44, H_CONTROL = 48, H_POFF = 56, H_SOFF = 64, H_PIDNS = 72, H_FLAGS = 92 };
enum { C_TAIL = 256, C_HEAD = 384, C_DATA_SEQ = 512, C_DATA_WAITERS = 516, C_DATA_BELLS = 520,
       C_SPACE_SEQ = 640, C_SPACE_WAITERS = 644, C_SPACE_BELLS = 648, C_REDELIVER = 768,
       C_SUBSCRIBERS = 832, C_RECOVERED = 896, C_REDELIVERED = 904 };
enum { P_STATE = 0, P_PID = 8, P_ROLES = 12, P_START = 16, P_ATTACHED = 24, P_ARENAS = 32,
       P_PUBLISHED = 40, P_LEASED = 48, P_RELEASED = 56, P_BELL = 64, P_KEY = 72,
       P_CURSOR = 80, P_MISSED = 88, P_MISSED_SEEN = 96, P_SUBSCRIPTION = 104, P_PROXY = 112 };
enum { SLOT_PENDING = 8 }; /* §5.4: a broadcast frame's subscribers yet to release it */
enum { REF_FRAME_ID = 0, REF_PRODUCER = 8, REF_PRODUCER_GEN = 12, REF_BODY_ARENA = 16,
       REF_BODY_LENGTH = 20, REF_BODY_OFFSET = 24, REF_USER_TAG = 32 };
/* §4 participant states, §5.1 slot states, §6.1 doorbell bits */
enum { P_FREE, P_ACTIVE, P_DEAD, P_ATTACHING, P_FREEING };
enum { S_EMPTY, S_WRITING, S_READY, S_CLAIMED, S_LEASED, S_RELEASED };
enum { BELL_DATA = 1, BELL_SPACE = 2, BELL_FUTEX = 4 };
enum { RING_OK = 0, RING_NONE = 1 }; /* RING_NONE: full (publish) or empty (claim) */
enum { RING_MISSED = 2, RING_EVICTED = 3 }; /* §5.4 claim: FRAMES_MISSED, EVICTED */
enum { RING_DETACHED = 4 };                  /* §4 "Losing the entry": publish or claim refused */
enum { ON_SLOW_BLOCK, ON_SLOW_DROP_OLDEST, ON_SLOW_EVICT };

typedef struct ring {
  char name[33];
  int fd;
  uint8_t *base;
  uint64_t size, poff, soff;
  uint32_t slots, capacity;
  uint32_t me, gen; /* our entry (plain index) and its generation */
  int broadcast;    /* §1.1 segment flag 1: every subscriber gets every frame (§5.4) */
} ring;

/* A frame reference copied out of a slot (§12). */
typedef struct frame_ref {
  uint64_t frame_id, body_offset, user_tag;
  uint32_t producer, producer_gen, body_arena, body_length;
} frame_ref;

static inline int spec_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static inline int spec_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return -1;
}

/* ---- words in shared memory ---- */
static inline uint64_t *w64(const ring *r, uint64_t off) { return (uint64_t *)(r->base + off); }
static inline uint32_t *w32(const ring *r, uint64_t off) { return (uint32_t *)(r->base + off); }
static inline uint64_t entry(const ring *r, uint32_t i) { return r->poff + 128ull * i; }
static inline uint64_t slot_at(const ring *r, uint64_t pos) { return r->soff + 128ull * (pos & (r->slots - 1u)); }
static inline int cas64(uint64_t *p, uint64_t expect, uint64_t want) {
  return __atomic_compare_exchange_n(p, &expect, want, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

/* §5.1 slot word and §4 participant word */
static inline uint64_t sword(uint64_t seq, uint32_t state, uint32_t owner) {
  return (seq & MASK48) << 16 | (uint64_t)state << 13 | owner;
}
static inline uint64_t sw_seq(uint64_t w) { return w >> 16; }
static inline uint32_t sw_state(uint64_t w) { return (uint32_t)(w >> 13) & 7u; }
static inline uint32_t sw_owner(uint64_t w) { return (uint32_t)w & 0x1fffu; }
static inline uint64_t pword(uint32_t gen, uint32_t pid, uint32_t state) {
  return (uint64_t)gen << 32 | (uint64_t)(pid & 0x1fffffffu) << 3 | state;
}
static inline uint32_t pw_state(uint64_t w) { return (uint32_t)w & 7u; }
static inline uint32_t pw_gen(uint64_t w) { return (uint32_t)(w >> 32); }
static inline uint32_t pw_pid(uint64_t w) { return (uint32_t)(w >> 3) & 0x1fffffffu; }
/* §5.2: positions compare by their signed 48-bit difference */
static inline int64_t seqdiff(uint64_t a, uint64_t b) { return (int64_t)((a - b) << 16) >> 16; }

static inline uint64_t now_ns(clockid_t clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- §4 process identity: /proc/PID/stat state (field 3) and start time (field 22) ---- */
/* 0: read; -1: no such process (ENOENT, ESRCH); -2: cannot tell (any other failure). */
static inline int proc_stat(uint32_t pid, char *state, uint64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? -1 : -2;
  ssize_t n = read(fd, buf, sizeof buf - 1u);
  int e = errno;
  close(fd);
  if (n == 0 || (n < 0 && e == ESRCH)) return -1;
  if (n < 0) return -2;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
  if (!p || p[1] != ' ') return -2;
  *state = p[2];
  p += 2;
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -2;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 0;
}
/* The start time of a running process (not a zombie): 0, -1 (not running) or -2 (cannot tell). */
static inline int running_start(uint32_t pid, uint64_t *start) {
  char st;
  if (pid == 0) return -1;
  int rc = proc_stat(pid, &st, start);
  return rc != 0 ? rc : st == 'Z' || st == 'X' ? -1 : 0;
}
/* Alive also while we cannot tell: a sweep must never free a live peer. */
static inline int pid_running(uint32_t pid) {
  uint64_t start;
  return running_start(pid, &start) != -1;
}
static inline int process_alive(uint32_t pid, uint64_t start_time) {
  uint64_t start;
  int rc = running_start(pid, &start);
  return rc == -2 || (rc == 0 && start == start_time);
}

/* ---- §3.1 opening a segment ---- */
static inline int header_check(const uint8_t *h, uint64_t file_size, ring *r) {
  uint32_t u32v[16];
  uint64_t hash, total, poff, soff, pidns;
  memcpy(u32v, h, 64);
  memcpy(&hash, h + H_HASH, 8);
  memcpy(&total, h + H_TOTAL, 8);
  memcpy(&poff, h + H_POFF, 8);
  memcpy(&soff, h + H_SOFF, 8);
  memcpy(&pidns, h + H_PIDNS, 8);
  uint32_t ready = u32v[H_READY / 4], slots = u32v[H_SLOTS / 4], cap = u32v[H_PCAP / 4], flags;
  uint64_t control;
  memcpy(&control, h + H_CONTROL, 8);
  memcpy(&flags, h + H_FLAGS, 4);
  if (ready >> 16 != VERSION_MAJOR) return spec_fail("SEGMENT_VERSION: version %u.%u", ready >> 16, ready & 0xffffu);
  /* §1.1: the flags and the hash agree (a broadcast ring has its own), no other flag bit */
  int broadcast = flags == FLAG_BROADCAST;
  if ((flags & ~FLAG_BROADCAST) || hash != (broadcast ? LAYOUT_HASH_BROADCAST : LAYOUT_HASH) ||
      u32v[H_HEADER_SIZE / 4] != 256 || u32v[H_SLOT_SIZE / 4] != 128 || u32v[H_PSIZE / 4] != 128 || control != 256)
    return spec_fail("SEGMENT_LAYOUT: layout hash, flags or sizes differ");
  if (slots < 2 || slots > (1u << 20) || (slots & (slots - 1u)) || cap < 1 || cap > (broadcast ? 64u : 8190u))
    return spec_fail("SEGMENT_LAYOUT: slot count %u or capacity %u out of range", slots, cap);
  uint64_t want_soff = 1024ull + 128ull * cap;
  uint64_t want_total = (want_soff + 128ull * slots + 4095u) & ~4095ull;
  if (poff != 1024 || soff != want_soff || total != want_total) return spec_fail("SEGMENT_LAYOUT: offsets");
  if (file_size < total) return spec_fail("SEGMENT_TRUNCATED: %" PRIu64 " < %" PRIu64, file_size, total);
  if (file_size > total) return spec_fail("SEGMENT_LAYOUT: file larger than total_size");
  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) == 0 && (uint64_t)ns.st_ino != pidns)
    return spec_fail("PID_NAMESPACE: segment made in another PID namespace");
  r->slots = slots;
  r->capacity = cap;
  r->broadcast = broadcast;
  r->poff = poff;
  r->soff = soff;
  r->size = total;
  return 0;
}

static inline int ring_open(ring *r, const char *name, uint32_t timeout_ms) {
  char shm[64];
  memset(r, 0, sizeof *r);
  snprintf(r->name, sizeof r->name, "%s", name);
  snprintf(shm, sizeof shm, "/gpuring.%s", name);
  uint64_t deadline = now_ns(CLOCK_MONOTONIC) + timeout_ms * 1000000ull;
  while ((r->fd = shm_open(shm, O_RDWR | O_CLOEXEC, 0)) < 0) { /* the creator may start after us */
    if (errno != ENOENT || now_ns(CLOCK_MONOTONIC) > deadline) return spec_fail("SEGMENT_NOT_FOUND: %s", shm);
    usleep(2000);
  }
  struct stat st;
  if (fstat(r->fd, &st) != 0 || st.st_uid != geteuid()) return spec_fail("SEGMENT_OWNER: %s", shm);
  uint8_t h[256];
  for (;;) {
    memset(h, 0, sizeof h);
    ssize_t n = pread(r->fd, h, sizeof h, 0);
    uint64_t magic;
    uint32_t ready;
    memcpy(&magic, h, 8);
    memcpy(&ready, h + H_READY, 4);
    if (n >= 8 && magic != 0 && magic != SEG_MAGIC) return spec_fail("SEGMENT_FOREIGN: %s", shm);
    if (magic == SEG_MAGIC && n < 256) return spec_fail("SEGMENT_TRUNCATED: header");
    if (magic == SEG_MAGIC && ready != 0) break;
    if (now_ns(CLOCK_MONOTONIC) > deadline) return spec_fail("SEGMENT_NOT_READY: %s", shm);
    usleep(1000);
  }
  if (fstat(r->fd, &st) != 0 || header_check(h, (uint64_t)st.st_size, r) != 0) return -1;
  r->base = (uint8_t *)mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
  if (r->base == MAP_FAILED) return spec_fail("mmap: %s", strerror(errno));
  /* §3.1 step 4: the acquire load through the mapping orders the creator's writes before ours */
  if (__atomic_load_n(w32(r, H_READY), __ATOMIC_ACQUIRE) == 0) return spec_fail("SEGMENT_NOT_READY");
  return 0;
}

/* §2: a creator checks /dev/shm's free space, then reserves the pages. */
static inline int shm_reserve(int fd, uint64_t bytes) {
  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) != 0 || (uint64_t)vfs.f_bavail * vfs.f_frsize < bytes)
    return spec_fail("NO_SPACE: /dev/shm cannot hold %" PRIu64 " bytes", bytes);
  int e = posix_fallocate(fd, 0, (off_t)bytes);
  return e ? spec_fail("NO_SPACE: posix_fallocate: %s", strerror(e)) : 0;
}

/* §3.1 creating: an unnamed file in /dev/shm, sized and reserved (§2), every field, slot
 * words, then ready_version (release), and only then the name (linkat, never replacing). */
static inline int ring_create(const char *name, uint32_t slots, uint32_t capacity, int broadcast) {
  char path[64], self[32];
  snprintf(path, sizeof path, "/dev/shm/gpuring.%s", name);
  int fd = open("/dev/shm", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return spec_fail("open(/dev/shm, O_TMPFILE): %s", strerror(errno));
  uint64_t soff = 1024ull + 128ull * capacity, total = (soff + 128ull * slots + 4095u) & ~4095ull;
  uint8_t *b = NULL;
  if (fchmod(fd, 0600) != 0 || shm_reserve(fd, total) != 0 ||
      (b = (uint8_t *)mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
    close(fd);
    return spec_fail("cannot create %s", path);
  }
  struct stat ns;
  uint64_t u64v[] = {SEG_MAGIC, broadcast ? LAYOUT_HASH_BROADCAST : LAYOUT_HASH, total, 256, 1024, soff, 0, now_ns(CLOCK_REALTIME)};
  uint32_t u32v[] = {256, slots, 128, capacity, 128, (uint32_t)getpid(), broadcast ? FLAG_BROADCAST : 0u};
  if (stat("/proc/self/ns/pid", &ns) == 0) u64v[6] = (uint64_t)ns.st_ino;
  memcpy(b + 0, &u64v[0], 8);
  memcpy(b + H_HEADER_SIZE, &u32v[0], 4);
  memcpy(b + H_HASH, &u64v[1], 8);
  memcpy(b + H_TOTAL, &u64v[2], 8);
  memcpy(b + H_SLOTS, &u32v[1], 4);
  memcpy(b + H_SLOT_SIZE, &u32v[2], 4);
  memcpy(b + H_PCAP, &u32v[3], 4);
  memcpy(b + H_PSIZE, &u32v[4], 4);
  memcpy(b + H_CONTROL, &u64v[3], 8);
  memcpy(b + H_POFF, &u64v[4], 8);
  memcpy(b + H_SOFF, &u64v[5], 8);
  memcpy(b + H_PIDNS, &u64v[6], 8);
  memcpy(b + 80, &u64v[7], 8);  /* created_unix_ns */
  memcpy(b + 88, &u32v[5], 4);  /* creator_pid */
  memcpy(b + H_FLAGS, &u32v[6], 4);
  memcpy(b + 96, name, strlen(name)); /* name, zero-padded to 32 bytes */
  for (uint64_t i = 0; i < slots; i++) {
    uint64_t w = sword(i, S_EMPTY, 0);
    memcpy(b + soff + 128u * i, &w, 8);
  }
  __atomic_store_n((uint32_t *)(b + H_READY), VERSION_MAJOR << 16, __ATOMIC_RELEASE);
  munmap(b, total);
  snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
  int named = linkat(AT_FDCWD, self, AT_FDCWD, path, AT_SYMLINK_FOLLOW), e = errno;
  close(fd);
  if (named == 0) return 0;
  return e == EEXIST ? 1 : spec_fail("linkat(%s): %s", path, strerror(e));
}

/* §2: removing the segment (the detach before it freed our entry and our arenas). */
static inline void ring_unlink(const char *name) {
  char shm[64];
  snprintf(shm, sizeof shm, "/gpuring.%s", name);
  shm_unlink(shm);
}

/* ---- §4 attach ---- */
static inline uint64_t self_start_time(void) {
  char st;
  uint64_t start = 0;
  proc_stat((uint32_t)getpid(), &st, &start);
  return start;
}

static inline void repair_leftovers(const ring *r, uint32_t index); /* §4 attach, below */

static inline int ring_attach(ring *r, uint32_t roles) {
  uint64_t start = self_start_time();
  if (start == 0) return spec_fail("SYSTEM"); /* recorded wrong, we would be swept while alive */
  for (uint32_t i = 0; i < r->capacity; i++) {
    uint64_t *state = w64(r, entry(r, i) + P_STATE);
    uint64_t w = __atomic_load_n(state, __ATOMIC_ACQUIRE);
    if (pw_state(w) != P_FREE) continue;
    uint32_t g = pw_gen(w) + 1u;
    if (!cas64(state, w, pword(g, (uint32_t)getpid(), P_ATTACHING))) continue;
    uint64_t e = entry(r, i);
    *w64(r, e + P_START) = start;
    __atomic_store_n(w32(r, e + P_PID), (uint32_t)getpid(), __ATOMIC_RELEASE);
    *w32(r, e + P_ROLES) = roles;
    *w64(r, e + P_ATTACHED) = now_ns(CLOCK_REALTIME);
    *w32(r, e + P_ARENAS) = 0;
    *w64(r, e + P_PUBLISHED) = *w64(r, e + P_LEASED) = *w64(r, e + P_RELEASED) = 0;
    *w32(r, e + P_BELL) = 0;
    *w64(r, e + P_KEY) = 0;
    *w64(r, e + P_CURSOR) = *w64(r, e + P_MISSED) = *w64(r, e + P_MISSED_SEEN) = 0; /* §5.4 */
    *w32(r, e + P_SUBSCRIPTION) = 0;
    repair_leftovers(r, i);
    __atomic_store_n(state, pword(g, 0, P_ACTIVE), __ATOMIC_RELEASE);
    r->me = i;
    r->gen = g;
    return 0;
  }
  return spec_fail("PARTICIPANTS_FULL");
}

/* §4 "Losing the entry": is our entry still the one our attach made? */
static inline int entry_held(const ring *r) {
  return __atomic_load_n(w64(r, entry(r, r->me) + P_STATE), __ATOMIC_RELAXED) == pword(r->gen, 0, P_ACTIVE);
}

static inline void count_up(const ring *r, uint32_t counter) {
  uint64_t *c = w64(r, entry(r, r->me) + counter);
  __atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1u, __ATOMIC_RELAXED);
}

/* ---- §6 notifying: futex, then doorbells ---- */
/* §6.1 the abstract address "\0gpuring.NAME.KEY": its length covers the NUL and the name, no terminator. */
static inline socklen_t doorbell_address(const ring *r, uint64_t key, struct sockaddr_un *a) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1u, "gpuring.%s.%016" PRIx64, r->name, key);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1u + (unsigned)n);
}

static inline void ring_doorbell(const ring *r, uint64_t key) {
  struct sockaddr_un a;
  socklen_t length = doorbell_address(r, key, &a);
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  char byte = 1;
  sendto(fd, &byte, 1, MSG_DONTWAIT, (struct sockaddr *)&a, length);
  close(fd);
}

/* §6.1 clearing: AND the bits away, and for each that was set take 1 from its count, never below 0.
 * Returns the bits it cleared, with BELL_FUTEX added if the word held it (ring the word, not the socket). */
static inline uint32_t bells_clear(const ring *r, uint32_t index, uint32_t bits) {
  uint32_t word = __atomic_fetch_and(w32(r, entry(r, index) + P_BELL), ~bits, __ATOMIC_SEQ_CST);
  uint32_t was = word & bits;
  for (uint32_t bit = BELL_DATA; bit <= BELL_SPACE; bit <<= 1) {
    if (!(was & bit)) continue;
    uint32_t *count = w32(r, bit == BELL_DATA ? C_DATA_BELLS : C_SPACE_BELLS);
    uint32_t c = __atomic_load_n(count, __ATOMIC_SEQ_CST);
    while (c > 0 && !__atomic_compare_exchange_n(count, &c, c - 1u, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
  }
  return was ? was | (word & BELL_FUTEX) : 0;
}

static inline void ring_notify(const ring *r, uint32_t bell) {
  uint32_t seq = bell == BELL_DATA ? C_DATA_SEQ : C_SPACE_SEQ;
  uint32_t waiters = bell == BELL_DATA ? C_DATA_WAITERS : C_SPACE_WAITERS;
#if defined(__SANITIZE_THREAD__) /* ThreadSanitizer does not model fences; a seq_cst RMW stands in */
  uint32_t sleeping = __atomic_fetch_add(w32(r, waiters), 0u, __ATOMIC_SEQ_CST);
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  uint32_t sleeping = __atomic_load_n(w32(r, waiters), __ATOMIC_SEQ_CST);
#endif
  if (sleeping > 0) {
    __atomic_fetch_add(w32(r, seq), 1u, __ATOMIC_RELEASE);
    syscall(SYS_futex, w32(r, seq), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  }
  uint32_t count = __atomic_load_n(w32(r, bell == BELL_DATA ? C_DATA_BELLS : C_SPACE_BELLS), __ATOMIC_SEQ_CST);
  for (uint32_t i = 0, seen = 0; i < r->capacity && seen < count; i++) {
    if (!(__atomic_load_n(w32(r, entry(r, i) + P_BELL), __ATOMIC_SEQ_CST) & bell)) continue;
    seen++;
    uint64_t key = __atomic_load_n(w64(r, entry(r, i) + P_KEY), __ATOMIC_ACQUIRE);
    uint32_t how = bells_clear(r, i, bell);
    if (how & BELL_FUTEX) /* §6.1: a thread asleep on the word itself */
      syscall(SYS_futex, w32(r, entry(r, i) + P_BELL), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
    else if (how && key) ring_doorbell(r, key);
  }
}

/* §6 waiting on a futex word: returns when `attempt` succeeded or after timeout_ms. */
static inline int ring_wait(const ring *r, uint32_t bell, int (*attempt)(void *), void *ctx, uint32_t timeout_ms) {
  uint32_t *seq = w32(r, bell == BELL_DATA ? C_DATA_SEQ : C_SPACE_SEQ);
  uint32_t *waiters = w32(r, bell == BELL_DATA ? C_DATA_WAITERS : C_SPACE_WAITERS);
  __atomic_fetch_add(waiters, 1u, __ATOMIC_SEQ_CST);
  uint32_t seen = __atomic_load_n(seq, __ATOMIC_SEQ_CST);
  int done = attempt(ctx);
  if (!done) {
    struct timespec ts = {(time_t)(timeout_ms / 1000u), (long)(timeout_ms % 1000u) * 1000000L};
    syscall(SYS_futex, seq, FUTEX_WAIT, seen, &ts, NULL, 0);
  }
  __atomic_fetch_sub(waiters, 1u, __ATOMIC_SEQ_CST);
  return done;
}

/* ---- §6.1 sleeping on a doorbell ---- */
typedef struct doorbell {
  int fd;
  uint64_t key;
} doorbell;

/* §6.1 words: a random non-zero key, its socket bound, stored (release) in our entry before any bit is set. */
static inline int doorbell_open(const ring *r, doorbell *d) {
  d->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (d->fd < 0) return spec_fail("doorbell socket: %s", strerror(errno));
  for (;;) {
    if (getrandom(&d->key, sizeof d->key, 0) != (ssize_t)sizeof d->key) return spec_fail("getrandom: %s", strerror(errno));
    if (d->key == 0) continue;
    struct sockaddr_un a;
    socklen_t length = doorbell_address(r, d->key, &a);
    if (bind(d->fd, (struct sockaddr *)&a, length) == 0) break;
    if (errno != EADDRINUSE) return spec_fail("doorbell bind: %s", strerror(errno)); /* in use: another key */
  }
  __atomic_store_n(w64(r, entry(r, r->me) + P_KEY), d->key, __ATOMIC_RELEASE);
  return 0;
}

/* §6.1 sleeper: returns 1 when `attempt` succeeded, else 0 after sleeping on the
 * socket until a datagram comes or timeout_ms pass. A notifier that rings us
 * clears our bit; one we find work after setting, we clear. */
static inline int doorbell_wait(const ring *r, const doorbell *d, uint32_t bell, int (*attempt)(void *), void *ctx, uint32_t timeout_ms) {
  uint64_t *key = w64(r, entry(r, r->me) + P_KEY);
  if (__atomic_load_n(key, __ATOMIC_ACQUIRE) != d->key) __atomic_store_n(key, d->key, __ATOMIC_RELEASE); /* damage */
  char datagram[64];
  while (recv(d->fd, datagram, sizeof datagram, MSG_DONTWAIT) >= 0) { /* before the bit, never after */
  }
  uint32_t was = __atomic_fetch_or(w32(r, entry(r, r->me) + P_BELL), bell, __ATOMIC_SEQ_CST);
  if (!(was & bell)) __atomic_fetch_add(w32(r, bell == BELL_DATA ? C_DATA_BELLS : C_SPACE_BELLS), 1u, __ATOMIC_SEQ_CST);
  if (attempt(ctx)) {
    bells_clear(r, r->me, bell);
    return 1;
  }
  struct pollfd p = {d->fd, POLLIN, 0};
  poll(&p, 1, (int)(timeout_ms > INT_MAX ? INT_MAX : timeout_ms));
  return 0;
}

/* ---- §5.2 scans ---- */
/* "Reload the hint": use it if at least 2 ahead of pos and less than slot_count ahead of pos + 1. */
static inline uint64_t reload_hint(const ring *r, uint32_t hint, uint64_t pos) {
  uint64_t h = __atomic_load_n(w64(r, hint), __ATOMIC_RELAXED) & MASK48;
  if (seqdiff(h, pos) >= 2 && seqdiff(h, pos + 1u) < (int64_t)r->slots) return h;
  return (pos + 1u) & MASK48;
}
static inline void advance_hint(const ring *r, uint32_t hint, uint64_t pos) {
  uint64_t *h = w64(r, hint);
  uint64_t next = (pos + 1u) & MASK48;
  if (seqdiff(next, __atomic_load_n(h, __ATOMIC_RELAXED) & MASK48) > 0) __atomic_store_n(h, next, __ATOMIC_RELAXED);
}

static inline void bc_relieve(const ring *r, uint64_t q); /* §5.4, below */

/* Publish, first half: claims the slot for the next position as WRITING. */
static inline int ring_claim_write(const ring *r, uint64_t *out) {
  if (!entry_held(r)) return RING_DETACHED;
  uint64_t pos = __atomic_load_n(w64(r, C_TAIL), __ATOMIC_RELAXED) & MASK48;
  for (uint32_t probe = 0; probe < 2u * r->slots + 2u; probe++) {
    uint64_t *word = w64(r, slot_at(r, pos));
    uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    int64_t d = seqdiff(sw_seq(w), pos);
    if (d == 0 && sw_state(w) == S_EMPTY) {
      if (!cas64(word, w, sword(pos, S_WRITING, r->me + 1u))) continue; /* lost a race: probe again */
      advance_hint(r, C_TAIL, pos);
      *out = pos;
      return RING_OK;
    }
    if (d == 0) pos = (pos + 1u) & MASK48;
    else if (d < -(int64_t)r->slots) pos = sw_seq(w); /* a bogus hint */
    else if (d < 0) {                                  /* the slot serves the previous lap: full */
      if (r->broadcast) bc_relieve(r, sw_seq(w));      /* §5.4 slow subscribers */
      return RING_NONE;
    }
    else pos = reload_hint(r, C_TAIL, pos);
  }
  return RING_NONE;
}

static inline void ref_write(const ring *r, uint64_t pos, const frame_ref *f) {
  uint8_t *p = r->base + slot_at(r, pos) + 16u;
  memset(p, 0, 48);
  memcpy(p + REF_FRAME_ID, &f->frame_id, 8);
  memcpy(p + REF_PRODUCER, &f->producer, 4);
  memcpy(p + REF_PRODUCER_GEN, &f->producer_gen, 4);
  memcpy(p + REF_BODY_ARENA, &f->body_arena, 4);
  memcpy(p + REF_BODY_LENGTH, &f->body_length, 4);
  memcpy(p + REF_BODY_OFFSET, &f->body_offset, 8);
  memcpy(p + REF_USER_TAG, &f->user_tag, 8);
}

static inline void ref_read(const ring *r, uint64_t pos, frame_ref *f) {
  uint8_t p[48];
  memcpy(p, r->base + slot_at(r, pos) + 16u, 48); /* copy out, then use (§1) */
  memcpy(&f->frame_id, p + REF_FRAME_ID, 8);
  memcpy(&f->producer, p + REF_PRODUCER, 4);
  memcpy(&f->producer_gen, p + REF_PRODUCER_GEN, 4);
  memcpy(&f->body_arena, p + REF_BODY_ARENA, 4);
  memcpy(&f->body_length, p + REF_BODY_LENGTH, 4);
  memcpy(&f->body_offset, p + REF_BODY_OFFSET, 8);
  memcpy(&f->user_tag, p + REF_USER_TAG, 8);
}


/* Where a released frame's slot goes (§5.2): RELEASED for its producer while that
 * entry is ACTIVE with the reference's generation, else EMPTY a lap on. */
static inline uint64_t released_word(const ring *r, uint64_t pos, const frame_ref *f) {
  if (f->producer < r->capacity) {
    uint64_t pw = __atomic_load_n(w64(r, entry(r, f->producer) + P_STATE), __ATOMIC_ACQUIRE);
    if (pw == pword(f->producer_gen, 0, P_ACTIVE)) return sword(pos, S_RELEASED, f->producer + 1u);
  }
  return sword(pos + r->slots, S_EMPTY, 0);
}

/* ---- §5.4 broadcast rings ---- */
static inline uint64_t *pending_of(const ring *r, uint64_t pos) { return w64(r, slot_at(r, pos) + SLOT_PENDING); }
static inline uint64_t *cursor_of(const ring *r, uint32_t k) { return w64(r, entry(r, k) + P_CURSOR); }

static inline uint64_t bc_finish_drop(const ring *r, uint32_t k, uint64_t c); /* below */
static inline uint64_t bc_settle_drop(const ring *r, uint32_t k, uint64_t c, uint64_t wait_ns); /* below */
#define DROP_WAIT_NS 20000ull       /* §5.4 Settling: how long to wait for a dropper to clear its mark */
#define DROP_STALE_NS 20000000ull   /* and after how long, seen unchanged, the mark is stale */

/* §5.4 Proxies: whoever acts on entry k's shares or cursor, k's occupant aside, holds
 * k's proxy word (pid << 32 | start time mod 2^32); a consumer that attached waits,
 * before it subscribes, until no live process holds its own (at most 1 s). */
static uint64_t proxy_me;
static inline int proxy_alive(uint64_t v) {
  uint64_t start;
  int rc = running_start((uint32_t)(v >> 32), &start);
  return rc == -2 || (rc == 0 && (uint32_t)start == (uint32_t)v);
}
static inline int proxy_take(const ring *r, uint32_t k) {
  if (!proxy_me) {
    char st;
    uint64_t start = 0;
    proc_stat((uint32_t)getpid(), &st, &start);
    proxy_me = (uint64_t)getpid() << 32 | (uint32_t)start;
  }
  uint64_t *word = w64(r, entry(r, k) + P_PROXY), held = 0;
  if (!__atomic_compare_exchange_n(word, &held, proxy_me, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST) &&
      (held == proxy_me || proxy_alive(held) ||
       !__atomic_compare_exchange_n(word, &held, proxy_me, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)))
    return 0;
  return 1; /* the CAS is a seq_cst RMW: the entry is judged after it */
}
static inline void proxy_give(const ring *r, uint32_t k) { cas64(w64(r, entry(r, k) + P_PROXY), proxy_me, 0); }
static inline void proxy_await(const ring *r) {
  uint64_t v, until = now_ns(CLOCK_MONOTONIC) + 1000000000ull; /* loaded by a seq_cst RMW, after our ACTIVE store */
  while ((v = __atomic_fetch_add(w64(r, entry(r, r->me) + P_PROXY), 0u, __ATOMIC_SEQ_CST)) && proxy_alive(v) &&
         now_ns(CLOCK_MONOTONIC) < until)
    usleep(20);
}

/* Subscribe: cursor a lap behind the tail (or where an eviction left it) by CAS, then subscription, then the bit. */
static inline void bc_subscribe(const ring *r, uint32_t on_slow) {
  uint64_t t = __atomic_load_n(w64(r, C_TAIL), __ATOMIC_RELAXED) & MASK48;
  uint64_t *cur = cursor_of(r, r->me), c = __atomic_load_n(cur, __ATOMIC_SEQ_CST), start;
  for (;;) {
    if (c & CURSOR_DROPPING) { /* a drop half done: wait until its mark clears or goes stale */
      c = bc_settle_drop(r, r->me, c, DROP_STALE_NS + DROP_WAIT_NS);
      continue;
    }
    start = (t - r->slots) & MASK48;
    if ((c & CURSOR_EVICTED) && seqdiff(c & MASK48, start) > 0) start = c & MASK48;
    if (__atomic_compare_exchange_n(cur, &c, start, 0, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) break;
  }
  __atomic_store_n(w32(r, entry(r, r->me) + P_SUBSCRIPTION), on_slow + 1u, __ATOMIC_SEQ_CST);
  __atomic_fetch_or(w64(r, C_SUBSCRIBERS), 1ull << r->me, __ATOMIC_SEQ_CST);
}

/* The last share of the READY frame at pos (word w) went: RELEASED for its producer, or EMPTY. */
static inline void bc_retire(const ring *r, uint64_t pos, uint64_t w) {
  frame_ref f;
  ref_read(r, pos, &f);
  if (cas64(w64(r, slot_at(r, pos)), w, released_word(r, pos, &f))) ring_notify(r, BELL_SPACE);
}

/* Release of subscriber k's share of the frame at pos; the last share moves the slot on. */
static inline int bc_release_as(const ring *r, uint32_t k, uint64_t pos) {
  uint64_t *word = w64(r, slot_at(r, pos));
  uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE), bit = 1ull << (k & 63u);
  if (k >= 64u || sw_seq(w) != (pos & MASK48) || sw_state(w) != S_READY) return -1;
  uint64_t was = __atomic_fetch_and(pending_of(r, pos), ~bit, __ATOMIC_ACQ_REL);
  if (!(was & bit)) return -1;
  if (!(was & ~bit)) bc_retire(r, pos, w);
  return 0;
}

/* Does the READY frame at pos (slot word w) carry bit? The word is loaded again after
 * `pending`: a frame gone meanwhile, its slot published a lap on, shows the new one's. */
static inline int bc_carries(const ring *r, uint64_t pos, uint64_t w, uint64_t bit) {
  return (__atomic_load_n(pending_of(r, pos), __ATOMIC_ACQUIRE) & bit) &&
         __atomic_load_n(w64(r, slot_at(r, pos)), __ATOMIC_ACQUIRE) == w;
}

/* Claim: from the cursor, the first READY frame carrying our bit, taken by the cursor CAS. */
static inline int bc_claim(const ring *r, uint64_t *out, frame_ref *f) {
  uint64_t *cur = cursor_of(r, r->me), bit = 1ull << r->me, e = entry(r, r->me);
  for (int tries = 0; tries < 4; tries++) {
    uint64_t c = __atomic_load_n(cur, __ATOMIC_ACQUIRE);
    if (c & CURSOR_DROPPING) {
      if (bc_settle_drop(r, r->me, c, DROP_WAIT_NS) & CURSOR_DROPPING) return RING_NONE; /* not counted yet */
      continue;
    }
    if (c & CURSOR_EVICTED) return RING_EVICTED;
    uint64_t untold = __atomic_load_n(w64(r, e + P_MISSED), __ATOMIC_ACQUIRE) - *w64(r, e + P_MISSED_SEEN);
    if ((int64_t)untold > 0) return RING_MISSED;
    if (untold != 0) *w64(r, e + P_MISSED_SEEN) = *w64(r, e + P_MISSED); /* a count taken back */
    uint64_t pos = c & MASK48;
    int lost = 0;
    for (uint32_t probe = 0; probe < 2u * r->slots + 2u && !lost; probe++) {
      uint64_t w = __atomic_load_n(w64(r, slot_at(r, pos)), __ATOMIC_ACQUIRE);
      int64_t d = seqdiff(sw_seq(w), pos);
      uint32_t st = sw_state(w);
      if (d < -(int64_t)r->slots) {
        pos = sw_seq(w);
        continue;
      }
      if (d < 0 || (d == 0 && (st == S_EMPTY || st == S_WRITING))) break;
      if (d == 0 && st == S_READY && bc_carries(r, pos, w, bit)) {
        if (!cas64(cur, c, (pos + 1u) & MASK48)) {
          lost = 1;
          break;
        }
        ref_read(r, pos, f);
        *out = pos;
        return RING_OK;
      }
      /* More than a lap behind the slot: to the slot's seq - slot_count at once. */
      pos = (d > (int64_t)r->slots ? sw_seq(w) - r->slots : pos + 1u) & MASK48;
    }
    if (lost) continue;
    if (pos != (c & MASK48)) cas64(cur, c, pos);
    /* Empty: a missing subscribers bit is damage, put back. */
    uint64_t *subs = w64(r, C_SUBSCRIBERS);
    if (!(__atomic_load_n(subs, __ATOMIC_SEQ_CST) & bit)) __atomic_fetch_or(subs, bit, __ATOMIC_SEQ_CST);
    return RING_NONE;
  }
  return RING_NONE;
}

/* Learning of a loss: missed - missed_seen (none when negative), then missed_seen = missed. */
static inline uint64_t bc_take_missed(const ring *r) {
  uint64_t e = entry(r, r->me), missed = __atomic_load_n(w64(r, e + P_MISSED), __ATOMIC_ACQUIRE);
  uint64_t seen = *w64(r, e + P_MISSED_SEEN);
  __atomic_store_n(w64(r, e + P_MISSED_SEEN), missed, __ATOMIC_RELAXED);
  return (int64_t)(missed - seen) > 0 ? missed - seen : 0;
}

/* A live subscriber (1..3: a policy), or a consumer joining (0): its share is its own to release. */
static inline int bc_subscribed(const ring *r, uint32_t k) {
  if (k >= r->capacity || pw_state(__atomic_load_n(w64(r, entry(r, k) + P_STATE), __ATOMIC_ACQUIRE)) != P_ACTIVE) return 0;
  uint32_t s = __atomic_load_n(w32(r, entry(r, k) + P_SUBSCRIPTION), __ATOMIC_ACQUIRE);
  return s - 1u < 3u || (s == 0 && (*w32(r, entry(r, k) + P_ROLES) & ROLE_CONSUMER));
}
/* Finish the drop a DROPPING cursor names: release the share of the frame before its
 * position, count the frame missed, then clear the mark by CAS; if that CAS fails,
 * another finished it and counted too: take the count back. */
static inline uint64_t bc_finish_drop(const ring *r, uint32_t k, uint64_t c) {
  bc_release_as(r, k, ((c & MASK48) - 1u) & MASK48);
  uint64_t done = c & ~CURSOR_DROPPING;
  __atomic_fetch_add(w64(r, entry(r, k) + P_MISSED), 1u, __ATOMIC_RELEASE);
  if (__atomic_compare_exchange_n(cursor_of(r, k), &c, done, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return done;
  __atomic_fetch_sub(w64(r, entry(r, k) + P_MISSED), 1u, __ATOMIC_RELEASE);
  return c;
}
/* Settle another's drop marked in k's cursor c: wait up to wait_ns for the mark to
 * clear; one this process has seen unchanged for DROP_STALE_NS is finished here. The
 * marks seen: one ring per process in these programs. */
static uint64_t bc_marks[64], bc_marks_since[64];
static inline uint64_t bc_settle_drop(const ring *r, uint32_t k, uint64_t c, uint64_t wait_ns) {
  uint64_t now = now_ns(CLOCK_MONOTONIC), until = now + wait_ns;
  if (k >= 64u) return c;
  if (bc_marks[k] != c) bc_marks[k] = c, bc_marks_since[k] = now;
  while (c == bc_marks[k] && now - bc_marks_since[k] < DROP_STALE_NS) {
    if (now >= until) return c;
    c = __atomic_load_n(cursor_of(r, k), __ATOMIC_ACQUIRE);
    now = now_ns(CLOCK_MONOTONIC);
  }
  return c == bc_marks[k] ? bc_finish_drop(r, k, c) : c;
}
/* Drop the frame at pos for k, whose cursor was *c (at or before pos, no DROPPING: else
 * nothing): cursor past it by CAS, marked DROPPING (EVICTED kept), then finish. *c becomes
 * the cursor this drop left, the one a next drop expects. */
static inline int bc_drop(const ring *r, uint32_t k, uint64_t *c, uint64_t pos) {
  if ((*c & CURSOR_DROPPING) || seqdiff(pos, *c & MASK48) < 0) return 0;
  uint64_t marked = CURSOR_DROPPING | (*c & CURSOR_EVICTED) | ((pos + 1u) & MASK48);
  if (!__atomic_compare_exchange_n(cursor_of(r, k), c, marked, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 0;
  bc_finish_drop(r, k, marked);
  *c = marked & ~CURSOR_DROPPING;
  return 1;
}

/* Drop k's untaken frames in position order from its cursor *c through last; stop at a
 * position still being published (EMPTY/WRITING there, or a lap behind) or a failed drop. */
static inline void bc_drop_through(const ring *r, uint32_t k, uint64_t *c, uint64_t last) {
  uint64_t p = *c & MASK48;
  for (uint64_t steps = 2u * r->slots + 2u; steps > 0 && seqdiff(last, p) >= 0; steps--) {
    uint64_t pw = __atomic_load_n(w64(r, slot_at(r, p)), __ATOMIC_ACQUIRE);
    int64_t d = seqdiff(sw_seq(pw), p);
    if (d < 0 || (d == 0 && (sw_state(pw) == S_EMPTY || sw_state(pw) == S_WRITING))) return;
    if (d == 0 && sw_state(pw) == S_READY && bc_carries(r, p, pw, 1ull << k) && !bc_drop(r, k, c, p))
      return;
    p = (d > (int64_t)r->slots ? sw_seq(pw) - r->slots : p + 1u) & MASK48; /* more than a lap past: nothing before */
  }
}

/* What a producer does about subscriber k holding the READY frame at q, as k's proxy. */
static inline void bc_act_for(const ring *r, uint32_t k, uint64_t q) {
  if (!bc_subscribed(r, k)) {
    bc_release_as(r, k, q); /* a leftover bit, or damage */
    return;
  }
  uint64_t c = __atomic_load_n(cursor_of(r, k), __ATOMIC_ACQUIRE);
  if (c & CURSOR_DROPPING) c = bc_settle_drop(r, k, c, DROP_WAIT_NS); /* another's drop */
  if ((c & CURSOR_DROPPING) || seqdiff(c & MASK48, q) > 0) return;   /* not done yet; or it took the frame */
  uint32_t policy = __atomic_load_n(w32(r, entry(r, k) + P_SUBSCRIPTION), __ATOMIC_ACQUIRE) - 1u;
  if ((c & CURSOR_EVICTED) || policy == ON_SLOW_DROP_OLDEST) {
    bc_drop_through(r, k, &c, q);
  } else if (policy == ON_SLOW_EVICT) {
    uint64_t evicted = CURSOR_EVICTED | (c & MASK48);
    if (!cas64(cursor_of(r, k), c, evicted)) return;
    bc_drop_through(r, k, &evicted, q + r->slots - 1u);
    ring_notify(r, BELL_DATA);
  }
}

/* Slow subscribers: the slot we need still serves the READY frame at q; each holder's policy. */
static inline void bc_relieve(const ring *r, uint64_t q) {
  uint64_t w = __atomic_load_n(w64(r, slot_at(r, q)), __ATOMIC_ACQUIRE);
  if (sw_seq(w) != (q & MASK48) || sw_state(w) != S_READY) return;
  uint64_t m = __atomic_load_n(pending_of(r, q), __ATOMIC_ACQUIRE);
  if (!m) bc_retire(r, q, w); /* every share released, its last releaser died before moving it on */
  for (; m; m &= m - 1u) {
    uint32_t k = (uint32_t)__builtin_ctzll(m);
    if (k >= r->capacity) {
      bc_release_as(r, k, q); /* damage: nobody there ever subscribes */
    } else if (proxy_take(r, k)) {
      bc_act_for(r, k, q);
      proxy_give(r, k);
    }
  }
}

/* Publish, second half: the reference, then READY (release), then wake consumers. */
static inline int ring_commit(const ring *r, uint64_t pos, const frame_ref *f) {
  ref_write(r, pos, f);
  uint32_t state = S_READY;
  if (r->broadcast) { /* §5.4: to the subscribers attached now; RELEASED when there are none */
    uint64_t subscribers = __atomic_load_n(w64(r, C_SUBSCRIBERS), __ATOMIC_SEQ_CST);
    __atomic_store_n(pending_of(r, pos), subscribers, __ATOMIC_RELAXED);
    if (!subscribers) state = S_RELEASED;
  }
  uint64_t writing = sword(pos, S_WRITING, r->me + 1u);
  if (!__atomic_compare_exchange_n(w64(r, slot_at(r, pos)), &writing, sword(pos, state, r->me + 1u), 0, __ATOMIC_RELEASE,
                                   __ATOMIC_RELAXED))
    return spec_fail("FRAME_STATE: a sweeper took the claim at %" PRIu64 " back", pos);
  count_up(r, P_PUBLISHED);
  if (state == S_READY) ring_notify(r, BELL_DATA);
  return 0;
}

static inline int claim_at(const ring *r, uint64_t pos, uint64_t w, frame_ref *f) {
  if (!cas64(w64(r, slot_at(r, pos)), w, sword(pos, S_CLAIMED, r->me + 1u))) return 0;
  ref_read(r, pos, f);
  return 1;
}

/* §5.3 the consumer's side: claim a handed-back frame between redeliver's position and pos. */
static inline int ring_redelivered(const ring *r, uint64_t head, uint64_t *out, frame_ref *f) {
  uint64_t *word = w64(r, C_REDELIVER);
  uint64_t red = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  uint64_t from = red >> 16;
  if (red == 0 || from == NOTHING_PENDING) return RING_NONE;
  if (seqdiff(head, from) > (int64_t)r->slots || seqdiff(head, from) < 0) from = (head - r->slots) & MASK48;
  for (uint64_t p = from; seqdiff(head, p) > 0; p = (p + 1u) & MASK48) {
    uint64_t w = __atomic_load_n(w64(r, slot_at(r, p)), __ATOMIC_ACQUIRE);
    if (sw_seq(w) == p && sw_state(w) == S_READY && claim_at(r, p, w, f)) {
      *out = p;
      return RING_OK;
    }
  }
  cas64(word, red, NOTHING_PENDING << 16 | ((red + 1u) & 0xffffu)); /* fails if a hand-back came meanwhile */
  return RING_NONE;
}

/* §5.2 claim: the oldest READY frame, else a redelivered one. */
static inline int ring_claim(const ring *r, uint64_t *out, frame_ref *f) {
  if (!entry_held(r)) return RING_DETACHED;
  if (r->broadcast) return bc_claim(r, out, f);
  uint64_t pos = __atomic_load_n(w64(r, C_HEAD), __ATOMIC_RELAXED) & MASK48;
  for (uint32_t probe = 0; probe < 2u * r->slots + 2u; probe++) {
    uint64_t w = __atomic_load_n(w64(r, slot_at(r, pos)), __ATOMIC_ACQUIRE);
    int64_t d = seqdiff(sw_seq(w), pos);
    uint32_t st = sw_state(w);
    if (d == 0 && st == S_READY) {
      if (!claim_at(r, pos, w, f)) continue;
      advance_hint(r, C_HEAD, pos);
      *out = pos;
      return RING_OK;
    }
    if (d < -(int64_t)r->slots) pos = sw_seq(w);
    else if (d < 0 || (d == 0 && (st == S_EMPTY || st == S_WRITING))) return ring_redelivered(r, pos, out, f);
    else if (d == 0) pos = (pos + 1u) & MASK48;
    else pos = reload_hint(r, C_HEAD, pos);
  }
  return RING_NONE;
}

static inline int ring_confirm(const ring *r, uint64_t pos) {
  if (r->broadcast) { /* §5.4: the cursor CAS was the claim; nothing to confirm */
    count_up(r, P_LEASED);
    return 0;
  }
  if (!cas64(w64(r, slot_at(r, pos)), sword(pos, S_CLAIMED, r->me + 1u), sword(pos, S_LEASED, r->me + 1u)))
    return spec_fail("FRAME_STATE: claim at %" PRIu64 " was taken back", pos);
  count_up(r, P_LEASED);
  return 0;
}

/* §5.2 release by `owner` (index): RELEASED for a live producer, else straight to EMPTY. */
static inline int release_as(const ring *r, uint32_t owner, uint64_t pos, const frame_ref *f) {
  if (!cas64(w64(r, slot_at(r, pos)), sword(pos, S_LEASED, owner + 1u), released_word(r, pos, f))) return -1;
  ring_notify(r, BELL_SPACE);
  return 0;
}

static inline int ring_release(const ring *r, uint64_t pos, const frame_ref *f) {
  if (r->broadcast ? bc_release_as(r, r->me, pos) != 0 : release_as(r, r->me, pos, f) != 0) return spec_fail("FRAME_STATE: lease at %" PRIu64 " lost", pos);
  count_up(r, P_RELEASED);
  return 0;
}

/* §5.3 hand-back by `owner`: CLAIMED -> READY, then mark redeliver and wake consumers. */
static inline int handback_as(const ring *r, uint32_t owner, uint64_t pos, uint32_t producer) {
  if (!cas64(w64(r, slot_at(r, pos)), sword(pos, S_CLAIMED, owner + 1u), sword(pos, S_READY, producer + 1u)))
    return -1;
  uint64_t *word = w64(r, C_REDELIVER);
  for (;;) {
    uint64_t red = __atomic_load_n(word, __ATOMIC_ACQUIRE), at = red >> 16;
    uint64_t lower = red == 0 || at == NOTHING_PENDING || seqdiff(pos, at) < 0 ? pos : at;
    if (cas64(word, red, lower << 16 | ((red + 1u) & 0xffffu))) break;
  }
  ring_notify(r, BELL_DATA);
  return 0;
}

/* §5.2 reap by the producer: RELEASED -> EMPTY for the next lap. Returns 1 if reaped. */
static inline int ring_reap(const ring *r, uint64_t pos) {
  if (!cas64(w64(r, slot_at(r, pos)), sword(pos, S_RELEASED, r->me + 1u), sword(pos + r->slots, S_EMPTY, 0)))
    return 0;
  ring_notify(r, BELL_SPACE);
  return 1;
}

/* ---- §7 sweep (steps 1, 3 and 4; step 2, damage, is left to other sweepers) ---- */
static inline void arena_shm_name(const ring *r, uint32_t index, uint32_t gen, uint32_t arena, char out[96]) {
  snprintf(out, 96, "/gpuring.%s.p%ug%u.a%u", r->name, index, gen, arena);
}

/* §4 free: win the entry (from `w`, the DEAD or orphaned FREEING word step 1
 * saw, -> FREEING naming us), unlink its arenas, leave the subscribers, FREE. */
static inline int free_entry(const ring *r, uint32_t i, uint64_t w) {
  uint64_t e = entry(r, i), mine = pword(pw_gen(w), (uint32_t)getpid(), P_FREEING);
  if (!cas64(w64(r, e + P_STATE), w, mine)) return 0;
  uint32_t arenas = __atomic_load_n(w32(r, e + P_ARENAS), __ATOMIC_ACQUIRE);
  for (uint32_t a = 0; a < arenas && a < 4096u; a++) {
    char name[96];
    arena_shm_name(r, i, pw_gen(w), a, name);
    shm_unlink(name);
  }
  bells_clear(r, i, BELL_DATA | BELL_SPACE);
  if (r->broadcast && i < 64u) __atomic_fetch_and(w64(r, C_SUBSCRIBERS), ~(1ull << i), __ATOMIC_SEQ_CST);
  __atomic_store_n(w64(r, e + P_KEY), 0, __ATOMIC_RELAXED);
  __atomic_store_n(w32(r, e + P_PID), 0, __ATOMIC_RELEASE);
  return cas64(w64(r, e + P_STATE), mine, pword(pw_gen(w), 0, P_FREE));
}

static inline int entry_dead(const ring *r, uint32_t i) {
  uint64_t w = __atomic_load_n(w64(r, entry(r, i) + P_STATE), __ATOMIC_ACQUIRE);
  return pw_state(w) == P_DEAD || (pw_state(w) == P_FREEING && !pid_running(pw_pid(w)));
}

/* Dead for a repair: entry_dead, or `also`, the entry an attach repairs (§4). */
static inline int owner_dead(const ring *r, uint32_t i, uint32_t also) { return i == also || entry_dead(r, i); }

/* Repairs what a dead owner (or entry `also`) left in slot i (step 3); returns
 * the dead producer it still refers to, or -1. */
static inline int64_t sweep_slot(const ring *r, uint64_t i, uint32_t also) {
  uint64_t *word = w64(r, r->soff + 128u * i);
  uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE), pos = sw_seq(w);
  uint32_t st = sw_state(w), owner = sw_owner(w);
  int dead = owner >= 1u && owner <= r->capacity && owner_dead(r, owner - 1u, also);
  frame_ref f;
  ref_read(r, pos, &f);
  if (r->broadcast && st == S_READY) { /* §7 step 3, §5.4: shares of entries that are not live subscribers */
    uint64_t m = __atomic_load_n(pending_of(r, pos), __ATOMIC_ACQUIRE);
    if (!m) bc_retire(r, pos, w); /* its last releaser died before moving the slot on */
    for (; m; m &= m - 1u) {
      uint32_t k = (uint32_t)__builtin_ctzll(m);
      if (k >= r->capacity) {
        bc_release_as(r, k, pos); /* damage: nobody there ever subscribes */
      } else if (proxy_take(r, k)) { /* §5.4 Proxies: judged and released holding k's proxy word */
        if (owner_dead(r, k, also) || !bc_subscribed(r, k)) bc_release_as(r, k, pos);
        proxy_give(r, k);
      }
    }
  }
  if (dead && (st == S_WRITING || st == S_RELEASED)) {
    if (cas64(word, w, sword(pos + r->slots, S_EMPTY, 0))) ring_notify(r, BELL_SPACE);
  } else if (dead && st == S_CLAIMED && handback_as(r, owner - 1u, pos, f.producer) == 0) {
    __atomic_fetch_add(w64(r, C_REDELIVERED), 1u, __ATOMIC_RELAXED);
  } else if (dead && st == S_LEASED) {
    release_as(r, owner - 1u, pos, &f);
  }
  /* Who the slot refers to now: its owner while READY or RELEASED, the
   * reference's producer while CLAIMED or LEASED (§7 step 4). */
  w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  st = sw_state(w);
  uint32_t producer = st == S_READY || st == S_RELEASED ? sw_owner(w) : 0;
  if (st == S_CLAIMED || st == S_LEASED) {
    ref_read(r, sw_seq(w), &f);
    producer = f.producer + 1u;
  }
  return producer >= 1u && producer <= r->capacity && entry_dead(r, producer - 1u) ? (int64_t)producer - 1 : -1;
}

/* §7 step 3: a RELEASED frame whose producer no longer holds the generation in
 * its reference lost its entry, and nobody will reap it; moved on whether or
 * not any entry is DEAD (we check every slot, not a window). */
static inline void sweep_orphan(const ring *r, uint64_t i) {
  uint64_t *word = w64(r, r->soff + 128u * i);
  uint64_t w = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  uint32_t owner = sw_owner(w);
  if (sw_state(w) != S_RELEASED || owner < 1u || owner > r->capacity) return;
  frame_ref f;
  ref_read(r, sw_seq(w), &f);
  if (f.producer_gen == pw_gen(__atomic_load_n(w64(r, entry(r, owner - 1u) + P_STATE), __ATOMIC_ACQUIRE))) return;
  if (cas64(word, w, sword(sw_seq(w) + r->slots, S_EMPTY, 0))) ring_notify(r, BELL_SPACE);
}

static inline void ring_sweep(const ring *r) {
  for (uint64_t i = 0; i < r->slots; i++) sweep_orphan(r, i);
  int any = 0;
  uint64_t *marked = (uint64_t *)calloc(r->capacity, sizeof *marked); /* step 1's words of entries to free */
  for (uint32_t i = 0; i < r->capacity; i++) { /* step 1 */
    uint64_t e = entry(r, i), w = __atomic_load_n(w64(r, e + P_STATE), __ATOMIC_ACQUIRE);
    uint32_t pid = __atomic_load_n(w32(r, e + P_PID), __ATOMIC_ACQUIRE);
    if ((pw_state(w) == P_ACTIVE && (pw_pid(w) || !process_alive(pid, *w64(r, e + P_START)))) || /* pid bits: damage */
        (pw_state(w) == P_ATTACHING && !pid_running(pw_pid(w))) || pw_state(w) > P_FREEING) /* 5-7: damage */
      cas64(w64(r, e + P_STATE), w, pword(pw_gen(w), 0, P_DEAD));
    if (entry_dead(r, i)) marked[i] = __atomic_load_n(w64(r, e + P_STATE), __ATOMIC_ACQUIRE);
    any |= marked[i] != 0;
  }
  if (!any && !r->broadcast) { /* a broadcast ring's step 3 releases left-over shares with nobody dead too */
    free(marked);
    return;
  }
  if (r->broadcast && any) /* §7 step 1: drops their producers left half done (dead bits leave at free, §4) */
    for (uint32_t i = 0; i < r->capacity && i < 64u; i++) {
      if (!(__atomic_load_n(cursor_of(r, i), __ATOMIC_ACQUIRE) & CURSOR_DROPPING) || !proxy_take(r, i)) continue;
      uint64_t c = __atomic_load_n(cursor_of(r, i), __ATOMIC_ACQUIRE);
      if ((c & CURSOR_DROPPING) && bc_subscribed(r, i)) bc_settle_drop(r, i, c, 0); /* finished once stale */
      proxy_give(r, i);
    }
  uint8_t *referred = (uint8_t *)calloc(r->capacity, 1);
  for (uint64_t i = 0; i < r->slots; i++) { /* step 3 */
    int64_t p = sweep_slot(r, i, UINT32_MAX);
    if (p >= 0) referred[p] = 1;
  }
  for (uint32_t i = 0; i < r->capacity; i++) /* step 4: only the occupant step 3 counted for */
    if (!referred[i] && marked[i]) free_entry(r, i, marked[i]);
  free(referred);
  free(marked);
}

/* §4 attach: the slots (and, broadcast, the bits) still naming entry `index`
 * were left by an occupant that lost it; repair them as a dead owner's. */
static inline void repair_leftovers(const ring *r, uint32_t index) {
  if (r->broadcast && index < 64u) {
    __atomic_fetch_and(w64(r, C_SUBSCRIBERS), ~(1ull << index), __ATOMIC_SEQ_CST);
    for (uint64_t i = 0; i < r->slots; i++) { /* our bit's shares, released by us: not through the proxy word */
      uint64_t w = __atomic_load_n(w64(r, r->soff + 128u * i), __ATOMIC_ACQUIRE);
      if (sw_state(w) == S_READY && bc_carries(r, sw_seq(w), w, 1ull << index)) bc_release_as(r, index, sw_seq(w));
    }
  }
  for (uint64_t i = 0; i < r->slots; i++) sweep_slot(r, i, index);
}

/* §4 detach: clear our doorbell bits, ACTIVE -> DEAD, then sweep (which frees
 * the entry once nothing refers to it); an entry lost meanwhile is not ours to
 * touch. Returns whether we still held it. */
static inline int ring_detach(ring *r) {
  int held = entry_held(r);
  if (held) {
    bells_clear(r, r->me, BELL_DATA | BELL_SPACE);
    cas64(w64(r, entry(r, r->me) + P_STATE), pword(r->gen, 0, P_ACTIVE), pword(r->gen, 0, P_DEAD));
    ring_sweep(r);
  }
  munmap(r->base, r->size);
  close(r->fd);
  return held;
}

#endif
