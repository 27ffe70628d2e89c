/* gpuring/segment.h: creating, opening and validating a segment, and the
 * participant table. Included by gpuring.h; not a standalone header. */


typedef struct gpr_segment_options {
  uint32_t slot_count;            /* power of two, 2 .. GPR_MAX_SLOTS; 0 = 1024 */
  uint32_t participant_capacity;  /* 1 .. GPR_MAX_PARTICIPANTS; 0 = 64 */
  uint32_t mode;                  /* file mode; 0 = 0600 */
  uint32_t open_timeout_ms;       /* open(): how long to wait for a creator to finish; 0 = 1000 */
  uint32_t flags;                 /* open(): GPR_OPEN_ANY_OWNER */
  uint32_t delivery;              /* create(): GPR_DELIVERY_EACH (0, a work queue) or GPR_DELIVERY_ALL */
} gpr_segment_options;

/* Who gets a frame: one consumer (a work queue), or every subscriber (broadcast). */
enum gpr_delivery { GPR_DELIVERY_EACH = 0u, GPR_DELIVERY_ALL = 1u };

/* Join a segment another user owns. Without it an opener refuses one (SEGMENT_OWNER):
 * whoever creates the name first controls the mode of the segment and so of the
 * joiners' arenas, and could read or rewrite every frame (SPEC.md §2). */
#define GPR_OPEN_ANY_OWNER 1u

/* A doorbell pipe this mapping rings (gpuring/doorbell.h), for one entry: the
 * descriptor it opened for the pipe the entry named by pid, descriptor number
 * and inode, or -1 where that pipe could not be opened or its reader is gone
 * (ring the socket until the entry names another). */
typedef struct gpr_bell_pipe {
  uint64_t ino;
  uint32_t pid;
  uint32_t number;
  int fd;
} gpr_bell_pipe;

/* A process's view of a segment. Geometry is read once at open, validated, and
 * kept here: later writes to the shared header by a faulty peer cannot move it. */
typedef struct gpr_segment {
  int fd;
  int bell_fd;                    /* socket for ringing doorbells, -1 until first use */
  uint32_t damage_cursor;         /* where this process's next sweep looks for damaged slot words */
  uint8_t *base;
  uint64_t size;
  uint32_t slot_count;
  uint32_t mask;
  uint32_t participant_capacity;
  int broadcast;                  /* header flag GPR_RING_BROADCAST (every subscriber sees every frame) */
  gpr_segment_header *header;
  gpr_control *control;
  gpr_participant *participants;
  gpr_slot *slots;
  char name[GPR_NAME_MAX + 1];
  /* The attached_unix_ns this mapping's attach wrote into entry attached_index
   * (0: none): while the entry still holds it, nobody attached there since
   * (gpr_participant_give_up). */
  uint64_t attached_stamp;
  uint32_t attached_index;
  /* A broadcast subscriber's takes, by slot: the position + 1 of the frame it
   * took there and has not released, 0 for none; NULL until it subscribes.
   * Guarded by held_lock, so that a take (cursor CAS) or a release and the
   * scan for stray shares never interleave (gpr_bc_release_strays). */
  uint64_t *held;
  uint32_t held_lock;
  /* When this mapping's waits sweep next (gpr_wait_sweeping), monotonic ns; 0
   * until it first waits. Kept across waits, so that short timeouts, over and
   * over, still sweep. */
  uint64_t sweep_due_ns;
  /* Broadcast rings: a DROPPING cursor of subscriber k this mapping found, and
   * when it first did (monotonic ns). A mark left that long is one whose dropper
   * died before clearing it (gpr_bc_settle_drop). */
  uint64_t drop_mark[64];
  uint64_t drop_mark_ns[64];
  /* This process as a broadcast entry's proxy word names it (gpr_bc_proxy_take);
   * 0 until first needed. */
  uint64_t proxy_self;
  /* Doorbell pipes, by entry (participant_capacity of them), NULL until this
   * mapping first rings one; bell_pipes_ok: 0 not yet asked, 1 it may ring
   * pipes, -1 it may not (gpr_bell_pipes_allowed). Guarded by bell_pipes_lock,
   * held across the write too: another thread must not close a descriptor
   * while a write uses its number. */
  gpr_bell_pipe *bell_pipes;
  uint32_t bell_pipes_lock;
  int bell_pipes_ok;
  /* Set by an embedder that keeps SIGPIPE ignored for the life of the
   * process (Node): a pipe ring then writes without blocking SIGPIPE. */
  int bell_sigpipe_ignored;
  uint64_t pipefs_dev;            /* st_dev of every anonymous pipe (pipefs) */
} gpr_segment;

