/* Ring semantics in one process: order, full/empty, wrap-around, leases,
 * reaping, hand-back and recovery of a dead participant's slots. */
#include "gpuring.h"
#include "check.h"
#include <sys/wait.h>

static gpr_frame_ref ref_for(uint32_t producer, uint32_t gen, uint64_t id) {
  gpr_frame_ref r;
  memset(&r, 0, sizeof r);
  r.frame_id = id;
  r.producer = producer;
  r.producer_gen = gen;
  return r;
}

static void test_fifo_and_wrap(gpr_segment *seg, uint32_t p, uint32_t pg, uint32_t c) {
  gpr_frame_ref out;
  uint64_t pos[8], cpos;
  for (int lap = 0; lap < 5; lap++) {
    for (uint64_t i = 0; i < 4; i++) {
      gpr_frame_ref r = ref_for(p, pg, lap * 10 + i);
      CHECK(gpr_ring_try_publish(seg, p, &r, &pos[i]) == 0);
    }
    gpr_frame_ref extra = ref_for(p, pg, 99);
    CHECK_CODE(gpr_ring_try_publish(seg, p, &extra, NULL), GPR_E_RING_FULL);
    for (uint64_t i = 0; i < 4; i++) {
      CHECK(gpr_ring_try_claim(seg, c, &out, &cpos) == 0);
      CHECK(out.frame_id == (uint64_t)lap * 10 + i && cpos == pos[i]);
      CHECK(gpr_ring_confirm(seg, c, cpos) == 0);
      CHECK(gpr_ring_reap(seg, p, cpos) == 0); /* still leased */
      CHECK(gpr_ring_release(seg, c, cpos) == 0);
      CHECK_CODE(gpr_ring_release(seg, c, cpos), GPR_E_FRAME_STATE); /* twice is refused */
    }
    CHECK_CODE(gpr_ring_try_claim(seg, c, &out, &cpos), GPR_E_RING_EMPTY);
    /* Released but not yet reaped: the ring is still full for producers. */
    gpr_frame_ref r = ref_for(p, pg, 77);
    CHECK_CODE(gpr_ring_try_publish(seg, p, &r, NULL), GPR_E_RING_FULL);
    for (uint64_t i = 0; i < 4; i++) CHECK(gpr_ring_reap(seg, p, pos[i]) == 1);
  }
}

static void test_unclaim_redelivers(gpr_segment *seg, uint32_t p, uint32_t pg, uint32_t c) {
  gpr_frame_ref out, r1 = ref_for(p, pg, 1), r2 = ref_for(p, pg, 2);
  uint64_t p1, p2, got;
  CHECK(gpr_ring_try_publish(seg, p, &r1, &p1) == 0);
  CHECK(gpr_ring_try_publish(seg, p, &r2, &p2) == 0);
  CHECK(gpr_ring_try_claim(seg, c, &out, &got) == 0 && out.frame_id == 1);
  CHECK(gpr_ring_try_claim(seg, c, &out, &got) == 0 && out.frame_id == 2);
  CHECK(gpr_ring_unclaim(seg, c, p1) == 0);
  CHECK(gpr_ring_try_claim(seg, c, &out, &got) == 0 && out.frame_id == 1 && got == p1);
  CHECK_CODE(gpr_ring_try_claim(seg, c, &out, &got), GPR_E_RING_EMPTY);
  CHECK(gpr_ring_confirm(seg, c, p1) == 0 && gpr_ring_release(seg, c, p1) == 0);
  CHECK(gpr_ring_confirm(seg, c, p2) == 0 && gpr_ring_release(seg, c, p2) == 0);
  CHECK(gpr_ring_reap(seg, p, p1) == 1 && gpr_ring_reap(seg, p, p2) == 1);
}

