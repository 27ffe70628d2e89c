/* Segment creation, validation of foreign/damaged segments, participants. */
#include "gpuring.h"
#include "check.h"
#include <sys/resource.h>
#include <sys/wait.h>

static char name[32];

static uint64_t fnv1a(const char *s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
  return h;
}

/* Rewrites one field of the shared header and expects open to fail with `code`. */
static void expect_open_fails_after(size_t off, const void *bytes, size_t n, gpr_code code) {
  gpr_segment seg, other;
  gpr_error err;
  CHECK(gpr_segment_create(&seg, name, NULL, &err) == 0);
  memcpy(seg.base + off, bytes, n);
  gpr_segment_options o = {0, 0, 0, 50, 0, GPR_DELIVERY_EACH};
  CHECK_CODE(gpr_segment_open(&other, name, &o, &err), code);
  CHECK(err.code == code);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

static void test_create_open(void) {
  gpr_segment seg, other;
  gpr_error err;
  gpr_segment_options o = {8, 4, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  CHECK(seg.slot_count == 8);
  CHECK_CODE(gpr_segment_create(&other, name, &o, &err), GPR_E_SEGMENT_EXISTS);
  CHECK(gpr_segment_open(&other, name, NULL, &err) == 0);
  CHECK(other.slot_count == 8 && other.participant_capacity == 4);
  uint32_t idx[5], gen[5];
  for (int i = 0; i < 4; i++) CHECK(gpr_participant_attach(&other, GPR_ROLE_CONSUMER, &idx[i], &gen[i], &err) == 0);
  CHECK_CODE(gpr_participant_attach(&other, GPR_ROLE_CONSUMER, &idx[4], &gen[4], &err), GPR_E_PARTICIPANTS_FULL);
  CHECK(gpr_participant_alive(&seg, idx[0]));
  CHECK(gpr_participant_detach(&other, idx[0], gen[0], &err) == 0);
  CHECK(gpr_pstate(gpr_participant_word(&seg, idx[0])) == GPR_PARTICIPANT_FREE);
  CHECK(gpr_participant_attach(&other, GPR_ROLE_CONSUMER, &idx[4], &gen[4], &err) == 0);
  CHECK(idx[4] == idx[0] && gen[4] == gen[0] + 1);
  gpr_segment_close(&other);
  gpr_segment_close(&seg);
  CHECK(gpr_segment_unlink(name, &err) == 0);
  CHECK_CODE(gpr_segment_unlink(name, &err), GPR_E_SEGMENT_NOT_FOUND);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, &err), GPR_E_SEGMENT_NOT_FOUND);
  CHECK_CODE(gpr_segment_create(&seg, "bad/name", NULL, &err), GPR_E_INVALID_ARGUMENT);
  gpr_segment_options bad = {3, 0, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK_CODE(gpr_segment_create(&seg, name, &bad, &err), GPR_E_INVALID_ARGUMENT);
}

static void test_damaged(void) {
  uint32_t v = (GPR_VERSION_MAJOR + 1u) << 16;
  uint64_t junk = 0x1234;
  uint32_t slots = 3;
  expect_open_fails_after(0, "NOTARING", 8, GPR_E_SEGMENT_FOREIGN);
  expect_open_fails_after(8, &v, 4, GPR_E_SEGMENT_VERSION);
  expect_open_fails_after(16, &junk, 8, GPR_E_SEGMENT_LAYOUT);
  expect_open_fails_after(32, &slots, 4, GPR_E_SEGMENT_LAYOUT);
  expect_open_fails_after(72, &junk, 8, GPR_E_PID_NAMESPACE);
  uint32_t zero = 0;
  expect_open_fails_after(8, &zero, 4, GPR_E_SEGMENT_NOT_READY);

  gpr_segment seg, other;
  gpr_error err;
  char shm[GPR_SHM_NAME_MAX];
  CHECK(gpr_segment_create(&seg, name, NULL, &err) == 0);
  CHECK(ftruncate(seg.fd, 4096) == 0);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, &err), GPR_E_SEGMENT_TRUNCATED);
  CHECK(ftruncate(seg.fd, 100) == 0);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, &err), GPR_E_SEGMENT_TRUNCATED);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);

  /* A foreign file of random bytes under the segment's name. */
  gpr_segment_shm_name(name, shm);
  int fd = shm_open(shm, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  CHECK(write(fd, "hello, not a ring at all", 24) == 24);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, &err), GPR_E_SEGMENT_FOREIGN);
  CHECK(ftruncate(fd, 0) == 0);
  gpr_segment_options o = {0, 0, 0, 30, 0, GPR_DELIVERY_EACH};
  CHECK_CODE(gpr_segment_open(&other, name, &o, &err), GPR_E_SEGMENT_NOT_READY);
  close(fd);
  shm_unlink(shm);
}

