/* Stress: P producers x C consumers x N frames each through one ring; every
 * frame must be delivered exactly once. Workers run as forked processes
 * (the real deployment) or as threads ("threads" argument), which is what
 * ThreadSanitizer can observe.  Usage: stress [procs|threads] [P C N] */
#include "gpuring.h"
#include "check.h"
#include <pthread.h>
#include <sys/wait.h>

typedef struct shared_state {
  uint32_t consumed;     /* frames consumed so far, all consumers */
  uint32_t total;
  uint32_t seen[];       /* per frame id: how often it was delivered */
} shared_state;

typedef struct worker {
  const char *name;
  int producer;
  uint32_t id;
  uint32_t frames;
  shared_state *st;
} worker;

typedef struct attempt_ctx {
  gpr_segment *seg;
  uint32_t me;
  gpr_frame_ref ref;
  uint64_t pos;
  uint64_t *inflight;    /* producer: positions not yet reaped */
  uint32_t inflight_count;
} attempt_ctx;

static void reap_all(attempt_ctx *a) {
  uint32_t kept = 0;
  for (uint32_t i = 0; i < a->inflight_count; i++)
    if (!gpr_ring_reap(a->seg, a->me, a->inflight[i])) a->inflight[kept++] = a->inflight[i];
  a->inflight_count = kept;
}

static int try_publish(void *ctx) {
  attempt_ctx *a = (attempt_ctx *)ctx;
  int rc = gpr_ring_try_publish(a->seg, a->me, &a->ref, &a->pos);
  if (rc == -(int)GPR_E_RING_FULL) reap_all(a);
  return rc;
}

static int try_claim(void *ctx) {
  attempt_ctx *a = (attempt_ctx *)ctx;
  return gpr_ring_try_claim(a->seg, a->me, &a->ref, &a->pos);
}

static void run_producer(gpr_segment *seg, uint32_t me, uint32_t gen, const worker *w) {
  attempt_ctx a = {seg, me, {0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, NULL, 0};
  a.inflight = (uint64_t *)calloc(seg->slot_count * 2u + w->frames, sizeof(uint64_t));
  for (uint32_t i = 0; i < w->frames; i++) {
    memset(&a.ref, 0, sizeof a.ref);
    a.ref.frame_id = (uint64_t)w->id * w->frames + i;
    a.ref.producer = me;
    a.ref.producer_gen = gen;
    while (gpr_wait_for(&seg->control->space_seq, &seg->control->space_waiters, try_publish, &a,
                        -(int)GPR_E_RING_FULL, 100000000ull, 200) != 0)
      gpr_sweep(seg, NULL, NULL);
    a.inflight[a.inflight_count++] = a.pos;
  }
  while (a.inflight_count) {
    reap_all(&a);
    if (a.inflight_count) usleep(100);
  }
  free(a.inflight);
}

static void run_consumer(gpr_segment *seg, uint32_t me, const worker *w) {
  attempt_ctx a = {seg, me, {0, 0, 0, 0, 0, 0, 0, 0, 0}, 0, NULL, 0};
  shared_state *st = w->st;
  while (__atomic_load_n(&st->consumed, __ATOMIC_ACQUIRE) < st->total) {
    int rc = gpr_wait_for(&seg->control->data_seq, &seg->control->data_waiters, try_claim, &a,
                          -(int)GPR_E_RING_EMPTY, 20000000ull, 200);
    if (rc != 0) continue;
    CHECK(gpr_ring_confirm(seg, me, a.pos) == 0);
    if (a.ref.frame_id < st->total) __atomic_fetch_add(&st->seen[a.ref.frame_id], 1u, __ATOMIC_RELAXED);
    CHECK(gpr_ring_release(seg, me, a.pos) == 0);
    __atomic_fetch_add(&st->consumed, 1u, __ATOMIC_ACQ_REL);
  }
}

static void *run_worker(void *arg) {
  const worker *w = (const worker *)arg;
  gpr_segment seg;
  gpr_error err;
  uint32_t me = 0, gen = 0;
  if (gpr_segment_join(&seg, w->name, 0, w->producer ? GPR_ROLE_PRODUCER : GPR_ROLE_CONSUMER, &me, &gen, &err) != 0) {
    fprintf(stderr, "worker: %s\n", err.message);
    gpr_checks_failed++;
    return NULL;
  }
  if (w->producer) run_producer(&seg, me, gen, w);
  else run_consumer(&seg, me, w);
  gpr_participant_detach(&seg, me, gen, &err);
  gpr_segment_close(&seg);
  return NULL;
}

int main(int argc, char **argv) {
  int threads = argc > 1 && strcmp(argv[1], "threads") == 0;
  uint32_t P = argc > 4 ? (uint32_t)atoi(argv[2]) : 2, C = argc > 4 ? (uint32_t)atoi(argv[3]) : 2;
  uint32_t N = argc > 4 ? (uint32_t)atoi(argv[4]) : 50000;
  char name[32];
  snprintf(name, sizeof name, "ctest-stress-%d", (int)getpid());
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {64, 16, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &o, &err) == 0);
  size_t bytes = sizeof(shared_state) + (size_t)P * N * sizeof(uint32_t);
  shared_state *st = (shared_state *)mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  st->total = P * N;
  worker *ws = (worker *)calloc(P + C, sizeof(worker));
  pthread_t *tids = (pthread_t *)calloc(P + C, sizeof(pthread_t));
  pid_t *pids = (pid_t *)calloc(P + C, sizeof(pid_t));
  uint64_t t0 = gpr_monotonic_ns();
  for (uint32_t i = 0; i < P + C; i++) {
    worker w = {name, i < P, i < P ? i : i - P, N, st};
    ws[i] = w;
    if (threads) {
      pthread_create(&tids[i], NULL, run_worker, &ws[i]);
    } else if ((pids[i] = fork()) == 0) {
      run_worker(&ws[i]);
      _exit(gpr_checks_failed ? 1 : 0);
    }
  }
  for (uint32_t i = 0; i < P + C; i++) {
    if (threads) {
      pthread_join(tids[i], NULL);
    } else {
      int status = 0;
      waitpid(pids[i], &status, 0);
      CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
  }
  double secs = (double)(gpr_monotonic_ns() - t0) / 1e9;
  uint32_t missing = 0, dup = 0;
  for (uint32_t i = 0; i < st->total; i++) {
    missing += st->seen[i] == 0;
    dup += st->seen[i] > 1;
  }
  printf("stress %s: %u producers x %u consumers x %u frames in %.2fs (%.0f frames/s); missing %u, duplicated %u\n",
         threads ? "threads" : "processes", P, C, N, secs, st->total / secs, missing, dup);
  CHECK(missing == 0 && dup == 0);
  gpr_sweep_report rep;
  CHECK(gpr_sweep(&seg, &rep, &err) == 0);
  for (uint32_t i = 0; i < seg.participant_capacity; i++)
    CHECK(gpr_pstate(gpr_participant_word(&seg, i)) == GPR_PARTICIPANT_FREE);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
  munmap(st, bytes);
  free(ws);
  free(tids);
  free(pids);
  return CHECK_DONE();
}
