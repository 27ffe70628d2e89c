/* gpuring/doorbell.h: waking participants that sleep on a file descriptor.
 *
 * A futex can only be slept on by a thread. An event loop (Node's libuv, an
 * asyncio loop, epoll) sleeps on file descriptors, and a thread that waits on
 * the futex and then wakes the loop costs a second wake-up. So a participant
 * may instead own a doorbell: an AF_UNIX SOCK_DGRAM socket bound to the
 * abstract name "\0gpuring.NAME.KEY" (KEY: 16 lowercase hex digits of its
 * entry's `doorbell_key`), which its loop polls directly. Any process can ring
 * it with sendto(); nothing has to be passed between processes. A thread that
 * sleeps on its doorbell (Node's nextSync()) may instead sleep in FUTEX_WAIT
 * on its entry's `doorbell` word, saying so with GPR_BELL_FUTEX (2.3): a
 * futex wake-up costs what an eventfd's does, a datagram's 1-6 us more. A
 * loop may also poll a pipe (2.5: Node's event loop does), saying so with
 * GPR_BELL_PIPE and naming the pipe's read end in its entry: notifiers of its
 * own user open it as /proc/PID/fd/N and write one byte, which wakes it as an
 * eventfd does, where a datagram takes 20-30% longer.
 *
 * Protocol (SPEC.md §6.1). Each entry's `doorbell` word holds one bit per
 * thing to wait for (GPR_BELL_DATA: a frame became READY; GPR_BELL_SPACE: a
 * slot was released or recycled). The control block counts the set bits of
 * each kind (`data_doorbells`, `space_doorbells`), so a notifier whose count
 * is zero pays one load and no system call.
 *  - Sleeper: set the bit (fetch_or, seq_cst); if it was clear, add one to the
 *    count (seq_cst); look at the ring once more; if still nothing, sleep on
 *    the socket. Whoever clears a set bit subtracts the one again.
 *    A thread may add GPR_BELL_FUTEX in the same fetch_or and sleep in
 *    FUTEX_WAIT on the word itself; it clears GPR_BELL_FUTEX when awake.
 *  - Notifier, after its release store and the seq_cst fence of gpr_notify:
 *    if the count is non-zero, clear each set bit of that kind with fetch_and;
 *    for each bit it cleared, subtract one and ring: FUTEX_WAKE on the word
 *    if the word it cleared held GPR_BELL_FUTEX, else one datagram. A publish
 *    stops after one sleeper it could reach: only one consumer can take the
 *    frame, and waking every sleeper for it cost the producer a system call
 *    per sleeper per frame (4 sleeping consumers took fewer frames/s than 1).
 *  - Heads-up (optional): a producer may ring before its frame is READY, so
 *    the wake-up overlaps the publish; the publish then rings the one it woke
 *    again only if it went back to sleep (gpr_doorbell_heads_up).
 * Either the sleeper's last look sees the new state or the notifier sees the
 * bit (the same pairing as the futex waiters). A bell rings once per sleep: a
 * notifier finds the bit clear until its owner sleeps again, so a busy stream
 * pays no system call. A dead sleeper costs at most one failed sendto (its bit
 * is cleared by that ring) and the sweep clears its bits when freeing it.
 * Included by gpuring.h; not a standalone header. */

enum {
  GPR_BELL_DATA = 1u,
  GPR_BELL_SPACE = 2u,
  GPR_BELL_FUTEX = 4u, /* 2.3: the owner sleeps on the word itself */
  GPR_BELL_PIPE = 8u,  /* 2.5: the owner polls the pipe its entry names, beside its socket */
  GPR_BELL_ALL = 15u
};

/* Abstract socket address of a doorbell: "\0gpuring.NAME.KEY", KEY in 16
 * lowercase hex digits. Written by hand rather than with snprintf: every ring
 * formats it, often on a CPU just woken, where printf's machinery runs cold
 * (2 ms asleep, dev box: 3.0 us against 0.37 us by hand, p50). NAME is a valid
 * segment name (at most GPR_NAME_MAX characters), so it always fits. */