static void test_process_identity(void) {
  uint64_t st = gpr_self_start_time();
  CHECK(st > 0);
  CHECK(gpr_process_alive((uint32_t)getpid(), st));
  CHECK(!gpr_process_alive((uint32_t)getpid(), st + 1));
  pid_t child = fork();
  if (child == 0) _exit(0);
  char s;
  uint64_t cst = 0;
  usleep(50000);
  gpr_proc_stat((uint32_t)child, &s, &cst);
  CHECK(!gpr_process_alive((uint32_t)child, cst)); /* a zombie is dead */
  waitpid(child, NULL, 0);
}

/* Fills the descriptor table (soft limit lowered to 64), so that the next
 * open() fails with EMFILE; returns how many it opened into fds. */
static int exhaust_descriptors(int *fds, int max, struct rlimit *saved) {
  CHECK(getrlimit(RLIMIT_NOFILE, saved) == 0);
  struct rlimit low = {64, saved->rlim_max};
  CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
  int n = 0;
  while (n < max && (fds[n] = open("/dev/null", O_RDONLY)) >= 0) n++;
  CHECK(n < max && errno == EMFILE);
  return n;
}

static void restore_descriptors(int *fds, int n, const struct rlimit *saved) {
  while (n > 0) close(fds[--n]);
  CHECK(setrlimit(RLIMIT_NOFILE, saved) == 0);
}

/* A sweeper that cannot read /proc (here: at its descriptor limit) cannot tell
 * a live peer from a dead one, and must not free it. Before, any failed open
 * of /proc/PID/stat meant "dead": the sweep freed a live consumer's entry. */
static void test_sweep_at_descriptor_limit(void) {
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {8, 4, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t child = fork();
  if (child == 0) {
    gpr_segment mine;
    uint32_t idx, g;
    if (gpr_segment_join(&mine, name, 1000, GPR_ROLE_CONSUMER, &idx, &g, &err) != 0) _exit(1);
    if (write(ready[1], "a", 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  char byte;
  CHECK(read(ready[0], &byte, 1) == 1);
  int fds[128], n;
  struct rlimit saved;
  n = exhaust_descriptors(fds, 128, &saved);
  char state;
  uint64_t started;
  CHECK(gpr_proc_stat((uint32_t)child, &state, &started) == GPR_PROC_UNKNOWN);
  CHECK(gpr_participant_alive(&seg, 0));
  gpr_sweep_report rep;
  CHECK(gpr_sweep(&seg, &rep, &err) == 0);
  CHECK(rep.found_dead == 0);
  CHECK(gpr_pstate(gpr_participant_word(&seg, 0)) == GPR_PARTICIPANT_ACTIVE);
  restore_descriptors(fds, n, &saved);
  kill(child, SIGKILL);
  waitpid(child, NULL, 0);
  CHECK(gpr_proc_stat((uint32_t)child, &state, &started) == GPR_PROC_GONE);
  CHECK(gpr_sweep(&seg, &rep, &err) == 0);
  CHECK(rep.found_dead == 1);
  close(ready[0]);
  close(ready[1]);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

/* A process that cannot read its own start time must not attach: recorded
 * wrong, it would be judged dead, and swept, while it runs. */
static void test_attach_without_start_time(void) {
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {8, 4, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  pid_t child = fork();
  if (child == 0) {
    /* A forked child has its own start time: the parent's cached one is not it. */
    int fds[128], n;
    struct rlimit saved;
    uint32_t idx, g;
    n = exhaust_descriptors(fds, 128, &saved);
    int rc = gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &idx, &g, &err);
    restore_descriptors(fds, n, &saved);
    _exit(rc == -(int)GPR_E_SYSTEM && err.code == GPR_E_SYSTEM && err.sys_errno == EMFILE ? 0 : 1);
  }
  int status;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  for (uint32_t i = 0; i < 4; i++) CHECK(gpr_pstate(gpr_participant_word(&seg, i)) == GPR_PARTICIPANT_FREE);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

static uint32_t dead_pid(void) {
  pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0);
  return (uint32_t)child;
}

/* A process killed while attaching or while freeing an entry leaves a
 * transient state that names it; a sweep must finish the job instead of
 * leaving the entry taken forever (every open then failed PARTICIPANTS_FULL). */
static void test_orphaned_transients(void) {
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {8, 4, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  uint32_t gone = dead_pid();
  seg.participants[0].state = gpr_pword(5, gone, GPR_PARTICIPANT_ATTACHING);
  seg.participants[1].state = gpr_pword(7, gone, GPR_PARTICIPANT_FREEING);
  seg.participants[1].pid = 4242;
  seg.participants[2].state = gpr_pword(3, 0, 6); /* a damaged state: lost for good before */
  /* ACTIVE with pid bits, naming a live process: damage, though the entry's
   * pid and start time pass for alive. Before, it stayed taken while we ran. */
  seg.participants[3].state = gpr_pword(9, (uint32_t)getpid(), GPR_PARTICIPANT_ACTIVE);
  seg.participants[3].pid = (uint32_t)getpid();
  seg.participants[3].start_time = gpr_self_start_time();
  uint32_t index, gen;
  CHECK_CODE(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &index, &gen, &err), GPR_E_PARTICIPANTS_FULL);
  gpr_sweep_report rep;
  CHECK(gpr_sweep(&seg, &rep, &err) == 0);
  CHECK(rep.found_dead == 3 && rep.freed == 4);
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &index, &gen, &err) == 0 && index == 0 && gen == 6);
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &index, &gen, &err) == 0 && index == 1 && gen == 8);
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &index, &gen, &err) == 0 && index == 2 && gen == 4);
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &index, &gen, &err) == 0 && index == 3 && gen == 10);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