typedef struct gpr_layout {
  uint64_t participants_offset;
  uint64_t slots_offset;
  uint64_t total_size;
} gpr_layout;

GPR_INLINE gpr_layout gpr_layout_for(uint32_t slot_count, uint32_t participant_capacity) {
  gpr_layout l;
  l.participants_offset = GPR_PARTICIPANTS_OFFSET;
  l.slots_offset = l.participants_offset + (uint64_t)participant_capacity * sizeof(gpr_participant);
  l.total_size = l.slots_offset + (uint64_t)slot_count * sizeof(gpr_slot);
  l.total_size = (l.total_size + 4095u) & ~(uint64_t)4095u;
  return l;
}

GPR_INLINE int gpr_name_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  if (n == 0 || n > GPR_NAME_MAX) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = name[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '_' || c == '-';
    if (!ok) return 0;
  }
  return 1;
}

/* The shared-memory object of segment NAME is /dev/shm/gpuring.NAME. */
GPR_INLINE void gpr_segment_shm_name(const char *name, char out[GPR_SHM_NAME_MAX]) {
  snprintf(out, GPR_SHM_NAME_MAX, "/gpuring.%s", name);
}

static const char GPR_NAME_RULE[] = "names are 1 to 32 of A-Z a-z 0-9 _ -";

GPR_INLINE int gpr_check_shm_space(uint64_t bytes, gpr_error *err) {
  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) != 0)
    return gpr_fail(err, GPR_E_SYSTEM, errno, "cannot stat /dev/shm: %s", strerror(errno));
  uint64_t avail = (uint64_t)vfs.f_bavail * (uint64_t)vfs.f_frsize;
  if (avail < bytes)
    return gpr_fail(err, GPR_E_NO_SPACE, ENOSPC,
                    "need %llu bytes in /dev/shm but only %llu are free; free space there or "
                    "enlarge it (mount -o remount,size=4G /dev/shm, or docker run --shm-size=4g)",
                    (unsigned long long)bytes, (unsigned long long)avail);
  return 0;
}

/* Reserves the pages now (tmpfs honours fallocate) so that a full /dev/shm is an
 * error here rather than a SIGBUS on first touch later. */
GPR_INLINE int gpr_size_shm(int fd, uint64_t bytes, gpr_error *err) {
  if (ftruncate(fd, (off_t)bytes) != 0)
    return gpr_fail(err, GPR_E_SYSTEM, errno, "ftruncate failed: %s", strerror(errno));
  int rc = posix_fallocate(fd, 0, (off_t)bytes);
  if (rc == ENOSPC)
    return gpr_fail(err, GPR_E_NO_SPACE, rc, "/dev/shm ran out of space reserving %llu bytes",
                    (unsigned long long)bytes);
  if (rc != 0 && rc != EOPNOTSUPP && rc != EINVAL)
    return gpr_fail(err, GPR_E_SYSTEM, rc, "posix_fallocate failed: %s", strerror(rc));
  return 0;
}

GPR_INLINE uint64_t gpr_slot_word(uint64_t seq, uint32_t state, uint32_t owner) {
  return ((seq & 0xFFFFFFFFFFFFull) << 16) | ((uint64_t)(state & 7u) << 13) | (owner & 0x1FFFu);
}

GPR_INLINE void gpr_segment_bind(gpr_segment *seg, uint8_t *base, uint64_t size, uint32_t slots,
                                 uint32_t participants, const gpr_layout *l) {
  seg->base = base;
  seg->size = size;
  seg->slot_count = slots;
  seg->mask = slots - 1u;
  seg->participant_capacity = participants;
  seg->header = (gpr_segment_header *)base;
  seg->control = (gpr_control *)(base + GPR_CONTROL_OFFSET);
  seg->participants = (gpr_participant *)(base + l->participants_offset);
  seg->slots = (gpr_slot *)(base + l->slots_offset);
}

/* The file a new segment is built in: an unnamed one in /dev/shm (O_TMPFILE),
 * which no opener can see and which vanishes with a creator killed before it
 * named it (gpr_segment_name_file); or, where the kernel or filesystem lacks
 * O_TMPFILE, the name itself, exclusively, which openers see half-built (they
 * wait for its ready word; one whose creator died stays unready until removed). */