/* A forked child attaches, takes slots in every state, and is killed. */
static void test_dead_participant(gpr_segment *seg, uint32_t p, uint32_t pg, uint32_t c) {
  gpr_frame_ref r, out;
  uint64_t pos, published[2];
  for (uint64_t i = 0; i < 2; i++) {
    r = ref_for(p, pg, 100 + i);
    CHECK(gpr_ring_try_publish(seg, p, &r, &published[i]) == 0);
  }
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    gpr_error e;
    uint32_t me, g;
    (void)g;
    uint64_t a, b;
    gpr_participant_attach(seg, GPR_ROLE_CONSUMER | GPR_ROLE_PRODUCER, &me, &g, &e);
    gpr_ring_try_claim(seg, me, &out, &a);           /* 100: CLAIMED, never handed over */
    gpr_ring_try_claim(seg, me, &out, &b);           /* 101: LEASED */
    gpr_ring_confirm(seg, me, b);
    /* Claim a slot for writing by hand and never publish it. */
    uint64_t tpos = __atomic_load_n(&seg->control->tail, __ATOMIC_RELAXED);
    gpr_slot *s = gpr_slot_at(seg, tpos);
    gpr_slot_cas(s, gpr_slot_word(tpos, GPR_SLOT_EMPTY, 0), gpr_slot_word(tpos, GPR_SLOT_WRITING, me + 1));
    if (write(ready[1], "x", 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char x;
  CHECK(read(ready[0], &x, 1) == 1);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  gpr_sweep_report rep;
  gpr_error err;
  CHECK(gpr_sweep(seg, &rep, &err) == 0);
  CHECK(rep.found_dead == 1 && rep.redelivered == 1 && rep.released == 1 && rep.skipped == 1);
  CHECK(rep.freed == 1);
  /* 100 comes back; 101 was released for the dead consumer; the writing slot was skipped. */
  CHECK(gpr_ring_try_claim(seg, c, &out, &pos) == 0 && out.frame_id == 100);
  CHECK(gpr_ring_confirm(seg, c, pos) == 0 && gpr_ring_release(seg, c, pos) == 0);
  CHECK_CODE(gpr_ring_try_claim(seg, c, &out, &pos), GPR_E_RING_EMPTY);
  r = ref_for(p, pg, 200);
  CHECK(gpr_ring_try_publish(seg, p, &r, &pos) == 0);
  CHECK(gpr_ring_try_claim(seg, c, &out, &pos) == 0 && out.frame_id == 200);
  CHECK(gpr_ring_confirm(seg, c, pos) == 0 && gpr_ring_release(seg, c, pos) == 0);
  CHECK(gpr_ring_reap(seg, p, pos) == 1);
  CHECK(gpr_ring_reap(seg, p, published[0]) == 1 && gpr_ring_reap(seg, p, published[1]) == 1);
  close(ready[0]);
  close(ready[1]);
}

/* Garbage in slot words is repaired by a sweep and the ring goes on. */
static void test_corrupt_words(gpr_segment *seg, uint32_t p, uint32_t pg, uint32_t c) {
  gpr_frame_ref r, out;
  uint64_t pos;
  seg->slots[1].word = 0xDEADBEEFDEADBEEFull;
  seg->slots[2].word = gpr_slot_word(seg->slots[2].word >> 16, 7, 0); /* no such state */
  gpr_sweep_report rep;
  gpr_error err;
  CHECK(gpr_sweep(seg, &rep, &err) == 0 && rep.corrupt == 2);
  for (uint64_t i = 0; i < 3 * seg->slot_count; i++) {
    r = ref_for(p, pg, 1000 + i);
    CHECK(gpr_ring_try_publish(seg, p, &r, &pos) == 0);
    CHECK(gpr_ring_try_claim(seg, c, &out, &pos) == 0 && out.frame_id == 1000 + i);
    CHECK(gpr_ring_confirm(seg, c, pos) == 0 && gpr_ring_release(seg, c, pos) == 0);
    CHECK(gpr_ring_reap(seg, p, pos) == 1);
  }
}

/* One write to a shared hint or to the redeliver word used to make the
 * "non-blocking" calls scan up to 2^47 positions (tryNext, publish and close
 * hung). Now every scan is bounded, and hints no slot can match are ignored:
 * the ring goes on delivering in order. */
static void test_hostile_hints(gpr_segment *seg, uint32_t p, uint32_t pg, uint32_t c) {
  gpr_frame_ref r, out;
  uint64_t pos;
  gpr_control *ctl = seg->control;
  uint64_t head = ctl->head;
  ctl->redeliver = (1ull << 16) | 1u;     /* "redelivered frames from position 1" */
  ctl->head = head + (1ull << 46);        /* far past every slot */
  ctl->tail = ctl->tail + (1ull << 46);
  CHECK_CODE(gpr_ring_try_claim(seg, c, &out, &pos), GPR_E_RING_EMPTY);
  for (uint64_t i = 0; i < 2 * seg->slot_count; i++) {
    r = ref_for(p, pg, 5000 + i);
    CHECK(gpr_ring_try_publish(seg, p, &r, &pos) == 0);
    CHECK(gpr_ring_try_claim(seg, c, &out, &pos) == 0 && out.frame_id == 5000 + i);
    CHECK(gpr_ring_confirm(seg, c, pos) == 0 && gpr_ring_release(seg, c, pos) == 0);
    CHECK(gpr_ring_reap(seg, p, pos) == 1);
  }
}

/* Datagrams waiting on each of `n` sockets: which sleepers were rung. */
static int rung(const int *fds, int n, int *got) {
  int count = 0;
  char b[16];
  for (int i = 0; i < n; i++) got[i] = fds[i] >= 0 && recv(fds[i], b, sizeof b, MSG_DONTWAIT) > 0, count += got[i];
  return count;
}

/* A work-queue ring with a producer and `n` (at most 4) consumers asleep on
 * doorbells (DATA); sleeper 0 is dead: nothing is bound to its name (fds[0]
 * is -1). */
typedef struct bell_ring {
  char name[48];
  gpr_segment seg;
  uint32_t p, pg, idx[4];
  int fds[4], n;
  gpr_frame_ref r; /* a frame of the producer's to publish */
  uint64_t pos;
} bell_ring;

static void bell_ring_open(bell_ring *b, const char *base, const char *suffix, int n, uint32_t mode) {
  gpr_error err;
  uint32_t g;
  snprintf(b->name, sizeof b->name, "%s-%s", base, suffix);
  gpr_segment_options o = {8, 8, mode, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&b->seg, b->name, &o, &err) == 0);
  CHECK(gpr_participant_attach(&b->seg, GPR_ROLE_PRODUCER, &b->p, &b->pg, &err) == 0);
  b->r = ref_for(b->p, b->pg, 1);
  b->n = n;
  for (int i = 0; i < n; i++) {
    CHECK(gpr_participant_attach(&b->seg, GPR_ROLE_CONSUMER, &b->idx[i], &g, &err) == 0);
    uint64_t key = 0x5eed0000u + (uint64_t)i;
    __atomic_store_n(&b->seg.participants[b->idx[i]].doorbell_key, key, __ATOMIC_RELEASE);
    b->fds[i] = -1;
    if (i > 0) {
      struct sockaddr_un addr;
      socklen_t len = gpr_doorbell_address(b->seg.name, key, &addr);
      b->fds[i] = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
      CHECK(b->fds[i] >= 0 && bind(b->fds[i], (struct sockaddr *)&addr, len) == 0);
    }
    gpr_doorbell_arm(&b->seg, b->idx[i], GPR_BELL_DATA);
  }
}

static void bell_ring_close(bell_ring *b) {
  gpr_error err;
  for (int i = 1; i < b->n; i++) close(b->fds[i]);
  gpr_segment_close(&b->seg);
  gpr_segment_unlink(b->name, &err);
}

/* SPEC.md §6.1: a publish rings one doorbell sleeper it can reach, skipping a
 * dead one (no socket bound to its name); hand-backs ring every sleeper. */
static void test_publish_rings_one_sleeper(const char *base) {
  bell_ring b;
  bell_ring_open(&b, base, "bells", 4, 0);
  gpr_segment *seg = &b.seg;
  int got[4];
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 4, got) == 1 && got[1]);
  CHECK(seg->control->data_doorbells == 2);
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 4, got) == 1 && got[2]);
  /* A sleeper whose queue is full already holds a wake-up: it counts as rung. */
  gpr_doorbell_arm(seg, b.idx[1], GPR_BELL_DATA);
  struct sockaddr_un full;
  socklen_t full_len = gpr_doorbell_address(seg->name, 0x5eed0001u, &full);
  int filler = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  while (sendto(filler, "", 1, 0, (struct sockaddr *)&full, full_len) >= 0) {
  }
  CHECK(errno == EAGAIN);
  close(filler);
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(seg->participants[b.idx[1]].doorbell == 0 && (seg->participants[b.idx[3]].doorbell & GPR_BELL_DATA));
  while (rung(b.fds, 4, got) > 0) {
  }
  for (int i = 1; i < 4; i++) gpr_doorbell_arm(seg, b.idx[i], GPR_BELL_DATA);
  gpr_notify_data(seg); /* what a hand-back rings */
  CHECK(rung(b.fds, 4, got) == 3 && seg->control->data_doorbells == 0);
  bell_ring_close(&b);
}

