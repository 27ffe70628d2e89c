/* gpuring/arena.h: host-memory arenas, the shared-memory objects that hold
 * frame bodies and host column buffers.
 *
 * A producer owns its arenas and allocates from them with a process-local
 * first-fit allocator (free ranges kept sorted and coalesced). Consumers open
 * an arena by the name a buffer descriptor carries, after checking that the
 * name belongs to this segment and the file is an arena of the stated size.
 * Included by gpuring.h; not a standalone header. */

#define GPR_ARENA_ALIGN 64u
#define GPR_ARENA_DEFAULT_SIZE (64ull << 20)
/* With no arena size chosen, a producer's first arena is this small and each next one
 * doubles, up to GPR_ARENA_DEFAULT_SIZE: a producer whose frames are small (device
 * columns, a few host rows) does not reserve 64 MiB of /dev/shm before its first frame,
 * which cost ~13 ms of page zeroing (posix_fallocate) on that frame. */
#define GPR_ARENA_FIRST_SIZE (1ull << 20)

typedef struct gpr_range {
  uint64_t offset;
  uint64_t length;
} gpr_range;

typedef struct gpr_arena {
  int fd;
  uint8_t *base;
  uint64_t size;
  uint32_t number;
  gpr_range *free_ranges;
  uint32_t free_count;
  uint32_t free_capacity;
} gpr_arena;

typedef struct gpr_arena_pool {
  gpr_segment *seg;
  uint32_t index;                 /* owner participant */
  uint32_t gen;
  uint32_t mode;                  /* file mode of new arenas */
  uint64_t default_size;         /* size of a regular arena (the last, when growing) */
  uint32_t growing;               /* 1: regular arenas double from GPR_ARENA_FIRST_SIZE */
  gpr_arena *arenas;
  uint32_t count;
  uint32_t capacity;
} gpr_arena_pool;

typedef struct gpr_allocation {
  uint32_t arena;
  uint64_t offset;
  uint64_t length;
  uint8_t *ptr;
} gpr_allocation;

GPR_INLINE uint64_t gpr_align_up(uint64_t v, uint64_t a) { return (v + a - 1u) & ~(a - 1u); }

GPR_INLINE void gpr_arena_pool_init(gpr_arena_pool *pool, gpr_segment *seg, uint32_t index,
                                    uint32_t gen, uint64_t default_size) {
  struct stat st;
  memset(pool, 0, sizeof *pool);
  pool->seg = seg;
  pool->index = index;
  pool->gen = gen;
  pool->mode = fstat(seg->fd, &st) == 0 ? (uint32_t)(st.st_mode & 0777u) : 0600u;
  pool->default_size = default_size ? gpr_align_up(default_size, 4096u) : GPR_ARENA_DEFAULT_SIZE;
  pool->growing = default_size == 0;
}

/* The size of the next regular arena (one that a larger allocation does not size). */
GPR_INLINE uint64_t gpr_arena_regular_size(const gpr_arena_pool *pool) {
  uint64_t size = pool->growing ? GPR_ARENA_FIRST_SIZE : pool->default_size;
  for (uint32_t i = 0; i < pool->count && size < pool->default_size; i++) size *= 2u;
  return size < pool->default_size ? size : pool->default_size;
}

GPR_INLINE int gpr_ranges_reserve(gpr_range **ranges, uint32_t *cap, uint32_t need) {
  if (need <= *cap) return 0;
  uint32_t n = *cap ? *cap * 2u : 16u;
  while (n < need) n *= 2u;
  gpr_range *r = (gpr_range *)realloc(*ranges, n * sizeof(gpr_range));
  if (!r) return -1;
  *ranges = r;
  *cap = n;
  return 0;
}

/* Room for one more arena in pool->arenas. */
GPR_INLINE int gpr_arena_pool_grow(gpr_arena_pool *pool, gpr_error *err) {
  if (pool->count >= GPR_MAX_ARENAS)
    return gpr_fail(err, GPR_E_OUT_OF_MEMORY, 0, "this producer already has %u arenas",
                    GPR_MAX_ARENAS);
  if (pool->count < pool->capacity) return 0;
  uint32_t n = pool->capacity ? pool->capacity * 2u : 4u;
  gpr_arena *a = (gpr_arena *)realloc(pool->arenas, n * sizeof(gpr_arena));
  if (!a) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  pool->arenas = a;
  pool->capacity = n;
  return 0;
}