#ifdef O_TMPFILE
#define GPR_O_TMPFILE O_TMPFILE
#else /* glibc declares it only under _GNU_SOURCE; Linux's value on x86-64 and arm64 */
#define GPR_O_TMPFILE (020000000 | O_DIRECTORY)
#endif
GPR_INLINE int gpr_segment_new_file(const char *name, const char *shm, uint32_t mode, int *named, gpr_error *err) {
  int fd = open("/dev/shm", GPR_O_TMPFILE | O_RDWR | O_CLOEXEC, (mode_t)mode);
  *named = fd < 0;
  if (fd < 0) fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
  if (fd < 0) {
    if (errno == EEXIST) return gpr_fail(err, GPR_E_SEGMENT_EXISTS, errno, "segment '%s' already exists", name);
    return gpr_fail(err, GPR_E_SYSTEM, errno, "shm_open(%s) failed: %s", shm, strerror(errno));
  }
  (void)fchmod(fd, (mode_t)mode); /* the umask must not narrow an explicit mode */
  return fd;
}

/* Gives the unnamed file of a ready segment its name, at `path` in /dev/shm:
 * link(2) never replaces, so a name taken meanwhile is SEGMENT_EXISTS. */
GPR_INLINE int gpr_segment_name_file(int fd, const char *name, const char *path, gpr_error *err) {
  char from[32];
  snprintf(from, sizeof from, "/proc/self/fd/%d", fd);
  if (linkat(AT_FDCWD, from, AT_FDCWD, path, AT_SYMLINK_FOLLOW) == 0) return 0;
  if (errno == EEXIST) return gpr_fail(err, GPR_E_SEGMENT_EXISTS, errno, "segment '%s' already exists", name);
  return gpr_fail(err, GPR_E_SYSTEM, errno, "naming the new segment %s failed: %s (is /proc mounted?)", path,
                  strerror(errno));
}

/* Writes a new segment's header and slot words, then its ready word, last, with
 * release order, so an opener that sees it sees everything before it. */
GPR_INLINE void gpr_segment_init(gpr_segment *seg, const char *name, uint32_t slot_count,
                                 uint32_t participant_capacity, int broadcast, const gpr_layout *l) {
  gpr_segment_header *h = seg->header;
  h->magic = GPR_SEGMENT_MAGIC;
  h->header_size = (uint32_t)sizeof(gpr_segment_header);
  seg->broadcast = broadcast;
  h->layout_hash = broadcast ? GPR_LAYOUT_HASH_BROADCAST : GPR_LAYOUT_HASH;
  h->flags = broadcast ? GPR_RING_BROADCAST : 0u;
  h->total_size = l->total_size;
  h->slot_count = slot_count;
  h->slot_size = (uint32_t)sizeof(gpr_slot);
  h->participant_capacity = participant_capacity;
  h->participant_size = (uint32_t)sizeof(gpr_participant);
  h->control_offset = GPR_CONTROL_OFFSET;
  h->participants_offset = l->participants_offset;
  h->slots_offset = l->slots_offset;
  h->pid_namespace = gpr_pid_namespace();
  h->created_unix_ns = gpr_now_ns(CLOCK_REALTIME);
  h->creator_pid = (uint32_t)getpid();
  memcpy(h->name, name, strlen(name));
  for (uint32_t i = 0; i < slot_count; i++)
    seg->slots[i].word = gpr_slot_word(i, GPR_SLOT_EMPTY, 0);
  __atomic_store_n(&h->ready_version, (GPR_VERSION_MAJOR << 16) | GPR_VERSION_MINOR,
                   __ATOMIC_RELEASE);
}

/* Creates ring NAME's segment, ready, or fails with SEGMENT_EXISTS: it is built
 * unnamed and named only once ready (SPEC.md §3.1). */
