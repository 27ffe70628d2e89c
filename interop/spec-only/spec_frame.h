/* spec_frame.h: arenas (§2, §4, §9) and frame bodies (§8, §12) as SPEC.md
 * states them, for spec_producer.c and spec_consumer.c. Written from the
 * document alone, like spec_ring.h. */
#ifndef SPEC_FRAME_H
#define SPEC_FRAME_H
#include "spec_ring.h"

/* §12 body header, node and buffer descriptor fields */
enum { B_MAGIC = 0, B_VERSION = 4, B_LENGTH = 8, B_NODES = 12, B_BUFFERS = 16, B_ROOTS = 20, B_DICTS = 24,
       B_STRINGS = 28, B_ROWS = 32, B_MD_OFFSET = 40, B_MD_LENGTH = 44, B_SYNC_KIND = 48 };
enum { N_NAME = 0, N_NAME_LEN = 4, N_FORMAT = 8, N_FORMAT_LEN = 12, N_MD = 16, N_MD_LEN = 20, N_CHILDREN = 24,
       N_FLAGS = 28, N_DICTIONARY = 32, N_BUFFERS = 36, N_LENGTH = 40, N_NULLS = 48, N_OFFSET = 56 };
enum { D_KIND = 0, D_ORDINAL = 4, D_OFFSET = 24, D_LENGTH = 32, D_HANDLE = 64 };
enum { MEM_ABSENT = 0, MEM_HOST = 1, MEM_CUDA_IPC = 2 };
#define BODY_HEADER 128u
#define NODE_SIZE 64u
#define BUFFER_SIZE 128u
#define ARENA_HEADER 64u
#define MAX_COUNT ((1ull << 53) - 1u)

static inline uint64_t align_up(uint64_t n, uint64_t a) { return (n + a - 1u) & ~(a - 1u); }

/* §8: header, nodes, buffers, then the string table padded to a multiple of 8. */
static inline uint64_t body_size(uint64_t nodes, uint64_t buffers, uint64_t strings) {
  return BODY_HEADER + NODE_SIZE * nodes + BUFFER_SIZE * buffers + align_up(strings, 8u);
}

/* An arena of ours, mapped for writing. */
typedef struct arena_out {
  char shm[96];
  uint8_t *base;
  uint64_t size;
  uint32_t number;
} arena_out;

/* §4, §9: raise arena_count before creating the file; unlink a stale file of the
 * name; skip a number whose file cannot be removed; mode of the segment. */
static inline int arena_create(const ring *r, uint64_t size, arena_out *a) {
  struct stat seg;
  if (!entry_held(r)) return spec_fail("DETACHED: our entry in the ring was taken (§4)");
  if (fstat(r->fd, &seg) != 0) return spec_fail("fstat: %s", strerror(errno));
  uint32_t *count = w32(r, entry(r, r->me) + P_ARENAS);
  for (uint32_t n = __atomic_load_n(count, __ATOMIC_ACQUIRE); n < 4096u; n++) {
    __atomic_store_n(count, n + 1u, __ATOMIC_RELEASE);
    arena_shm_name(r, r->me, r->gen, n, a->shm);
    shm_unlink(a->shm);
    int fd = shm_open(a->shm, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, seg.st_mode & 0777);
    if (fd < 0 && errno == EEXIST) continue; /* another user's file in sticky /dev/shm */
    if (fd < 0) return spec_fail("shm_open(%s): %s", a->shm, strerror(errno));
    if (fchmod(fd, seg.st_mode & 0777) != 0 || shm_reserve(fd, size) != 0) {
      close(fd);
      return -1;
    }
    a->base = (uint8_t *)mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (a->base == MAP_FAILED) return spec_fail("mmap: %s", strerror(errno));
    uint64_t magic = ARENA_MAGIC;
    uint32_t owner[4] = {(uint32_t)getpid(), r->me, r->gen, n};
    memcpy(a->base, &magic, 8);
    memcpy(a->base + 8, &size, 8);
    memcpy(a->base + 16, owner, sizeof owner);
    a->size = size;
    a->number = n;
    return 0;
  }
  return spec_fail("ARENA: all 4096 arena names are taken");
}

/* A peer's arena, mapped read-only once per process. */
typedef struct arena_in {
  char shm[96];
  const uint8_t *base;
  uint64_t size;
} arena_in;

/* §1.1, §9: SHM must be "/gpuring.NAME.pIgG.aN" of this segment, in canonical
 * decimal; the file's header must match the name and the file's size. */
static inline const arena_in *arena_map(const ring *r, const char *shm) {
  static arena_in cache[256];
  static uint32_t cached;
  for (uint32_t k = 0; k < cached; k++)
    if (strcmp(cache[k].shm, shm) == 0) return &cache[k];
  unsigned index, gen, number;
  char again[96], tail;
  arena_in a;
  memset(&a, 0, sizeof a);
  if (strlen(shm) >= sizeof a.shm) return NULL;
  int prefix = snprintf(again, sizeof again, "/gpuring.%s.p", r->name);
  if (strncmp(shm, again, (size_t)prefix) != 0 || sscanf(shm + prefix, "%ug%u.a%u%c", &index, &gen, &number, &tail) != 3)
    return NULL;
  arena_shm_name(r, index, gen, number, again);
  if (strcmp(again, shm) != 0 || cached == 256) return NULL;
  int fd = shm_open(shm, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return NULL;
  struct stat st;
  uint8_t h[ARENA_HEADER];
  uint64_t magic, size;
  uint32_t owner[4];
  int ok = fstat(fd, &st) == 0 && pread(fd, h, sizeof h, 0) == (ssize_t)sizeof h;
  memcpy(&magic, h, 8);
  memcpy(&size, h + 8, 8);
  memcpy(owner, h + 16, sizeof owner);
  ok = ok && magic == ARENA_MAGIC && size == (uint64_t)st.st_size && size >= ARENA_HEADER &&
       owner[1] == index && owner[2] == gen && owner[3] == number;
  if (ok) a.base = (const uint8_t *)mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (!ok || a.base == MAP_FAILED) return NULL;
  memcpy(a.shm, shm, strlen(shm) + 1u);
  a.size = size;
  cache[cached] = a;
  return &cache[cached++];
}

/* §8.2 (mapping): LENGTH bytes at OFFSET from the arena file's start, inside it and past its header. */
static inline const uint8_t *arena_bytes(const arena_in *a, uint64_t offset, uint64_t length) {
  if (!a || offset < ARENA_HEADER || offset > a->size || length > a->size - offset) return NULL;
  return a->base + offset;
}

#endif