/* Creates the file of the next arena number and returns its descriptor, the
 * number in *number. The participant's arena_count is raised before the file
 * exists, so a sweeper that finds this producer dead always knows every arena
 * name it may have left behind. A name another user created first (/dev/shm is
 * sticky, so it can be neither removed nor safely used) is skipped: its number
 * stays an empty placeholder that is never allocated from, and the next number
 * is tried, so pre-creating names cannot stop a producer (SPEC.md §10a). */
GPR_INLINE int gpr_arena_file_create(gpr_arena_pool *pool, uint32_t *number, char *name,
                                     gpr_error *err) {
  /* arena_count lives in the entry: one taken from us is not ours to raise. */
  if (!gpr_participant_held(pool->seg, pool->index, pool->gen)) return gpr_fail_detached(pool->seg, err);
  for (;;) {
    int rc = gpr_arena_pool_grow(pool, err);
    if (rc != 0) return rc;
    *number = pool->count;
    __atomic_store_n(&pool->seg->participants[pool->index].arena_count, *number + 1u,
                     __ATOMIC_RELEASE);
    gpr_arena_shm_name(pool->seg->name, pool->index, pool->gen, *number, name);
    shm_unlink(name); /* a stale arena of a crashed earlier occupant of this entry/gen */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)pool->mode);
    if (fd >= 0) return fd;
    if (errno != EEXIST) return gpr_fail(err, GPR_E_SYSTEM, errno, "shm_open(%s): %s", name, strerror(errno));
    gpr_arena *skipped = &pool->arenas[pool->count++];
    memset(skipped, 0, sizeof *skipped);
    skipped->fd = -1;
    skipped->number = *number;
  }
}

/* The header arena `a` of this pool must carry (SPEC.md §9); the one in shared
 * memory is rewritten when it differs, so that a stray write there does not
 * make every consumer that maps the arena later refuse it (ARENA_INVALID)
 * for as long as the producer lives. Returns whether it was rewritten. */
GPR_INLINE int gpr_arena_header_restore(const gpr_arena_pool *pool, gpr_arena *a) {
  gpr_arena_header want, *h = (gpr_arena_header *)a->base;
  memset(&want, 0, sizeof want);
  want.magic = GPR_ARENA_MAGIC;
  want.size = a->size;
  want.owner_pid = h->owner_pid; /* informational, read by no one: rewritten only with the rest */
  want.owner_index = pool->index;
  want.owner_gen = pool->gen;
  want.arena = a->number;
  if (memcmp(h, &want, sizeof want) == 0) return 0;
  want.owner_pid = (uint32_t)getpid();
  memcpy(h, &want, sizeof want);
  return 1;
}

/* gpr_arena_header_restore for every arena of the pool; run with a producer's
 * full reaps (a few hundred publishes apart), off the per-frame path. */
GPR_INLINE void gpr_arena_pool_restore_headers(gpr_arena_pool *pool) {
  for (uint32_t i = 0; i < pool->count; i++)
    if (pool->arenas[i].base) gpr_arena_header_restore(pool, &pool->arenas[i]);
}

/* Creates a new arena with room for min_bytes: of the regular size, or of the
 * allocation's size when larger; or, when /dev/shm cannot hold the regular size
 * but can hold the allocation, of the allocation's size (pages), so that a
 * producer near the end of /dev/shm still gets what it asks for. */
GPR_INLINE int gpr_arena_create(gpr_arena_pool *pool, uint64_t min_bytes, gpr_error *err) {
  uint64_t want = min_bytes + sizeof(gpr_arena_header);
  uint64_t regular = gpr_arena_regular_size(pool);
  uint64_t size = want <= regular ? regular : gpr_align_up(want, 2u << 20);
  int rc = gpr_check_shm_space(size, err);
  if (rc != 0) {
    uint64_t least = gpr_align_up(want, 4096u);
    if (least >= size) return rc;
    rc = gpr_check_shm_space(least, err);
    if (rc != 0) return rc;
    size = least;
  }
  uint32_t number = 0;
  char name[GPR_SHM_NAME_MAX];
  int fd = gpr_arena_file_create(pool, &number, name, err);
  if (fd < 0) return fd;
  (void)fchmod(fd, (mode_t)pool->mode);
  rc = gpr_size_shm(fd, size, err);
  if (rc != 0) {
    close(fd);
    shm_unlink(name);
    return rc;
  }
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    shm_unlink(name);
    return gpr_fail(err, GPR_E_SYSTEM, e, "mmap of arena failed: %s", strerror(e));
  }
  gpr_arena *a = &pool->arenas[number];
  memset(a, 0, sizeof *a);
  a->fd = fd;
  a->base = (uint8_t *)base;
  a->size = size;
  a->number = number;
  gpr_arena_header_restore(pool, a);
  if (gpr_ranges_reserve(&a->free_ranges, &a->free_capacity, 1) != 0)
    return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  a->free_ranges[0].offset = sizeof(gpr_arena_header);
  a->free_ranges[0].length = size - sizeof(gpr_arena_header);
  a->free_count = 1;
  pool->count++;
  return 0;
}

