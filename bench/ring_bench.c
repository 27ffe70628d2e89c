/* The C ring alone across two processes (bench/host.ts runs it).
 *   ring_bench latency N   one-way latency: the producer stamps CLOCK_MONOTONIC
 *                          into each reference and waits for its release before
 *                          the next; the consumer busy-polls. Prints one line of
 *                          JSON with the sorted latencies' p50/p99/p99.9 in ns.
 *   ring_bench rate N      records per second, producer and consumer both
 *                          spinning, ring of 1024. */
#include "gpuring.h"
#include <sys/wait.h>

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static void consume(const char *name, uint64_t n, int latency, uint64_t *out) {
  gpr_segment seg;
  gpr_error err;
  uint32_t me, gen;
  if (gpr_segment_open(&seg, name, NULL, &err) || gpr_participant_attach(&seg, GPR_ROLE_CONSUMER, &me, &gen, &err)) _exit(2);
  for (uint64_t i = 0; i < n; i++) {
    gpr_frame_ref ref;
    uint64_t pos;
    while (gpr_ring_try_claim(&seg, me, &ref, &pos) != 0) gpr_cpu_relax();
    if (latency) out[i] = gpr_monotonic_ns() - ref.user_tag;
    gpr_ring_confirm(&seg, me, pos);
    gpr_ring_release(&seg, me, pos);
  }
  gpr_participant_detach(&seg, me, gen, &err);
}

int main(int argc, char **argv) {
  int latency = argc > 1 && strcmp(argv[1], "latency") == 0;
  uint64_t n = argc > 2 ? strtoull(argv[2], NULL, 10) : 100000;
  char name[32];
  snprintf(name, sizeof name, "bench-ring-%d", (int)getpid());
  gpr_segment seg;
  gpr_error err;
  gpr_segment_options o = {1024, 8, 0, 0, 0, GPR_DELIVERY_EACH};
  if (gpr_segment_create(&seg, name, &o, &err)) return 1;
  uint64_t *lat = (uint64_t *)mmap(NULL, n * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pid_t child = fork();
  if (child == 0) {
    consume(name, n, latency, lat);
    _exit(0);
  }
  uint32_t me, gen;
  gpr_participant_attach(&seg, GPR_ROLE_PRODUCER, &me, &gen, &err);
  uint64_t *inflight = (uint64_t *)calloc(n, sizeof(uint64_t)), reaped = 0;
  uint64_t t0 = gpr_monotonic_ns();
  for (uint64_t i = 0; i < n; i++) {
    gpr_frame_ref ref;
    memset(&ref, 0, sizeof ref);
    ref.producer = me;
    ref.producer_gen = gen;
    ref.frame_id = i;
    ref.user_tag = gpr_monotonic_ns();
    while (gpr_ring_try_publish(&seg, me, &ref, &inflight[i]) != 0)
      while (reaped < i && gpr_ring_reap(&seg, me, inflight[reaped])) reaped++;
    if (latency)  /* one record in flight at a time: measure hand-off, not queueing */
      while (!gpr_ring_reap(&seg, me, inflight[i])) gpr_cpu_relax();
  }
  int status;
  waitpid(child, &status, 0);
  double secs = (double)(gpr_monotonic_ns() - t0) / 1e9;
  if (latency) {
    qsort(lat, n, sizeof(uint64_t), cmp);
    printf("{\"p50\": %llu, \"p99\": %llu, \"p999\": %llu}\n", (unsigned long long)lat[n / 2], (unsigned long long)lat[n * 99 / 100],
           (unsigned long long)lat[n * 999 / 1000]);
  } else {
    printf("{\"recordsPerSecond\": %.0f}\n", (double)n / secs);
  }
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, &err);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
