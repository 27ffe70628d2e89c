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
 * futex wake-up costs what an eventfd's does, a datagram's 1-6 us more.
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

enum { GPR_BELL_DATA = 1u, GPR_BELL_SPACE = 2u, GPR_BELL_FUTEX = 4u };

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
  return word & bit ? word & (bit | GPR_BELL_FUTEX) : 0u;
}

/* Sleeper: declares entry `index` asleep waiting for `bit`, on its socket, or
 * with GPR_BELL_FUTEX in `bit` on the word itself (gpr_doorbell_sleep_on_word).
 * The caller then looks at the ring once more before it sleeps. A socket
 * sleeper clears a GPR_BELL_FUTEX left in the word (damage, §10a): notifiers
 * would wake the word instead of its socket. */
GPR_INLINE void gpr_doorbell_arm(gpr_segment *seg, uint32_t index, uint32_t bit) {
  uint32_t *word = &seg->participants[index].doorbell, kind = bit & ~GPR_BELL_FUTEX;
  if (!(bit & GPR_BELL_FUTEX) && (__atomic_load_n(word, __ATOMIC_RELAXED) & GPR_BELL_FUTEX))
    __atomic_fetch_and(word, ~GPR_BELL_FUTEX, __ATOMIC_SEQ_CST);
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

/* Rings entry `p`, whose bit gpr_doorbell_take() cleared and described in
 * `how`: whether it reached a sleeper. On the word, FUTEX_WAKE woke a thread
 * or nobody (a dead owner, or one not yet in its wait, which the cleared bit
 * ends at once: either way the notifier may ring another). On the socket, a
 * datagram: a socket that is gone (ECONNREFUSED: its owner died) reached
 * nobody; a full queue (EAGAIN) already holds a wake-up, so it counts. */
GPR_INLINE int gpr_doorbell_send(gpr_segment *seg, gpr_participant *p, uint32_t how) {
  if (how & GPR_BELL_FUTEX) return gpr_futex_wake_all(&p->doorbell) > 0;
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
    if (gpr_doorbell_send(seg, p, how)) max--, rung = i;
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
  if (how) gpr_doorbell_send(seg, &seg->participants[rung], how);
}
GPR_INLINE void gpr_notify_data(gpr_segment *seg) { gpr_notify_bell(seg, GPR_BELL_DATA, UINT32_MAX); }
GPR_INLINE void gpr_notify_space(gpr_segment *seg) { gpr_notify_bell(seg, GPR_BELL_SPACE, UINT32_MAX); }
