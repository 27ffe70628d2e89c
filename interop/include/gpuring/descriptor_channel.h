/* gpuring/descriptor_channel.h: handing file descriptors from a producer to
 * its consumers (SPEC.md §9c).
 *
 * Stream-ordered pool memory (cuMemPoolExportPointer) can only be opened in
 * another process through the pool's file descriptor, and a descriptor can
 * only cross processes over a Unix socket (SCM_RIGHTS). So a producer that
 * publishes such memory serves its descriptors on a SOCK_SEQPACKET socket
 * bound to the abstract name "\0gpuring.NAME.pIgG.fd" (I: its participant
 * index, G: its generation, both decimal): the frame reference names them, so
 * a consumer finds the socket without anything passed beforehand.
 *
 * One connection carries one request and one reply:
 *   request  16 bytes: magic u32 "GPRD" | kind u16 | reserved u16 (0) | id u64
 *   reply    16 bytes: magic u32 "GPRD" | count u16 | reserved u16 (0) | status u64,
 *            then, for kind 4 (cuda-vmm), count u64 chunk sizes;
 *            with exactly `count` descriptors (SCM_RIGHTS) when status is 0.
 * kind is the buffer's memory kind: 3 (cuda-pool; id = pool_id; one
 * descriptor, the pool's) or 4 (cuda-vmm; id = the span number; one
 * descriptor per chunk of the span, in address order).
 * status: 0 found, 1 no such id, 2 the descriptor could not be sent.
 * Both ends check the other's credentials (SO_PEERCRED): the same effective
 * uid, and on the producer's side a process that is attached to the segment.
 * Abstract names have no permissions, so these checks are what keeps another
 * user from receiving, or forging, the memory.
 * Included by gpuring.h; not a standalone header. */

#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>

#define GPR_CHANNEL_MAGIC 0x44525047u /* "GPRD" */
#define GPR_CHANNEL_TIMEOUT_MS 2000
/* The most descriptors one reply carries (SCM_MAX_FD): a cuda-vmm span has at
 * most this many chunks. */
#define GPR_CHANNEL_MAX_FDS 253

enum { GPR_CHANNEL_FOUND = 0, GPR_CHANNEL_UNKNOWN = 1, GPR_CHANNEL_UNSENDABLE = 2 };

typedef struct gpr_channel_message {
  uint32_t magic;
  uint16_t kind;    /* request: memory kind; reply: how many descriptors come with it */
  uint16_t pad;     /* 0 */
  uint64_t value;   /* request: the id; reply: status */
} gpr_channel_message;
GPR_CHECK_SIZE(gpr_channel_message, 16);

