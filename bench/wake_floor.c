/* The one-wake floor (bench/host.ts runs it): how long one process takes to
 * wake another that sleeps in epoll_wait on a socket, the mechanism a Node
 * consumer's doorbell uses, measured in C with nothing else on the path.
 *   wake_floor N GAP_US [SKIP [PACING]]
 * A child sleeps in epoll_wait on an abstract AF_UNIX datagram socket; the
 * parent sends SKIP + N datagrams, each carrying CLOCK_MONOTONIC, GAP_US
 * apart, asleep in nanosleep between them, or spinning with PACING `busy`
 * (Linux often wakes the child on the CPU of a sender about to sleep, so the
 * two pacings measure different wake-ups). Prints the wake latencies'
 * p50/p99/p99.9 in ns as JSON, of the last N (the first SKIP warm up, as the
 * Node runs it is compared with do), and `same_cpu`: the percentage of those
 * wake-ups that ran on the CPU the datagram was sent from. After each
 * wake-up it reads a 256 KiB buffer it read after the last one, twice:
 * `cold_read` and `warm_read` (p50, ns) say what the sleep cost the caches,
 * so what any work done just after a wake-up pays (a Node consumer's claim,
 * Frame and promise; the floor itself does none).
 *   wake_floor N GAP_US SKIP PACING eventfd
 * the same sleeper in epoll_wait on an eventfd (the sender posts its stamps in
 * shared memory and adds 1): the one-wake floor as issue 12 names it, for
 * scale beside the socket's.
 *   wake_floor N GAP_US SKIP PACING pipe
 * the same on a pipe's read end, which the sender opens as /proc/PID/fd/N and
 * writes one byte to, as a notifier rings a doorbell pipe (format 2.5).
 *   wake_floor N GAP_US SKIP PACING PATH
 * sends the same stamps, paced the same way, down a Unix stream socket
 * listening at PATH instead, and prints nothing: the receiver (a Node process,
 * bench/wake-floor.ts) times its own wake-ups.
 *   wake_floor N GAP_US SKIP PACING ring:NAME
 * publishes SKIP + N frames into gpuring ring NAME instead, paced the same way,
 * each tagged with CLOCK_MONOTONIC at its gpr_producer_publish call, then waits
 * until they are released: a C producer, for a Node consumer (bench/host.ts)
 * to time its hand-off from without a Node producer's own wake-up in it. */
#include "gpuring.h" /* defines _GNU_SOURCE, for sched_getcpu */
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/wait.h>

static int cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

static volatile uint64_t probe_sum; /* keeps read_ns's loads */

/* Reads one byte per cache line of `probe`: how long says how much of it the caches kept. */
static uint64_t read_ns(const uint8_t *probe, size_t bytes) {
  uint64_t t0 = gpr_monotonic_ns(), sum = 0;
  for (size_t i = 0; i < bytes; i += 64) sum += probe[i];
  probe_sum = sum;
  return gpr_monotonic_ns() - t0;
}

static void pace(uint64_t gap_us, int busy) {
  struct timespec pause = {0, (long)(gap_us * 1000)};
  if (!busy) {
    nanosleep(&pause, NULL);
    return;
  }
  for (uint64_t until = gpr_monotonic_ns() + gap_us * 1000; gpr_monotonic_ns() < until;) {
  }
}

static int stream_to(const char *path, uint64_t n, uint64_t gap_us, int busy) {
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
  int tx = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (tx < 0 || connect(tx, (struct sockaddr *)&addr, sizeof addr) != 0) return 1;
  for (uint64_t i = 0; i < n; i++) {
    pace(gap_us, busy);
    uint64_t sent[2] = {gpr_monotonic_ns(), (uint64_t)sched_getcpu()};
    if (write(tx, sent, sizeof sent) != sizeof sent) return 1;
  }
  close(tx);
  return 0;
}

/* Frames of one int32 column of no rows (no buffers): the ring and the
 * wake-up, nothing else, as the Node rows' prepared frame. */