GPR_INLINE int gpr_segment_create(gpr_segment *seg, const char *name,
                                  const gpr_segment_options *opt, gpr_error *err) {
  gpr_segment_options o = {1024u, 64u, 0600u, 1000u, 0, GPR_DELIVERY_EACH};
  if (opt) {
    if (opt->slot_count) o.slot_count = opt->slot_count;
    if (opt->participant_capacity) o.participant_capacity = opt->participant_capacity;
    if (opt->mode) o.mode = opt->mode;
    o.delivery = opt->delivery;
  }
  memset(seg, 0, sizeof *seg);
  seg->fd = seg->bell_fd = -1;
  if (!gpr_name_valid(name))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "bad segment name: %s", GPR_NAME_RULE);
  if (o.slot_count < 2 || o.slot_count > GPR_MAX_SLOTS || (o.slot_count & (o.slot_count - 1)))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "slot count must be a power of two, 2 to %u",
                    GPR_MAX_SLOTS);
  if (o.participant_capacity < 1 || o.participant_capacity > GPR_MAX_PARTICIPANTS)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "participant capacity must be 1 to %u",
                    GPR_MAX_PARTICIPANTS);
  if (o.delivery > GPR_DELIVERY_ALL)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "delivery must be GPR_DELIVERY_EACH or GPR_DELIVERY_ALL");
  if (o.delivery == GPR_DELIVERY_ALL && o.participant_capacity > GPR_MAX_BROADCAST_PARTICIPANTS)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "a broadcast ring holds at most %u participants",
                    GPR_MAX_BROADCAST_PARTICIPANTS);
  char shm[GPR_SHM_NAME_MAX], path[GPR_SHM_NAME_MAX + 16];
  gpr_segment_shm_name(name, shm);
  snprintf(path, sizeof path, "/dev/shm%s", shm);
  /* Before the space check: a full /dev/shm must not hide that the ring is there
   * (create-or-open would fail with NO_SPACE), nor is a copy built to be dropped. */
  if (access(path, F_OK) == 0)
    return gpr_fail(err, GPR_E_SEGMENT_EXISTS, EEXIST, "segment '%s' already exists", name);
  gpr_layout l = gpr_layout_for(o.slot_count, o.participant_capacity);
  int rc = gpr_check_shm_space(l.total_size, err);
  if (rc != 0) return rc;
  int named;
  int fd = gpr_segment_new_file(name, shm, o.mode, &named, err);
  if (fd < 0) return fd;
  void *base = MAP_FAILED;
  rc = gpr_size_shm(fd, l.total_size, err);
  if (rc == 0) {
    base = mmap(NULL, l.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) rc = gpr_fail(err, GPR_E_SYSTEM, errno, "mmap failed: %s", strerror(errno));
  }
  if (rc == 0) {
    seg->fd = fd;
    gpr_segment_bind(seg, (uint8_t *)base, l.total_size, o.slot_count, o.participant_capacity, &l);
    snprintf(seg->name, sizeof seg->name, "%s", name);
    gpr_segment_init(seg, name, o.slot_count, o.participant_capacity, o.delivery == GPR_DELIVERY_ALL, &l);
    if (named || (rc = gpr_segment_name_file(fd, name, path, err)) == 0) return 0;
    munmap(base, l.total_size);
    memset(seg, 0, sizeof *seg);
    seg->fd = seg->bell_fd = -1;
  }
  close(fd);
  if (named) shm_unlink(shm);
  return rc;
}

/* Checks a ready header against this build and the file it came from. */
GPR_INLINE int gpr_header_check(const gpr_segment_header *h, uint64_t file_size, const char *name,
                                gpr_error *err) {
  uint32_t v = __atomic_load_n(&h->ready_version, __ATOMIC_ACQUIRE);
  if ((v >> 16) != GPR_VERSION_MAJOR)
    return gpr_fail(err, GPR_E_SEGMENT_VERSION, 0,
                    "segment '%s' has format version %u.%u; this build speaks %u.x", name, v >> 16,
                    v & 0xFFFFu, GPR_VERSION_MAJOR);
  int broadcast = h->flags == GPR_RING_BROADCAST;
  uint64_t hash = broadcast ? GPR_LAYOUT_HASH_BROADCAST : GPR_LAYOUT_HASH;
  if ((h->flags & ~GPR_RING_BROADCAST) != 0u || h->layout_hash != hash || h->header_size != sizeof(gpr_segment_header) ||
      h->slot_size != sizeof(gpr_slot) || h->participant_size != sizeof(gpr_participant) ||
      h->control_offset != GPR_CONTROL_OFFSET)
    return gpr_fail(err, GPR_E_SEGMENT_LAYOUT, 0,
                    "segment '%s' has a different layout (hash %016llx, expected %016llx)", name,
                    (unsigned long long)h->layout_hash, (unsigned long long)hash);
  uint32_t slots = h->slot_count, parts = h->participant_capacity;
  if (slots < 2 || slots > GPR_MAX_SLOTS || (slots & (slots - 1)) || parts < 1 ||
      parts > (broadcast ? GPR_MAX_BROADCAST_PARTICIPANTS : GPR_MAX_PARTICIPANTS))
    return gpr_fail(err, GPR_E_SEGMENT_LAYOUT, 0, "segment '%s' has impossible counts", name);
  gpr_layout l = gpr_layout_for(slots, parts);
  if (h->participants_offset != l.participants_offset || h->slots_offset != l.slots_offset ||
      h->total_size != l.total_size)
    return gpr_fail(err, GPR_E_SEGMENT_LAYOUT, 0, "segment '%s' has inconsistent offsets", name);
  if (file_size < l.total_size)
    return gpr_fail(err, GPR_E_SEGMENT_TRUNCATED, 0,
                    "segment '%s' is %llu bytes but its header says %llu", name,
                    (unsigned long long)file_size, (unsigned long long)l.total_size);
  if (file_size != l.total_size)
    return gpr_fail(err, GPR_E_SEGMENT_LAYOUT, 0, "segment '%s' is larger than its header says",
                    name);
  uint64_t ns = gpr_pid_namespace();
  if (h->pid_namespace != ns)
    return gpr_fail(err, GPR_E_PID_NAMESPACE, 0,
                    "segment '%s' was made in another PID namespace (container); all "
                    "participants must share one (docker run --pid=host or --ipc=host)",
                    name);
  return 0;
}