/* The channel address of producer (index, generation) of `segment`. */
GPR_INLINE socklen_t gpr_channel_address(const char *segment, uint32_t index, uint32_t gen, struct sockaddr_un *addr) {
  memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  int n = snprintf(addr->sun_path + 1, sizeof addr->sun_path - 1, "gpuring.%s.p%ug%u.fd", segment, index, gen);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* SO_PEERCRED's answer, the kernel's struct ucred: glibc declares that one only
 * under _GNU_SOURCE, which a program that included a system header first lacks. */
typedef struct gpr_peer_cred {
  int32_t pid;
  uint32_t uid;
  uint32_t gid;
} gpr_peer_cred;

/* The peer's credentials, or -1. */
GPR_INLINE int gpr_channel_peer(int fd, gpr_peer_cred *cred) {
  socklen_t len = sizeof *cred;
  return getsockopt(fd, SOL_SOCKET, SO_PEERCRED, cred, &len);
}

GPR_INLINE void gpr_channel_set_timeout(int fd) {
  struct timeval tv = {GPR_CHANNEL_TIMEOUT_MS / 1000, (GPR_CHANNEL_TIMEOUT_MS % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

/* ---- consumer side ------------------------------------------------------ */

/* Takes every descriptor a reply carried into fds[0, max); returns how many
 * arrived, and closes those past `max` (a faulty or hostile peer may send
 * more than it announced), so none leaks. */
GPR_INLINE uint32_t gpr_channel_take_fds(struct msghdr *msg, int *fds, uint32_t max) {
  uint32_t n = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; i++, n++) {
      int fd;
      memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (n < max) fds[n] = fd;
      else close(fd);
    }
  }
  return n;
}

/* Asks producer (index, gen) of `segment` for the descriptors of (kind,
 * id): at most `max` (GPR_CHANNEL_MAX_FDS at most); on success fds[0, *count)
 * are new descriptors the caller owns and, for kind 4, sizes[0, *count) the
 * chunk sizes. Fails with DESCRIPTOR_UNAVAILABLE when the producer cannot be
 * reached (it exited, or never published such memory), is not this user's,
 * does not answer within GPR_CHANNEL_TIMEOUT_MS, does not know the id, or
 * sends other than it announced. */
GPR_INLINE int gpr_channel_fetch_many(const char *segment, uint32_t index, uint32_t gen, uint16_t kind, uint64_t id,
                                      int *fds, uint64_t *sizes, uint32_t max, uint32_t *count, gpr_error *err) {
  struct sockaddr_un addr;
  socklen_t len = gpr_channel_address(segment, index, gen, &addr);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return gpr_fail(err, GPR_E_SYSTEM, errno, "socket(AF_UNIX)");
  gpr_channel_set_timeout(fd);
  if (max > GPR_CHANNEL_MAX_FDS) max = GPR_CHANNEL_MAX_FDS;
  const char *why = NULL;
  gpr_peer_cred cred;
  gpr_channel_message req = {GPR_CHANNEL_MAGIC, kind, 0, id};
  uint8_t reply[sizeof req + GPR_CHANNEL_MAX_FDS * sizeof(uint64_t)];
  char control[CMSG_SPACE(GPR_CHANNEL_MAX_FDS * sizeof(int))];
  struct iovec iov = {reply, sizeof reply};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t got = -1;
  gpr_channel_message rep = {0, 0, 0, 0};
  if (connect(fd, (struct sockaddr *)&addr, len) != 0) why = "the producer's descriptor channel is not there (the producer exited)";
  else if (gpr_channel_peer(fd, &cred) != 0 || cred.uid != geteuid()) why = "the descriptor channel belongs to another user";
  else if (send(fd, &req, sizeof req, MSG_NOSIGNAL) != (ssize_t)sizeof req) why = "the request could not be sent";
  else if ((got = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC)) < (ssize_t)sizeof rep) why = "the producer did not answer";
  if (got >= (ssize_t)sizeof rep) memcpy(&rep, reply, sizeof rep);
  *count = gpr_channel_take_fds(&msg, fds, max);
  size_t size_bytes = kind == GPR_MEM_CUDA_VMM ? (size_t)rep.kind * sizeof(uint64_t) : 0;
  if (!why && rep.magic != GPR_CHANNEL_MAGIC) why = "the producer did not answer";
  else if (!why && rep.value != GPR_CHANNEL_FOUND)
    why = rep.value == GPR_CHANNEL_UNKNOWN ? "the producer does not know that id" : "the producer could not send it";
  else if (!why && (rep.kind == 0 || rep.kind > max || *count != rep.kind || (msg.msg_flags & MSG_CTRUNC) ||
                    (size_t)got != sizeof rep + size_bytes || (kind != GPR_MEM_CUDA_VMM && rep.kind != 1)))
    why = "the reply did not carry what it announced";
  if (!why && size_bytes) memcpy(sizes, reply + sizeof rep, size_bytes);
  close(fd);
  if (!why) return 0;
  for (uint32_t i = 0; i < *count && i < max; i++) close(fds[i]), fds[i] = -1;
  *count = 0;
  char where[96];
  snprintf(where, sizeof where, "%s.p%ug%u", segment, index, gen);
  return gpr_fail(err, GPR_E_DESCRIPTOR_UNAVAILABLE, 0, "%s: %s", where, why);
}

/* gpr_channel_fetch_many() of kind 3's one descriptor (a pool's), into *out. */
GPR_INLINE int gpr_channel_fetch(const char *segment, uint32_t index, uint32_t gen, uint16_t kind, uint64_t id, int *out,
                                 gpr_error *err) {
  uint32_t count = 0;
  *out = -1;
  return gpr_channel_fetch_many(segment, index, gen, kind, id, out, NULL, 1, &count, err);
}

/* ---- producer side ------------------------------------------------------ */

/* Finds the descriptors to send for (kind, id), without handing them over
 * (the channel sends duplicates): fills `fds` and, for kind 4, each chunk's
 * size in `sizes` (both GPR_CHANNEL_MAX_FDS long); returns how many, or 0 when
 * the id is unknown. */
typedef uint32_t (*gpr_channel_lookup)(void *ctx, uint16_t kind, uint64_t id, int *fds, uint64_t *sizes);

/* Whether `pid` is attached to the segment (an ACTIVE entry's process). */
GPR_INLINE int gpr_channel_attached(const gpr_segment *seg, pid_t pid) {
  for (uint32_t i = 0; i < seg->participant_capacity; i++) {
    const gpr_participant *p = &seg->participants[i];
    if ((__atomic_load_n(&p->state, __ATOMIC_ACQUIRE) & 7u) == GPR_PARTICIPANT_ACTIVE &&
        (pid_t)__atomic_load_n(&p->pid, __ATOMIC_RELAXED) == pid)
      return 1;
  }
  return 0;
}

/* Opens producer `index`'s channel for listening; returns the socket or -1. */
GPR_INLINE int gpr_channel_listen(const gpr_segment *seg, uint32_t index, uint32_t gen, gpr_error *err) {
  struct sockaddr_un addr;
  socklen_t len = gpr_channel_address(seg->name, index, gen, &addr);
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return gpr_fail(err, GPR_E_SYSTEM, errno, "socket(AF_UNIX)");
  if (bind(fd, (struct sockaddr *)&addr, len) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return gpr_fail(err, GPR_E_SYSTEM, e, "bind/listen on the descriptor channel of %s.p%ug%u", seg->name, index, gen);
  }
  return fd;
}

/* Sends a reply with `status` and `count` (at most GPR_CHANNEL_MAX_FDS)
 * descriptors, followed by `count` chunk sizes when `sizes` is given (kind
 * 4); returns sendmsg's result. */
GPR_INLINE ssize_t gpr_channel_reply(int conn, uint64_t status, const int *fds, uint32_t count, const uint64_t *sizes) {
  gpr_channel_message rep = {GPR_CHANNEL_MAGIC, (uint16_t)count, 0, status};
  char control[CMSG_SPACE(GPR_CHANNEL_MAX_FDS * sizeof(int))];
  memset(control, 0, sizeof control);
  struct iovec iov[2] = {{&rep, sizeof rep}, {(void *)sizes, sizes ? count * sizeof(uint64_t) : 0}};
  struct msghdr msg;
  memset(&msg, 0, sizeof msg);
  msg.msg_iov = iov;
  msg.msg_iovlen = sizes ? 2 : 1;
  if (count > 0 && count <= GPR_CHANNEL_MAX_FDS) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(count * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(count * sizeof(int));
    memcpy(CMSG_DATA(c), fds, count * sizeof(int));
  }
  return sendmsg(conn, &msg, MSG_NOSIGNAL);
}

/* Held while a lookup's descriptors are sent: whoever closes descriptors that
 * a lookup may return takes it first (gpr_cuda_vmm_free), so that no
 * descriptor is closed, or its number reused, between lookup and sendmsg. */
GPR_INLINE pthread_mutex_t *gpr_channel_sending(void) {
  static pthread_mutex_t sending = PTHREAD_MUTEX_INITIALIZER;
  return &sending;
}

/* Answers one connection: checks the peer, reads its request, replies. */
GPR_INLINE void gpr_channel_answer(const gpr_segment *seg, int conn, gpr_channel_lookup lookup, void *ctx) {
  gpr_peer_cred cred;
  gpr_channel_message req;
  gpr_channel_set_timeout(conn);
  if (gpr_channel_peer(conn, &cred) != 0 || cred.uid != geteuid() || !gpr_channel_attached(seg, cred.pid)) return;
  if (recv(conn, &req, sizeof req, 0) != (ssize_t)sizeof req || req.magic != GPR_CHANNEL_MAGIC) return;
  int fds[GPR_CHANNEL_MAX_FDS];
  uint64_t sizes[GPR_CHANNEL_MAX_FDS];
  pthread_mutex_lock(gpr_channel_sending());
  uint32_t count = lookup(ctx, req.kind, req.value, fds, sizes);
  if (count == 0 || count > GPR_CHANNEL_MAX_FDS) gpr_channel_reply(conn, GPR_CHANNEL_UNKNOWN, NULL, 0, NULL);
  else if (gpr_channel_reply(conn, GPR_CHANNEL_FOUND, fds, count, req.kind == GPR_MEM_CUDA_VMM ? sizes : NULL) < 0)
    gpr_channel_reply(conn, GPR_CHANNEL_UNSENDABLE, NULL, 0, NULL);
  pthread_mutex_unlock(gpr_channel_sending());
}

/* Serves the channel until `listener` is shut down (shutdown(SHUT_RDWR) from
 * another thread ends the wait), one connection at a time: a request is a
 * few microseconds, and each consumer asks once per pool. */
GPR_INLINE void gpr_channel_serve(const gpr_segment *seg, int listener, gpr_channel_lookup lookup, void *ctx) {
  for (;;) {
    int conn = (int)syscall(SYS_accept4, listener, NULL, NULL, SOCK_CLOEXEC); /* accept4() needs _GNU_SOURCE */
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    gpr_channel_answer(seg, conn, lookup, ctx);
    close(conn);
  }
}