/* SPEC.md §6.1, heads-up: a producer rings one sleeper it can reach before
 * publishing; the publish then rings that sleeper again only if it went back
 * to sleep, and no other. */
static void test_heads_up(const char *base) {
  bell_ring b;
  bell_ring_open(&b, base, "heads", 3, 0);
  gpr_segment *seg = &b.seg;
  int got[3];
  uint32_t to = gpr_doorbell_heads_up(seg);
  CHECK(to == b.idx[1] && rung(b.fds, 3, got) == 1 && got[1]);
  CHECK(gpr_ring_try_publish_rung(seg, b.p, &b.r, &b.pos, to) == 0);
  CHECK(rung(b.fds, 3, got) == 0 && (seg->participants[b.idx[2]].doorbell & GPR_BELL_DATA));
  to = gpr_doorbell_heads_up(seg);
  CHECK(to == b.idx[2] && rung(b.fds, 3, got) == 1 && got[2]);
  gpr_doorbell_arm(seg, b.idx[2], GPR_BELL_DATA); /* it woke too early and sleeps again */
  CHECK(gpr_ring_try_publish_rung(seg, b.p, &b.r, &b.pos, to) == 0);
  CHECK(rung(b.fds, 3, got) == 1 && got[2] && seg->control->data_doorbells == 0);
  CHECK(gpr_doorbell_heads_up(seg) == GPR_RUNG_NOBODY);
  CHECK(gpr_ring_try_publish_rung(seg, b.p, &b.r, &b.pos, GPR_RUNG_NOBODY) == 0 && rung(b.fds, 3, got) == 0);
  bell_ring_close(&b);
}