static int publish_to(const char *ring, uint64_t n, uint64_t gap_us, int busy) {
  gpr_error err;
  gpr_producer *p = NULL;
  int rc = gpr_producer_open(ring, NULL, &p, &err);
  if (rc != 0) {
    fprintf(stderr, "wake_floor: %s: %s\n", gpr_code_name(err.code), err.message);
    return 1;
  }
  gpr_node_desc column = {"c0", 2, "i", 1, NULL, 0, 0, 0, -1, 2, 0, 0, 0};
  gpr_body_buffer absent[2];
  memset(absent, 0, sizeof absent);
  gpr_frame_desc d;
  memset(&d, 0, sizeof d);
  d.root_count = d.node_count = 1;
  d.buffer_count = 2;
  d.nodes = &column;
  d.buffers = absent;
  gpr_publish_options o;
  memset(&o, 0, sizeof o);
  o.timeout_ms = 30000;
  for (uint64_t i = 0; i < n && rc == 0; i++) {
    pace(gap_us, busy);
    o.user_tag = gpr_monotonic_ns();
    rc = gpr_producer_publish(p, &d, &o, NULL, &err);
  }
  if (rc == 0) rc = gpr_producer_drain(p, 30000, &err);
  if (rc != 0) fprintf(stderr, "wake_floor: %s: %s\n", gpr_code_name(err.code), err.message);
  gpr_producer_close(p);
  return rc != 0;
}

enum waker { BY_DATAGRAM, BY_EVENTFD, BY_PIPE };

/* What one wake-up brought on `rx`: 1 with the stamp of a datagram in `sent`,
 * else how many stamps the sender posted (an eventfd's count, a pipe's bytes);
 * 0 for nothing. */
static uint64_t take_rings(int rx, enum waker by, uint64_t sent[2]) {
  uint64_t came = 0;
  char bytes[64];
  ssize_t got;
  switch (by) {
    case BY_DATAGRAM: return recv(rx, sent, 2 * sizeof *sent, 0) == 2 * sizeof *sent;
    case BY_EVENTFD: return read(rx, &came, sizeof came) == sizeof came ? came : 0;
    default: got = read(rx, bytes, sizeof bytes); return got > 0 ? (uint64_t)got : 0;
  }
}

/* The sleeper: wakes from epoll_wait on `rx` n times, timing each stamp that
 * came (a datagram carries its own; an eventfd or a pipe brings those the sender posted). */
static void sleep_and_time(int rx, enum waker by, const uint64_t *posted, uint64_t n, uint64_t *lat) {
  uint64_t *same = lat + n; /* 1 where the wake-up ran on the sender's CPU */
  uint64_t *cold = lat + 2 * n, *warm = lat + 3 * n; /* read_ns just after the wake-up, and again */
  int ep = epoll_create1(0);
  struct epoll_event ev = {.events = EPOLLIN};
  epoll_ctl(ep, EPOLL_CTL_ADD, rx, &ev);
  static uint8_t probe[256 * 1024];
  memset(probe, 1, sizeof probe);
  for (uint64_t i = 0; i < n;) {
    epoll_wait(ep, &ev, 1, -1);
    uint64_t sent[2] = {0, 0}; /* CLOCK_MONOTONIC, the sender's CPU */
    uint64_t came = take_rings(rx, by, sent);
    uint64_t woke = gpr_monotonic_ns(), cpu = (uint64_t)sched_getcpu();
    for (uint64_t k = 0; k < came && i < n; k++, i++) {
      const uint64_t *stamp = by == BY_DATAGRAM ? sent : posted + 2 * i;
      lat[i] = woke - stamp[0];
      same[i] = cpu == stamp[1];
      cold[i] = read_ns(probe, sizeof probe);
      warm[i] = read_ns(probe, sizeof probe);
    }
  }
}

/* The sleeper's pipe, opened for writing as a notifier opens a doorbell pipe:
 * its read end `number` in process `pid`, as /proc/PID/fd/N. */