GPR_INLINE socklen_t gpr_doorbell_address(const char *segment, uint64_t key, struct sockaddr_un *addr) {
  static const char hex[] = "0123456789abcdef";
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  char *p = addr->sun_path + 1;
  memcpy(p, "gpuring.", 8);
  p += 8;
  size_t n = strnlen(segment, GPR_NAME_MAX);
  memcpy(p, segment, n);
  p += n;
  *p++ = '.';
  for (int shift = 60; shift >= 0; shift -= 4) *p++ = hex[(key >> shift) & 15u];
  return (socklen_t)(p - (char *)addr);
}

/* One unbound datagram socket per segment view for ringing, made on first use. */
GPR_INLINE int gpr_doorbell_sender(gpr_segment *seg) {
  int fd = __atomic_load_n(&seg->bell_fd, __ATOMIC_ACQUIRE);
  if (fd >= 0) return fd;
  fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return -1;
  int none = -1;
  if (!__atomic_compare_exchange_n(&seg->bell_fd, &none, fd, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
    close(fd);
    return none;
  }
  return fd;
}

/* Subtracts one from a doorbell count, never below zero: the count lives in
 * shared memory, and a damaged one must not wrap into "everyone is asleep". */
GPR_INLINE void gpr_doorbell_count_down(uint32_t *count) {
  uint32_t n = __atomic_load_n(count, __ATOMIC_RELAXED);
  while (n > 0 && !__atomic_compare_exchange_n(count, &n, n - 1u, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
  }
}

GPR_INLINE uint32_t *gpr_doorbell_count(gpr_segment *seg, uint32_t bit) {
  return bit == GPR_BELL_DATA ? &seg->control->data_doorbells : &seg->control->space_doorbells;
}

/* ANDs `bits` out of entry `index`'s word, taking each kind it cleared off its
 * count; returns the word as it was. */
GPR_INLINE uint32_t gpr_doorbell_and(gpr_segment *seg, uint32_t index, uint32_t bits) {
  uint32_t word = __atomic_fetch_and(&seg->participants[index].doorbell, ~bits, __ATOMIC_SEQ_CST);
  if (word & bits & GPR_BELL_DATA) gpr_doorbell_count_down(&seg->control->data_doorbells);
  if (word & bits & GPR_BELL_SPACE) gpr_doorbell_count_down(&seg->control->space_doorbells);
  return word;
}

/* Clears `bits` of entry `index`; returns the bits this call cleared (each
 * already taken off its count). Used by sleepers that woke on their own, at
 * detach, and by the sweep. */
GPR_INLINE uint32_t gpr_doorbell_clear(gpr_segment *seg, uint32_t index, uint32_t bits) {
  return gpr_doorbell_and(seg, index, bits) & bits;
}

/* Notifier: clears `bit` of entry `index`. Returns 0 if it was clear (another
 * notifier took it, or its owner woke), else `bit`, with GPR_BELL_FUTEX added
 * when the owner sleeps on the word itself: how to ring it. */
GPR_INLINE uint32_t gpr_doorbell_take(gpr_segment *seg, uint32_t index, uint32_t bit) {
  uint32_t word = gpr_doorbell_and(seg, index, bit);
  return word & bit ? word & (bit | GPR_BELL_FUTEX | GPR_BELL_PIPE) : 0u;
}

/* Sleeper: declares entry `index` asleep waiting for `bit`, on its socket;
 * with GPR_BELL_PIPE in `bit`, on its socket and the pipe its entry names;
 * with GPR_BELL_FUTEX in `bit`, on the word itself (gpr_doorbell_sleep_on_word).
 * The caller then looks at the ring once more before it sleeps. A sleeper
 * clears a GPR_BELL_FUTEX or GPR_BELL_PIPE left in the word that is not its
 * way of sleeping (damage, §10a): notifiers would ring where nobody listens. */
GPR_INLINE void gpr_doorbell_arm(gpr_segment *seg, uint32_t index, uint32_t bit) {
  uint32_t *word = &seg->participants[index].doorbell, kind = bit & (GPR_BELL_DATA | GPR_BELL_SPACE);
  uint32_t stray = (GPR_BELL_FUTEX | GPR_BELL_PIPE) & ~bit;
  if (__atomic_load_n(word, __ATOMIC_RELAXED) & stray) __atomic_fetch_and(word, ~stray, __ATOMIC_SEQ_CST);
  uint32_t was = __atomic_fetch_or(word, bit, __ATOMIC_SEQ_CST);
  if (!(was & kind)) __atomic_fetch_add(gpr_doorbell_count(seg, kind), 1u, __ATOMIC_SEQ_CST);
}

/* A sleeper armed with GPR_BELL_FUTEX | `bit`: sleeps in FUTEX_WAIT on its
 * entry's word while `bit` is set there, up to `timeout_ns`. Returns whether a
 * notifier rang it (cleared `bit`). Any change to the word ends the wait, so a
 * ring between the arming and the wait is not lost. The caller then disarms
 * (gpr_doorbell_clear with GPR_BELL_FUTEX among the bits). */
GPR_INLINE int gpr_doorbell_sleep_on_word(gpr_segment *seg, uint32_t index, uint32_t bit, uint64_t timeout_ns) {
  uint32_t *word = &seg->participants[index].doorbell;
  uint32_t w = __atomic_load_n(word, __ATOMIC_SEQ_CST);
  if (w & bit) gpr_futex_wait(word, w, timeout_ns);
  return !(__atomic_load_n(word, __ATOMIC_SEQ_CST) & bit);
}

/* Whether this mapping may ring doorbell pipes: only where nobody but its
 * own user can write the segment. An entry names a descriptor of a process,
 * and a writer of another user could otherwise point our write at a pipe of
 * ours that it could not open itself; one of our own user can open it
 * anyway. Also learns pipefs's device, which every anonymous pipe has.
 * Called with bell_pipes_lock held. */
GPR_INLINE int gpr_bell_pipes_allowed(gpr_segment *seg) {
  if (seg->bell_pipes_ok) return seg->bell_pipes_ok > 0;
  seg->bell_pipes_ok = -1;
  struct stat st;
  int ends[2];
  if (fstat(seg->fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) return 0;
  seg->bell_pipes = (gpr_bell_pipe *)calloc(seg->participant_capacity, sizeof *seg->bell_pipes);
  /* pipe(), not pipe2(): this header builds without _GNU_SOURCE too, and the
   * ends live only for the fstat below. */
  if (!seg->bell_pipes || pipe(ends) != 0) return 0;
  int ok = fstat(ends[0], &st) == 0;
  close(ends[0]);
  close(ends[1]);
  if (!ok) return 0;
  for (uint32_t i = 0; i < seg->participant_capacity; i++) seg->bell_pipes[i].fd = -1;
  seg->pipefs_dev = st.st_dev;
  seg->bell_pipes_ok = 1;
  return 1;
}

/* Whether `st` is the anonymous pipe of inode `ino`: a file, a device or a
 * named FIFO that an entry's descriptor number might name is never written. */
GPR_INLINE int gpr_is_bell_pipe(const gpr_segment *seg, const struct stat *st, uint64_t ino) {
  return S_ISFIFO(st->st_mode) && (uint64_t)st->st_ino == ino && st->st_dev == seg->pipefs_dev;
}

/* Opens the pipe that `pid`'s descriptor `number` is, for writing, into `c`
 * (fd -1 where it is not the pipe of inode `ino` or cannot be opened). It is
 * looked at before it is opened: opening a device may itself do something. */
GPR_INLINE void gpr_bell_pipe_open(gpr_segment *seg, gpr_bell_pipe *c, uint32_t pid, uint32_t number, uint64_t ino) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
  c->pid = pid;
  c->number = number;
  c->ino = ino;
  char path[48];
  snprintf(path, sizeof path, "/proc/%u/fd/%u", pid, number);
  struct stat st;
  if (stat(path, &st) != 0 || !gpr_is_bell_pipe(seg, &st, ino)) return;
  int fd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return;
  if (fstat(fd, &st) == 0 && gpr_is_bell_pipe(seg, &st, ino)) c->fd = fd;
  else close(fd);
}

/* Writes one byte to a doorbell pipe: 1 it reached its reader (or the pipe
 * is full, so already holds a ring), 0 the reader is gone (its owner died),
 * -1 it failed otherwise. A write to a pipe without a reader raises SIGPIPE,
 * whose default action ends the process: unless the embedder keeps it
 * ignored (bell_sigpipe_ignored), it is blocked around the write, and the one
 * the write raised is taken back. */
GPR_INLINE int gpr_bell_pipe_write(const gpr_segment *seg, int fd) {
  sigset_t pipe_only, old;
  sigemptyset(&pipe_only);
  sigemptyset(&old);
  sigaddset(&pipe_only, SIGPIPE);
  int masked = !seg->bell_sigpipe_ignored;
  if (masked) pthread_sigmask(SIG_BLOCK, &pipe_only, &old);
  ssize_t n = write(fd, "", 1);
  int e = errno;
  if (masked && n < 0 && e == EPIPE && !sigismember(&old, SIGPIPE)) {
    struct timespec none = {0, 0};
    while (sigtimedwait(&pipe_only, NULL, &none) < 0 && errno == EINTR) {
    }
  }
  if (masked) pthread_sigmask(SIG_SETMASK, &old, NULL);
  return n == 1 || e == EAGAIN ? 1 : e == EPIPE ? 0 : -1;
}

/* Rings entry `index` through the pipe it names: 1 reached, 0 reached nobody
 * (the reader is gone), -1 this mapping cannot ring that pipe (ring the
 * socket). The descriptor opened for it is kept for the next ring, until the
 * entry names another pipe; a pipe that could not be opened is not tried
 * again until then. */
GPR_INLINE int gpr_doorbell_pipe_ring(gpr_segment *seg, uint32_t index) {
  gpr_participant *p = &seg->participants[index];
  uint64_t ino = __atomic_load_n(&p->doorbell_pipe_ino, __ATOMIC_ACQUIRE);
  uint32_t pid = __atomic_load_n(&p->pid, __ATOMIC_RELAXED);
  uint32_t number = __atomic_load_n(&p->doorbell_pipe, __ATOMIC_RELAXED);
  if (ino == 0 || pid == 0) return -1;
  while (__atomic_exchange_n(&seg->bell_pipes_lock, 1u, __ATOMIC_ACQUIRE)) gpr_cpu_relax();
  int rc = -1;
  if (gpr_bell_pipes_allowed(seg)) {
    gpr_bell_pipe *c = &seg->bell_pipes[index];
    if (c->ino != ino || c->pid != pid || c->number != number) gpr_bell_pipe_open(seg, c, pid, number, ino);
    if (c->fd >= 0) rc = gpr_bell_pipe_write(seg, c->fd);
    if (rc == 0) {
      close(c->fd);
      c->fd = -1;
    }
  }
  __atomic_store_n(&seg->bell_pipes_lock, 0u, __ATOMIC_RELEASE);
  return rc;
}

/* Rings entry `index`, whose bit gpr_doorbell_take() cleared and described in
 * `how`: whether it reached a sleeper. On the word, FUTEX_WAKE woke a thread
 * or nobody (a dead owner, or one not yet in its wait, which the cleared bit
 * ends at once: either way the notifier may ring another). On its pipe, a
 * byte: a pipe whose reader is gone (EPIPE: its owner died) reached nobody.
 * On the socket (no pipe, or one this mapping cannot open), a datagram: a
 * socket that is gone (ECONNREFUSED) reached nobody. A full pipe or queue
 * (EAGAIN) already holds a wake-up, so it counts. */
GPR_INLINE int gpr_doorbell_send(gpr_segment *seg, uint32_t index, uint32_t how) {
  gpr_participant *p = &seg->participants[index];
  if (how & GPR_BELL_FUTEX) return gpr_futex_wake_all(&p->doorbell) > 0;
  if (how & GPR_BELL_PIPE) {
    int reached = gpr_doorbell_pipe_ring(seg, index);
    if (reached >= 0) return reached;
  }
  struct sockaddr_un addr;
  socklen_t len = gpr_doorbell_address(seg->name, __atomic_load_n(&p->doorbell_key, __ATOMIC_ACQUIRE), &addr);
  int fd = gpr_doorbell_sender(seg);
  if (fd < 0) return 0;
  return sendto(fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL, (struct sockaddr *)&addr, len) >= 0 || errno == EAGAIN;
}

enum { GPR_RUNG_NOBODY = 0xffffffffu };

/* Notifier: rings entries asleep waiting for `bit`, at most `max` live ones;
 * returns the index of the last one it reached, or GPR_RUNG_NOBODY. The caller
 * has issued the seq_cst fence after its release store (gpr_notify does). The
 * scan stops after as many set bits as the count announced, and never passes
 * the table. A sleeper whose socket is gone was rung by nobody and does not
 * count against `max`. */
GPR_INLINE uint32_t gpr_doorbell_ring(gpr_segment *seg, uint32_t bit, uint32_t max) {
  uint32_t left = __atomic_load_n(gpr_doorbell_count(seg, bit), __ATOMIC_RELAXED), rung = GPR_RUNG_NOBODY;
  for (uint32_t i = 0; left > 0 && max > 0 && i < seg->participant_capacity; i++) {
    gpr_participant *p = &seg->participants[i];
    if (!(__atomic_load_n(&p->doorbell, __ATOMIC_RELAXED) & bit)) continue;
    left--;
    uint32_t how = gpr_doorbell_take(seg, i, bit);
    if (!how) continue;  /* another notifier rang it */
    if (gpr_doorbell_send(seg, i, how)) max--, rung = i;
  }
  return rung;
}

/* Heads-up (SPEC.md §6.1): a producer about to publish rings the DATA sleeper
 * (every one, on a broadcast ring) before its frame exists, so that the
 * sleeper's wake-up, the slowest hop of a hand-off, overlaps the publish
 * instead of following it. Returns whom it reached, for
 * gpr_ring_try_publish_rung(); a publish that then does not happen costs that
 * sleeper one wake-up that finds nothing. No system call while nobody sleeps. */
GPR_INLINE uint32_t gpr_doorbell_heads_up(gpr_segment *seg) {
  /* No fence: nothing is lost if this misses a sleeper, whom the publish's own
   * notification still finds. */
  if (__atomic_load_n(&seg->control->data_doorbells, __ATOMIC_RELAXED) == 0) return GPR_RUNG_NOBODY;
  return gpr_doorbell_ring(seg, GPR_BELL_DATA, seg->broadcast ? UINT32_MAX : 1u);
}

/* Wakes waiters for `bit` (GPR_BELL_DATA: consumers on data_seq; GPR_BELL_SPACE:
 * producers on space_seq) after a release store: every futex sleeper, and up
 * to `doorbells` doorbell sleepers. No system call while nobody sleeps. */
GPR_INLINE void gpr_notify_bell(gpr_segment *seg, uint32_t bit, uint32_t doorbells) {
  gpr_control *c = seg->control;
  uint32_t *seq = bit == GPR_BELL_DATA ? &c->data_seq : &c->space_seq;
  uint32_t *waiters = bit == GPR_BELL_DATA ? &c->data_waiters : &c->space_waiters;
  gpr_notify(seq, waiters);
  if (__atomic_load_n(gpr_doorbell_count(seg, bit), __ATOMIC_RELAXED) != 0) gpr_doorbell_ring(seg, bit, doorbells);
}

/* One new frame can be taken by one consumer only: a publish rings one
 * doorbell sleeper, not all of them (SPEC.md §6.1), so that several sleeping
 * consumers do not all wake, and cost the producer a system call each, for
 * every frame. */
GPR_INLINE void gpr_notify_published(gpr_segment *seg) { gpr_notify_bell(seg, GPR_BELL_DATA, 1u); }

/* The DATA notification of a work-queue publish whose producer gave a heads-up
 * that reached entry `rung`: that sleeper was already woken for this frame, so
 * it is rung again only if it went back to sleep before the frame was READY
 * (its bit is set again); nobody else is (another sleeper would wake to a frame
 * `rung` takes). With GPR_RUNG_NOBODY, gpr_notify_published(). */
GPR_INLINE void gpr_notify_published_rung(gpr_segment *seg, uint32_t rung) {
  if (rung >= seg->participant_capacity) return gpr_notify_published(seg);
  gpr_notify(&seg->control->data_seq, &seg->control->data_waiters);
  uint32_t how = gpr_doorbell_take(seg, rung, GPR_BELL_DATA);
  if (how) gpr_doorbell_send(seg, rung, how);
}
GPR_INLINE void gpr_notify_data(gpr_segment *seg) { gpr_notify_bell(seg, GPR_BELL_DATA, UINT32_MAX); }
GPR_INLINE void gpr_notify_space(gpr_segment *seg) { gpr_notify_bell(seg, GPR_BELL_SPACE, UINT32_MAX); }