/* Sleeper i of `b` polls a pipe beside its socket: its entry names read end
 * `fd`, a descriptor of process `pid` (ours, or a child's that inherited it),
 * and that pipe's inode, and it arms with GPR_BELL_PIPE. */
static void name_pipe(bell_ring *b, int i, uint32_t pid, int fd) {
  struct stat st;
  CHECK(fstat(fd, &st) == 0);
  gpr_participant *e = &b->seg.participants[b->idx[i]];
  e->pid = pid;
  e->doorbell_pipe = (uint32_t)fd;
  __atomic_store_n(&e->doorbell_pipe_ino, (uint64_t)st.st_ino, __ATOMIC_RELEASE);
  gpr_doorbell_arm(&b->seg, b->idx[i], GPR_BELL_DATA | GPR_BELL_PIPE);
}

static ssize_t bytes_in(int fd) {
  char buf[64];
  ssize_t n = read(fd, buf, sizeof buf);
  return n > 0 ? n : 0;
}

/* SPEC.md §6.1 (2.5): a sleeper whose entry names its pipe is rung with one
 * byte down the pipe, its socket left quiet. An entry naming anything else
 * (a file, a pipe of another inode) is rung on its socket and the file is
 * never written. A pipe whose reader died reached nobody, so the publish
 * rings the next sleeper, and the SIGPIPE that write raised does not end this
 * process (its default action would). */