static int pipe_of(pid_t pid, int number) {
  char path[48];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, number);
  return open(path, O_WRONLY | O_CLOEXEC);
}

int main(int argc, char **argv) {
  uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
  uint64_t gap_us = argc > 2 ? strtoull(argv[2], NULL, 10) : 2000;
  uint64_t skip = argc > 3 ? strtoull(argv[3], NULL, 10) : 0;
  int busy = argc > 4 && strcmp(argv[4], "busy") == 0;
  n += skip;
  const char *mode = argc > 5 ? argv[5] : "";
  if (strncmp(mode, "ring:", 5) == 0) return publish_to(mode + 5, n, gap_us, busy);
  if (*mode && strcmp(mode, "eventfd") != 0 && strcmp(mode, "pipe") != 0) return stream_to(mode, n, gap_us, busy);
  enum waker by = !*mode ? BY_DATAGRAM : strcmp(mode, "eventfd") == 0 ? BY_EVENTFD : BY_PIPE;
  struct sockaddr_un addr;
  char name[32];
  snprintf(name, sizeof name, "wake-floor-%d", (int)getpid());
  socklen_t len = gpr_doorbell_address(name, 1, &addr);
  int ends[2] = {-1, -1};
  int rx = by == BY_EVENTFD ? eventfd(0, EFD_CLOEXEC)
         : by == BY_PIPE    ? (pipe2(ends, O_CLOEXEC) == 0 ? ends[0] : -1)
                            : socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (rx < 0 || (by == BY_DATAGRAM && bind(rx, (struct sockaddr *)&addr, len) != 0)) return 1;
  /* latencies, same CPU, cold and warm reads (n each), then the stamps an eventfd's or a pipe's sender posts (2n) */
  uint64_t *lat = (uint64_t *)mmap(NULL, 6 * n * sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  uint64_t *same = lat + n, *cold = lat + 2 * n, *warm = lat + 3 * n, *posted = lat + 4 * n;
  pid_t child = fork();
  if (child == 0) {
    sleep_and_time(rx, by, posted, n, lat); /* it keeps the pipe's write end: a pipe without one polls hung up */
    _exit(0);
  }
  int tx = by == BY_EVENTFD ? rx : by == BY_PIPE ? pipe_of(child, rx) : socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (tx < 0) return 1;
  for (int i = 0; i < 2 && by == BY_PIPE; i++) close(ends[i]);
  for (uint64_t i = 0; i < n; i++) {
    pace(gap_us, busy);
    uint64_t sent[2] = {gpr_monotonic_ns(), (uint64_t)sched_getcpu()}, one = 1;
    if (by == BY_DATAGRAM) {
      sendto(tx, sent, sizeof sent, 0, (struct sockaddr *)&addr, len);
      continue;
    }
    memcpy(posted + 2 * i, sent, sizeof sent); /* before the write: the sleeper reads it after its read */
    if (by == BY_EVENTFD ? write(tx, &one, sizeof one) != sizeof one : write(tx, "", 1) != 1) return 1;
  }
  waitpid(child, NULL, 0);
  uint64_t *kept = lat + skip, on_sender = 0;
  n -= skip;
  for (uint64_t i = skip; i < skip + n; i++) on_sender += same[i];
  qsort(kept, n, sizeof *kept, cmp);
  qsort(cold + skip, n, sizeof *cold, cmp);
  qsort(warm + skip, n, sizeof *warm, cmp);
  printf("{\"p50\": %llu, \"p99\": %llu, \"p99.9\": %llu, \"same_cpu\": %.1f, \"cold_read\": %llu, \"warm_read\": %llu}\n",
         (unsigned long long)kept[n / 2], (unsigned long long)kept[n * 99 / 100], (unsigned long long)kept[n * 999 / 1000],
         100.0 * on_sender / n, (unsigned long long)cold[skip + n / 2], (unsigned long long)warm[skip + n / 2]);
  return 0;
}