/* Waits for the creator to finish (ready word non-zero), then validates. A file
 * whose first word is not the magic is refused at once as foreign. */
GPR_INLINE int gpr_await_header(int fd, const char *name, uint32_t timeout_ms,
                                gpr_segment_header *out, uint64_t *file_size, gpr_error *err) {
  uint64_t deadline = gpr_monotonic_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (;;) {
    struct stat st;
    if (fstat(fd, &st) != 0)
      return gpr_fail(err, GPR_E_SYSTEM, errno, "fstat failed: %s", strerror(errno));
    *file_size = (uint64_t)st.st_size;
    memset(out, 0, sizeof *out);
    ssize_t n = pread(fd, out, sizeof *out, 0);
    if (n < 0) return gpr_fail(err, GPR_E_SYSTEM, errno, "read failed: %s", strerror(errno));
    int magic_ok = n >= 8 && out->magic == GPR_SEGMENT_MAGIC;
    if (n >= 8 && out->magic != 0 && !magic_ok)
      return gpr_fail(err, GPR_E_SEGMENT_FOREIGN, 0,
                      "/dev/shm/gpuring.%s exists but is not a gpuring segment", name);
    if (magic_ok && (size_t)n < sizeof *out)
      return gpr_fail(err, GPR_E_SEGMENT_TRUNCATED, 0,
                      "segment '%s' is shorter (%zd bytes) than its header", name, n);
    if (magic_ok && out->ready_version != 0) return 0; /* a copy: the acquire load is on the mapping */
    if (gpr_monotonic_ns() >= deadline) {
      return gpr_fail(err, GPR_E_SEGMENT_NOT_READY, 0,
                      "segment '%s' was never fully initialized (its creator may have died); "
                      "remove it with: gpuring rm %s",
                      name, name);
    }
    usleep(1000);
  }
}