GPR_INLINE int gpr_arena_take(gpr_arena *a, uint64_t bytes, gpr_allocation *out) {
  for (uint32_t i = 0; i < a->free_count; i++) {
    gpr_range *r = &a->free_ranges[i];
    if (r->length < bytes) continue;
    out->arena = a->number;
    out->offset = r->offset;
    out->length = bytes;
    out->ptr = a->base + r->offset;
    r->offset += bytes;
    r->length -= bytes;
    if (r->length == 0) {
      memmove(r, r + 1, (a->free_count - i - 1u) * sizeof(gpr_range));
      a->free_count--;
    }
    return 1;
  }
  return 0;
}

/* Allocates `bytes` (rounded up to 64) in one of the pool's arenas, creating a
 * new arena when none has room. */
GPR_INLINE int gpr_arena_alloc(gpr_arena_pool *pool, uint64_t bytes, gpr_allocation *out,
                               gpr_error *err) {
  uint64_t want = gpr_align_up(bytes ? bytes : 1u, GPR_ARENA_ALIGN);
  for (uint32_t i = 0; i < pool->count; i++)
    if (gpr_arena_take(&pool->arenas[i], want, out)) return 0;
  int rc = gpr_arena_create(pool, want, err);
  if (rc != 0) return rc;
  gpr_arena_take(&pool->arenas[pool->count - 1u], want, out);
  return 0;
}

/* Returns an allocation to its arena, merging it with free neighbours. */
GPR_INLINE void gpr_arena_free(gpr_arena_pool *pool, const gpr_allocation *alloc) {
  if (alloc->arena >= pool->count) return;
  gpr_arena *a = &pool->arenas[alloc->arena];
  uint32_t i = 0;
  while (i < a->free_count && a->free_ranges[i].offset < alloc->offset) i++;
  int merge_prev = i > 0 && a->free_ranges[i - 1].offset + a->free_ranges[i - 1].length ==
                                alloc->offset;
  int merge_next = i < a->free_count && alloc->offset + alloc->length ==
                                            a->free_ranges[i].offset;
  if (merge_prev && merge_next) {
    a->free_ranges[i - 1].length += alloc->length + a->free_ranges[i].length;
    memmove(&a->free_ranges[i], &a->free_ranges[i + 1],
            (a->free_count - i - 1u) * sizeof(gpr_range));
    a->free_count--;
  } else if (merge_prev) {
    a->free_ranges[i - 1].length += alloc->length;
  } else if (merge_next) {
    a->free_ranges[i].offset = alloc->offset;
    a->free_ranges[i].length += alloc->length;
  } else {
    if (gpr_ranges_reserve(&a->free_ranges, &a->free_capacity, a->free_count + 1u) != 0)
      return; /* out of memory: the range is leaked, never handed out twice */
    memmove(&a->free_ranges[i + 1], &a->free_ranges[i], (a->free_count - i) * sizeof(gpr_range));
    a->free_ranges[i].offset = alloc->offset;
    a->free_ranges[i].length = alloc->length;
    a->free_count++;
  }
}

GPR_INLINE uint64_t gpr_arena_pool_free_bytes(const gpr_arena_pool *pool) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < pool->count; i++)
    for (uint32_t j = 0; j < pool->arenas[i].free_count; j++)
      total += pool->arenas[i].free_ranges[j].length;
  return total;
}

/* Unmaps the pool's arenas. Their names stay until the participant's entry is
 * freed by a sweep (after detach), because consumers may still need to open them. */
GPR_INLINE void gpr_arena_pool_destroy(gpr_arena_pool *pool) {
  for (uint32_t i = 0; i < pool->count; i++) {
    if (!pool->arenas[i].base) continue; /* a skipped number */
    munmap(pool->arenas[i].base, pool->arenas[i].size);
    close(pool->arenas[i].fd);
    free(pool->arenas[i].free_ranges);
  }
  free(pool->arenas);
  memset(pool, 0, sizeof *pool);
}