static void test_pipe_doorbells(const char *base) {
  bell_ring b;
  bell_ring_open(&b, base, "pipes", 4, 0);
  gpr_segment *seg = &b.seg;
  gpr_participant *e = &seg->participants[b.idx[1]];
  int got[4], mine[2], other[2], kids[2];
  CHECK(pipe2(mine, O_CLOEXEC | O_NONBLOCK) == 0 && pipe2(other, O_CLOEXEC | O_NONBLOCK) == 0);
  for (int round = 0; round < 2; round++) { /* the second ring uses the descriptor the first opened */
    name_pipe(&b, 1, (uint32_t)getpid(), mine[0]);
    CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
    CHECK(bytes_in(mine[0]) == 1 && rung(b.fds, 4, got) == 0);
  }
  char path[] = "/tmp/gpuring-bell-XXXXXX";
  int file = mkstemp(path);
  CHECK(file >= 0 && unlink(path) == 0);
  name_pipe(&b, 1, (uint32_t)getpid(), file);
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  struct stat st;
  CHECK(rung(b.fds, 4, got) == 1 && got[1] && fstat(file, &st) == 0 && st.st_size == 0);
  close(file);
  name_pipe(&b, 1, (uint32_t)getpid(), other[0]);
  e->doorbell_pipe_ino += 1;
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 4, got) == 1 && got[1] && bytes_in(other[0]) == 0);
  /* A child's pipe: rung while the child lives, then after it was killed. */
  CHECK(pipe2(kids, O_CLOEXEC | O_NONBLOCK) == 0);
  pid_t kid = fork();
  if (kid == 0) {
    pause();
    _exit(0);
  }
  name_pipe(&b, 1, (uint32_t)kid, kids[0]);
  close(kids[0]);
  close(kids[1]);
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 4, got) == 0 && (seg->participants[b.idx[2]].doorbell & GPR_BELL_DATA));
  CHECK(kill(kid, SIGKILL) == 0 && waitpid(kid, NULL, 0) == kid);
  gpr_doorbell_arm(seg, b.idx[1], GPR_BELL_DATA | GPR_BELL_PIPE);
  CHECK(gpr_ring_try_publish(seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 4, got) == 1 && got[2]);
  sigset_t pending;
  CHECK(sigpending(&pending) == 0 && !sigismember(&pending, SIGPIPE));
  for (int i = 0; i < 2; i++) close(mine[i]), close(other[i]);
  bell_ring_close(&b);
}

/* SPEC.md §6.1 (2.5): a notifier rings pipes only in a segment that no other
 * user can write; in one its group can write, it rings the socket. */
static void test_pipe_doorbells_only_in_private_segments(const char *base) {
  bell_ring b;
  bell_ring_open(&b, base, "shared", 2, 0660);
  int got[2], ends[2];
  CHECK(pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0);
  name_pipe(&b, 1, (uint32_t)getpid(), ends[0]);
  CHECK(gpr_ring_try_publish(&b.seg, b.p, &b.r, &b.pos) == 0);
  CHECK(rung(b.fds, 2, got) == 1 && got[1] && bytes_in(ends[0]) == 0);
  close(ends[0]);
  close(ends[1]);
  bell_ring_close(&b);
}

/* SPEC.md §6.1: a doorbell is "\0gpuring.NAME.KEY", KEY 16 lowercase hex
 * digits, the length covering the leading NUL and the name, no terminator. */
static void check_address(const char *name, uint64_t key, const char *expected) {
  struct sockaddr_un addr;
  memset(&addr, 0x5a, sizeof addr);
  socklen_t len = gpr_doorbell_address(name, key, &addr);
  size_t n = strlen(expected);
  CHECK(addr.sun_family == AF_UNIX);
  CHECK(len == offsetof(struct sockaddr_un, sun_path) + 1 + n);
  CHECK(addr.sun_path[0] == '\0' && memcmp(addr.sun_path + 1, expected, n) == 0);
}

static void test_doorbell_address(void) {
  check_address("ring", 0x5eed0001u, "gpuring.ring.000000005eed0001");
  check_address("a", UINT64_MAX, "gpuring.a.ffffffffffffffff");
  check_address("abcdefghijklmnopqrstuvwxyz_-0123", 0x0123456789abcdefull,
                "gpuring.abcdefghijklmnopqrstuvwxyz_-0123.0123456789abcdef");
}

int main(void) {
  char name[32];
  snprintf(name, sizeof name, "ctest-ring-%d", (int)getpid());
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {4, 8, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  uint32_t p, pg, c, cg;
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_PRODUCER, &p, &pg, &err) == 0);
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &c, &cg, &err) == 0);
  test_fifo_and_wrap(&seg, p, pg, c);
  test_unclaim_redelivers(&seg, p, pg, c);
  test_dead_participant(&seg, p, pg, c);
  test_corrupt_words(&seg, p, pg, c);
  test_hostile_hints(&seg, p, pg, c);
  test_publish_rings_one_sleeper(name);
  test_heads_up(name);
  test_pipe_doorbells(name);
  test_pipe_doorbells_only_in_private_segments(name);
  test_doorbell_address();
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
  return CHECK_DONE();
}