GPR_INLINE int gpr_segment_open(gpr_segment *seg, const char *name,
                                const gpr_segment_options *opt, gpr_error *err) {
  memset(seg, 0, sizeof *seg);
  seg->fd = seg->bell_fd = -1;
  if (!gpr_name_valid(name))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "bad segment name: %s", GPR_NAME_RULE);
  char shm[GPR_SHM_NAME_MAX];
  gpr_segment_shm_name(name, shm);
  int fd = shm_open(shm, O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    if (errno == ENOENT)
      return gpr_fail(err, GPR_E_SEGMENT_NOT_FOUND, errno, "no segment named '%s'", name);
    return gpr_fail(err, GPR_E_SYSTEM, errno, "shm_open(%s) failed: %s", shm, strerror(errno));
  }
  struct stat owner;
  if (!(opt && (opt->flags & GPR_OPEN_ANY_OWNER)) && fstat(fd, &owner) == 0 && owner.st_uid != geteuid()) {
    close(fd);
    return gpr_fail(err, GPR_E_SEGMENT_OWNER, 0,
                    "segment '%s' belongs to uid %u, not to this process (uid %u): refusing to join; "
                    "open it with the any-owner option if that user is trusted",
                    name, (unsigned)owner.st_uid, (unsigned)geteuid());
  }
  gpr_segment_header h;
  uint64_t file_size = 0;
  uint32_t timeout = opt && opt->open_timeout_ms ? opt->open_timeout_ms : 1000u;
  int rc = gpr_await_header(fd, name, timeout, &h, &file_size, err);
  if (rc == 0) rc = gpr_header_check(&h, file_size, name, err);
  if (rc != 0) {
    close(fd);
    return rc;
  }
  gpr_layout l = gpr_layout_for(h.slot_count, h.participant_capacity);
  void *base = mmap(NULL, l.total_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    int e = errno;
    close(fd);
    return gpr_fail(err, GPR_E_SYSTEM, e, "mmap failed: %s", strerror(e));
  }
  /* SPEC §3.1 step 4: pread orders nothing; this load pairs with the creator's
   * release store and makes its participant table and slot words visible. */
  (void)__atomic_load_n(&((const gpr_segment_header *)base)->ready_version, __ATOMIC_ACQUIRE);
  seg->fd = fd;
  gpr_segment_bind(seg, (uint8_t *)base, l.total_size, h.slot_count, h.participant_capacity, &l);
  seg->broadcast = h.flags == GPR_RING_BROADCAST;
  snprintf(seg->name, sizeof seg->name, "%s", name);
  return 0;
}

GPR_INLINE void gpr_segment_close(gpr_segment *seg) {
  free(seg->held);
  seg->held = NULL;
  for (uint32_t i = 0; seg->bell_pipes && i < seg->participant_capacity; i++)
    if (seg->bell_pipes[i].fd >= 0) close(seg->bell_pipes[i].fd);
  free(seg->bell_pipes);
  seg->bell_pipes = NULL;
  if (seg->base) munmap(seg->base, seg->size);
  if (seg->fd >= 0) close(seg->fd);
  if (seg->bell_fd >= 0) close(seg->bell_fd);
  seg->base = NULL;
  seg->fd = seg->bell_fd = -1;
}

/* A bridge sink's origin log on ring NAME: the rest of its name, after
 * "gpuring.NAME.", is "origins." and 32 lowercase hex digits (SPEC §2). */
GPR_INLINE int gpr_is_origin_log(const char *rest) {
  if (strncmp(rest, "origins.", 8) != 0) return 0;
  rest += 8;
  size_t n = strspn(rest, "0123456789abcdef");
  return n == 32 && rest[n] == '\0';
}

/* Removes every arena of segment NAME (/dev/shm/gpuring.NAME.pIgG.aN, that
 * form exactly) and every bridge origin log of it (SPEC §2); returns how many
 * arenas. Arenas of dead producers are normally freed by sweeps, but a segment
 * removed first (or never swept again) leaves them. */
GPR_INLINE uint32_t gpr_arenas_unlink(const char *name) {
  DIR *dir = opendir("/dev/shm");
  if (!dir) return 0;
  char prefix[GPR_SHM_NAME_MAX];
  int len = snprintf(prefix, sizeof prefix, "gpuring.%s.", name);
  uint32_t removed = 0;
  for (struct dirent *e = readdir(dir); e; e = readdir(dir)) {
    unsigned index, gen, arena;
    char extra;
    if (strncmp(e->d_name, prefix, (size_t)len) != 0) continue;
    const char *rest = e->d_name + len;
    int is_arena = sscanf(rest, "p%ug%u.a%u%c", &index, &gen, &arena, &extra) == 3;
    if ((is_arena || gpr_is_origin_log(rest)) && unlinkat(dirfd(dir), e->d_name, 0) == 0) removed += (uint32_t)is_arena;
  }
  closedir(dir);
  return removed;
}

/* Removes the name and the arenas named after it; processes that have them
 * mapped keep using them. SEGMENT_NOT_FOUND only when neither existed. */
GPR_INLINE int gpr_segment_unlink(const char *name, gpr_error *err) {
  if (!gpr_name_valid(name))
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "bad segment name: %s", GPR_NAME_RULE);
  char shm[GPR_SHM_NAME_MAX];
  gpr_segment_shm_name(name, shm);
  uint32_t arenas = gpr_arenas_unlink(name);
  if (shm_unlink(shm) != 0) {
    if (errno == ENOENT && arenas > 0) return 0;
    if (errno == ENOENT)
      return gpr_fail(err, GPR_E_SEGMENT_NOT_FOUND, errno, "no segment named '%s'", name);
    return gpr_fail(err, GPR_E_SYSTEM, errno, "shm_unlink(%s) failed: %s", shm, strerror(errno));
  }
  return 0;
}