/* Unlinks the pool's arena files. Only for a producer whose entry was taken
 * from it (gpr_participant_detach failed with DETACHED): otherwise the sweeper
 * that frees the entry does it once no slot refers to them, and if a write
 * into the segment took the entry, nobody else may ever know these names. They
 * are this producer's alone: no attach hands out its generation at its index
 * again (SPEC.md §4). */
GPR_INLINE void gpr_arena_pool_unlink(const gpr_arena_pool *pool) {
  char name[GPR_SHM_NAME_MAX];
  for (uint32_t i = 0; i < pool->count; i++) {
    if (!pool->arenas[i].base) continue; /* a skipped number: another user's file */
    gpr_arena_shm_name(pool->seg->name, pool->index, pool->gen, pool->arenas[i].number, name);
    shm_unlink(name);
  }
}

/* ---- consumer side ------------------------------------------------------- */

typedef struct gpr_arena_view {
  uint8_t *base;
  uint64_t size;
} gpr_arena_view;

/* Parses "/gpuring.SEG.pIgG.aN" for this segment; returns 0 if it is one. */
GPR_INLINE int gpr_arena_name_parse(const gpr_segment *seg, const char *name, uint32_t *index,
                                    uint32_t *gen, uint32_t *arena) {
  char prefix[GPR_SHM_NAME_MAX];
  int n = snprintf(prefix, sizeof prefix, "/gpuring.%s.p", seg->name);
  if (n <= 0 || strncmp(name, prefix, (size_t)n) != 0) return -1;
  unsigned i, g, a;
  int used = 0;
  if (sscanf(name + n, "%10ug%10u.a%10u%n", &i, &g, &a, &used) != 3 || name[n + used] != 0)
    return -1;
  char canonical[GPR_SHM_NAME_MAX];
  gpr_arena_shm_name(seg->name, i, g, a, canonical);
  if (strcmp(canonical, name) != 0) return -1; /* no leading zeros, signs or spaces */
  *index = i;
  *gen = g;
  *arena = a;
  return 0;
}

/* Opens an arena named in a frame, for reading: the name must be one of this
 * segment's arenas and the file must carry the arena header for its own size.
 * On success *fd is the open file (the caller closes it) and *size the arena's
 * size; a caller maps what it needs of it (gpr_arena_open maps it whole). */
GPR_INLINE int gpr_arena_open_file(const gpr_segment *seg, const char *name, int *fd,
                                   uint64_t *size, gpr_error *err) {
  uint32_t index, gen, arena;
  if (gpr_arena_name_parse(seg, name, &index, &gen, &arena) != 0 ||
      index >= seg->participant_capacity || arena >= GPR_MAX_ARENAS)
    return gpr_fail(err, GPR_E_ARENA_INVALID, 0, "'%.64s' is not an arena of segment '%s'", name,
                    seg->name);
  int f = shm_open(name, O_RDWR | O_CLOEXEC, 0);
  if (f < 0)
    return gpr_fail(err, GPR_E_ARENA_INVALID, errno, "cannot open arena %s: %s", name,
                    strerror(errno));
  struct stat st;
  gpr_arena_header h;
  memset(&h, 0, sizeof h);
  if (fstat(f, &st) != 0 || pread(f, &h, sizeof h, 0) != (ssize_t)sizeof h ||
      h.magic != GPR_ARENA_MAGIC || h.size != (uint64_t)st.st_size || h.owner_index != index ||
      h.owner_gen != gen || h.arena != arena) {
    close(f);
    return gpr_fail(err, GPR_E_ARENA_INVALID, 0, "arena %s is truncated or foreign", name);
  }
  *fd = f;
  *size = h.size;
  return 0;
}

/* Maps an arena named in a frame whole (see gpr_arena_open_file). */
GPR_INLINE int gpr_arena_open(const gpr_segment *seg, const char *name, gpr_arena_view *out,
                              gpr_error *err) {
  int fd = -1;
  uint64_t size = 0;
  if (gpr_arena_open_file(seg, name, &fd, &size, err) != 0) return -1;
  void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED)
    return gpr_fail(err, GPR_E_SYSTEM, errno, "mmap of arena %s failed: %s", name,
                    strerror(errno));
  out->base = (uint8_t *)base;
  out->size = size;
  return 0;
}

GPR_INLINE void gpr_arena_view_close(gpr_arena_view *v) {
  if (v->base) munmap(v->base, v->size);
  v->base = NULL;
}