/* Two sweepers freeing one entry: the one that loses the DEAD -> FREEING race
 * must leave the entry alone. Before, it zeroed the pid of whoever had
 * attached meanwhile, and the next sweep freed that live participant. */
static void test_one_freer(void) {
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {8, 1, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  uint32_t index, gen;
  CHECK(gpr_participant_attach(&seg, GPR_ROLE_PRODUCER, &index, &gen, &err) == 0);
  uint64_t marked = gpr_pword(gen, 0, GPR_PARTICIPANT_DEAD); /* what the late sweeper saw */
  /* Another (live) sweeper has won the entry and is freeing it. */
  seg.participants[0].state = gpr_pword(gen, (uint32_t)getppid(), GPR_PARTICIPANT_FREEING);
  CHECK(gpr_sweep_free(&seg, 0, marked) == 0);
  CHECK(seg.participants[0].pid == (uint32_t)getpid());
  /* It finished, and a new process attached: a late sweeper finds nothing to free. */
  seg.participants[0].state = gpr_pword(gen + 1, 0, GPR_PARTICIPANT_ACTIVE);
  CHECK(gpr_sweep_free(&seg, 0, marked) == 0);
  CHECK(seg.participants[0].pid == (uint32_t)getpid());
  /* And died: DEAD again, but its slots were not the ones the late sweeper counted. */
  seg.participants[0].state = gpr_pword(gen + 1, 0, GPR_PARTICIPANT_DEAD);
  CHECK(gpr_sweep_free(&seg, 0, marked) == 0);
  CHECK(seg.participants[0].pid == (uint32_t)getpid());
  seg.participants[0].state = gpr_pword(gen + 1, 0, GPR_PARTICIPANT_ACTIVE);
  CHECK(gpr_participant_alive(&seg, 0));
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

/* A sweep checks a window of slots for damage, round robin: its cost does not
 * grow with the ring, and damage anywhere is repaired within a lap of sweeps. */
static void test_damage_found_by_window(void) {
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {1u << 14, 2, 0600, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  seg.slots[10000].word = 0xDEADBEEFDEADBEEFull;
  uint32_t repaired = 0;
  for (uint32_t i = 0; i < (1u << 14) / GPR_SWEEP_DAMAGE_WINDOW; i++) {
    gpr_sweep_report rep;
    CHECK(gpr_sweep(&seg, &rep, &err) == 0);
    repaired += rep.corrupt;
  }
  CHECK(repaired == 1);
  CHECK(gpr_word_seq(seg.slots[10000].word) == 10000 && gpr_word_state(seg.slots[10000].word) == GPR_SLOT_EMPTY);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

/* Squatting: a segment someone else created first is refused unless the
 * opener trusts its owner (needs root to make one owned by another user). */
static void test_foreign_owner(void) {
  if (geteuid() != 0) return;
  gpr_segment seg, other;
  gpr_error err;
  CHECK(gpr_segment_create(&seg, name, NULL, &err) == 0);
  CHECK(fchown(seg.fd, 65534, 65534) == 0);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, &err), GPR_E_SEGMENT_OWNER);
  gpr_segment_options trust = {0, 0, 0, 0, GPR_OPEN_ANY_OWNER, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_open(&other, name, &trust, &err) == 0);
  gpr_segment_close(&other);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
}

/* Unlink removes the ring's bridge origin logs too (SPEC §2), and only names of that exact form. */
static void test_unlink_origin_logs(void) {
  const char *hex = "0123456789abcdef0123456789abcdef";
  char log[128], near[3][128];
  snprintf(log, sizeof log, "/gpuring.%s.origins.%s", name, hex);
  snprintf(near[0], sizeof near[0], "/gpuring.%s.origins.%.31s", name, hex);  /* 31 digits */
  snprintf(near[1], sizeof near[1], "/gpuring.%s.origins.%sX", name, hex);    /* trailing byte */
  snprintf(near[2], sizeof near[2], "/gpuring.%s.origins.0123456789ABCDEF0123456789abcdef", name);
  const char *all[4] = {log, near[0], near[1], near[2]};
  for (int i = 0; i < 4; i++) {
    int fd = shm_open(all[i], O_CREAT | O_RDWR, 0600);
    CHECK(fd >= 0);
    close(fd);
  }
  gpr_segment seg;
  gpr_error err;
  CHECK(gpr_segment_create(&seg, name, NULL, &err) == 0);
  gpr_segment_close(&seg);
  CHECK(gpr_segment_unlink(name, &err) == 0);
  CHECK(shm_unlink(log) != 0 && errno == ENOENT);
  for (int i = 0; i < 3; i++) CHECK(shm_unlink(near[i]) == 0);
}

/* A creator killed at any moment of its create leaves no segment under the
 * name, or a ready one (SPEC.md §3.1): never one that openers wait on and then
 * refuse (SEGMENT_NOT_READY) until someone removes it. The ring is large so
 * that its create takes a while; the kills land anywhere in it. */
static void test_creator_killed_midway(void) {
  gpr_segment_options big = {1u << 16, 1024, 0600, 0, 0, GPR_DELIVERY_EACH};
  gpr_segment seg;
  gpr_error err;
  uint64_t t0 = gpr_monotonic_ns();
  CHECK(gpr_segment_create(&seg, name, &big, &err) == 0);
  uint64_t create_us = (gpr_monotonic_ns() - t0) / 1000 + 1;
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
  gpr_segment_options quick = {0, 0, 0, 1, 0, GPR_DELIVERY_EACH};
  int ready = 0, absent = 0;
  srand((unsigned)getpid());
  for (int i = 0; i < 150; i++) {
    int go[2];
    CHECK(pipe(go) == 0);
    pid_t pid = fork();
    if (pid == 0) {
      char c;
      if (read(go[0], &c, 1) != 1) _exit(2);
      _exit(gpr_segment_create(&seg, name, &big, &err) == 0 ? 0 : 1);
    }
    CHECK(write(go[1], "g", 1) == 1);
    usleep((useconds_t)(rand() % (int)(2 * create_us + 200)));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    close(go[0]);
    close(go[1]);
    int rc = gpr_segment_open(&seg, name, &quick, &err);
    CHECK(rc == 0 || rc == -(int)GPR_E_SEGMENT_NOT_FOUND);
    if (rc == 0) gpr_segment_close(&seg);
    ready += rc == 0;
    absent += rc != 0;
    gpr_segment_unlink(name, NULL);
  }
  printf("creator killed 150 times (create %llu us): %d left a ready segment, %d none\n",
         (unsigned long long)create_us, ready, absent);
}

/* Every call takes a NULL error: a failure is then only its return code. */
static void test_null_error(void) {
  gpr_segment seg, other;
  gpr_error err;
  CHECK(gpr_segment_create(&seg, name, NULL, &err) == 0);
  CHECK_CODE(gpr_segment_create(&other, name, NULL, NULL), GPR_E_SEGMENT_EXISTS);
  memcpy(seg.base, "NOTGPRNG", 8);
  CHECK_CODE(gpr_segment_open(&other, name, NULL, NULL), GPR_E_SEGMENT_FOREIGN);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, NULL);
}

int main(void) {
  snprintf(name, sizeof name, "ctest-seg-%d", (int)getpid());
  CHECK(fnv1a(GPR_LAYOUT_STRING) == GPR_LAYOUT_HASH);
  CHECK(fnv1a(GPR_LAYOUT_STRING_BROADCAST) == GPR_LAYOUT_HASH_BROADCAST);
  test_create_open();
  test_damaged();
  test_process_identity();
  test_orphaned_transients();
  test_sweep_at_descriptor_limit();
  test_attach_without_start_time();
  test_one_freer();
  test_damage_found_by_window();
  test_foreign_owner();
  test_unlink_origin_logs();
  test_creator_killed_midway();
  test_null_error();
  return CHECK_DONE();
}