/* ---- participants -------------------------------------------------------- */

GPR_INLINE uint32_t gpr_pstate(uint64_t word) { return (uint32_t)(word & 7u); }
GPR_INLINE uint32_t gpr_pgen(uint64_t word) { return (uint32_t)(word >> 32); }
/* The pid a transient state (ATTACHING, FREEING) names: who is doing it. */
GPR_INLINE uint32_t gpr_pword_pid(uint64_t word) { return (uint32_t)(word & 0xFFFFFFFFu) >> 3; }
GPR_INLINE uint64_t gpr_pword(uint32_t gen, uint32_t pid, uint32_t state) {
  return ((uint64_t)gen << 32) | ((uint64_t)(pid & 0x1FFFFFFFu) << 3) | state;
}

GPR_INLINE uint64_t gpr_participant_word(const gpr_segment *seg, uint32_t index) {
  return __atomic_load_n(&seg->participants[index].state, __ATOMIC_ACQUIRE);
}

/* Does entry `index` still hold the attachment of generation `gen`? A sweep
 * that judged the process dead, or a stray write into the segment, can take an
 * entry from a live participant; its slot transitions after that would act for
 * whoever holds the entry next (SPEC.md §4, "Losing the entry"). */
GPR_INLINE int gpr_participant_held(const gpr_segment *seg, uint32_t index, uint32_t gen) {
  return index < seg->participant_capacity &&
         __atomic_load_n(&seg->participants[index].state, __ATOMIC_RELAXED) ==
             gpr_pword(gen, 0, GPR_PARTICIPANT_ACTIVE);
}

/* SPEC.md §4, "Giving up a damaged entry": the participant of this mapping
 * found its entry's state word changed. If the word still says ACTIVE and the
 * entry still holds this process's pid and the attached_unix_ns its attach
 * wrote, nobody attached there since (an attach rewrites both): a write into
 * the segment changed the word itself. Nobody else can tell: the entry looks
 * live for as long as this process runs, so it would never be freed, and on a
 * broadcast ring its subscriber bit would hold every frame for a reader that
 * reads no more. So it marks the entry DEAD, for sweeps to clean up and free. */
GPR_INLINE void gpr_participant_give_up(gpr_segment *seg) {
  if (seg->attached_stamp == 0 || seg->attached_index >= seg->participant_capacity) return;
  gpr_participant *p = &seg->participants[seg->attached_index];
  uint64_t w = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
  if (gpr_pstate(w) != GPR_PARTICIPANT_ACTIVE || __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE) != (uint32_t)getpid() ||
      __atomic_load_n(&p->attached_unix_ns, __ATOMIC_RELAXED) != seg->attached_stamp)
    return;
  __atomic_compare_exchange_n(&p->state, &w, gpr_pword(gpr_pgen(w), 0, GPR_PARTICIPANT_DEAD), 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_RELAXED);
}

/* DETACHED, with what happened and the fix; gives up an entry that damage took
 * (gpr_participant_give_up). */
GPR_INLINE int gpr_fail_detached(gpr_segment *seg, gpr_error *err) {
  gpr_participant_give_up(seg);
  return gpr_fail(err, GPR_E_DETACHED, 0,
                  "this participant no longer holds its entry in ring '%s' (a sweep judged it dead, or the "
                  "segment was overwritten); close it and open a new one",
                  seg->name);
}

GPR_INLINE void gpr_sweep_leftovers(gpr_segment *seg, uint32_t index, uint64_t attaching); /* recovery.h */

/* Claims a free participant entry. Identity (pid, start time) is written while
 * the entry is ATTACHING, so no sweeper ever judges a half-written entry; the
 * ATTACHING word itself names our pid, so if we die half-way a sweeper can tell
 * and reclaim the entry. */
GPR_INLINE int gpr_participant_attach(gpr_segment *seg, uint32_t roles, uint32_t *index,
                                      uint32_t *gen, gpr_error *err) {
  /* Our identity first: an entry recorded with a wrong start time would be
   * judged dead, and swept, while we use it. */
  uint64_t start_time = gpr_self_start_time();
  if (start_time == 0)
    return gpr_fail(err, GPR_E_SYSTEM, errno,
                    "cannot read this process's start time from /proc/self/stat (%s), which identifies "
                    "it to its peers; is /proc mounted, and is the process below its file descriptor limit?",
                    strerror(errno));
  for (uint32_t i = 0; i < seg->participant_capacity; i++) {
    gpr_participant *p = &seg->participants[i];
    uint64_t w = __atomic_load_n(&p->state, __ATOMIC_ACQUIRE);
    if (gpr_pstate(w) != GPR_PARTICIPANT_FREE) continue;
    uint32_t g = gpr_pgen(w) + 1u;
    uint64_t attaching = gpr_pword(g, (uint32_t)getpid(), GPR_PARTICIPANT_ATTACHING);
    if (!__atomic_compare_exchange_n(&p->state, &w, attaching, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      continue;
    /* start_time before pid: a sweeper that reads a non-zero pid (acquire) may
     * trust the start time beside it. */
    p->start_time = start_time;
    __atomic_store_n(&p->pid, (uint32_t)getpid(), __ATOMIC_RELEASE);
    p->roles = roles;
    p->attached_unix_ns = gpr_now_ns(CLOCK_REALTIME);
    seg->attached_stamp = p->attached_unix_ns;
    seg->attached_index = i;
    p->arena_count = 0;
    p->published = p->leased = p->released = 0;
    p->doorbell = 0;
    p->doorbell_key = 0;
    p->doorbell_pipe = 0;
    p->doorbell_pipe_ino = 0;
    p->cursor = p->missed = p->missed_seen = 0;
    p->subscription = 0;
    gpr_sweep_leftovers(seg, i, attaching);
    __atomic_store_n(&p->state, ((uint64_t)g << 32) | GPR_PARTICIPANT_ACTIVE, __ATOMIC_RELEASE);
    *index = i;
    *gen = g;
    return 0;
  }
  return gpr_fail(err, GPR_E_PARTICIPANTS_FULL, 0,
                  "segment '%s' has no free participant entry (%u in use); dead ones are "
                  "reclaimed automatically, so this many processes are attached",
                  seg->name, seg->participant_capacity);
}

/* Opens segment `name` (gpr_segment_open with `open`: its open_timeout_ms and
 * flags; NULL for the defaults) and takes a participant entry with `roles`, as
 * every producer and consumer does first. On failure nothing stays open. */
GPR_INLINE int gpr_segment_join_with(gpr_segment *seg, const char *name, const gpr_segment_options *open,
                                     uint32_t roles, uint32_t *index, uint32_t *gen, gpr_error *err) {
  int rc = gpr_segment_open(seg, name, open, err);
  if (rc == 0) rc = gpr_participant_attach(seg, roles, index, gen, err);
  if (rc != 0) gpr_segment_close(seg);
  return rc;
}

/* gpr_segment_join_with, waiting up to open_timeout_ms (0: 1000 ms) for the creator. */
GPR_INLINE int gpr_segment_join(gpr_segment *seg, const char *name, uint32_t open_timeout_ms, uint32_t roles,
                                uint32_t *index, uint32_t *gen, gpr_error *err) {
  gpr_segment_options so = {0, 0, 0, open_timeout_ms, 0, GPR_DELIVERY_EACH};
  return gpr_segment_join_with(seg, name, &so, roles, index, gen, err);
}

/* Is entry `index` (owner field = index + 1) held by a live process? */
GPR_INLINE int gpr_participant_alive(const gpr_segment *seg, uint32_t index) {
  if (index >= seg->participant_capacity) return 0;
  const gpr_participant *p = &seg->participants[index];
  uint64_t w = gpr_participant_word(seg, index);
  uint32_t pid = __atomic_load_n(&p->pid, __ATOMIC_ACQUIRE);
  if (gpr_pstate(w) == GPR_PARTICIPANT_ATTACHING) return gpr_pid_running(gpr_pword_pid(w));
  if (gpr_pstate(w) != GPR_PARTICIPANT_ACTIVE) return 0;
  return gpr_process_alive(pid, p->start_time);
}

/* Is producer (index, gen) of a frame still attached and alive? Once not, no
 * new frame of it comes, and what it left mapped in a consumer may go. */
GPR_INLINE int gpr_publisher_live(const gpr_segment *seg, uint32_t index, uint32_t gen) {
  return index < seg->participant_capacity && gpr_pgen(gpr_participant_word(seg, index)) == gen &&
         gpr_participant_alive(seg, index);
}
