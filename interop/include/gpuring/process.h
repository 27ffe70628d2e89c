/* gpuring/process.h: process identity, liveness and cross-process futexes.
 * Included by gpuring.h; not a standalone header. */

GPR_INLINE uint64_t gpr_now_ns(int clock) {
  struct timespec ts;
  clock_gettime(clock, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

GPR_INLINE uint64_t gpr_monotonic_ns(void) { return gpr_now_ns(CLOCK_MONOTONIC); }

/* What /proc says of a pid. UNKNOWN is not GONE: a process at its descriptor
 * limit (EMFILE), a full file table (ENFILE), a signal or no memory must never
 * make a live peer look dead, for a sweeper frees a dead peer's entry, slots
 * and memory. Only ENOENT or ESRCH (the pid is not in /proc) mean gone. */
#define GPR_PROC_RUNNING 0
#define GPR_PROC_GONE (-1)
#define GPR_PROC_UNKNOWN (-2)

/* Reads state and start time (field 22, clock ticks since boot) of a process
 * from /proc/PID/stat: GPR_PROC_RUNNING (0), GPR_PROC_GONE, or
 * GPR_PROC_UNKNOWN when /proc could not be read or parsed.
 * The pid alone is not an identity: pids are reused, start times are not. */
GPR_INLINE int gpr_proc_stat(uint32_t pid, char *state, uint64_t *start_time) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%u/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? GPR_PROC_GONE : GPR_PROC_UNKNOWN;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int read_errno = errno;
  close(fd);
  /* A process reaped after the open reads as ESRCH, or as nothing. */
  if (n == 0 || (n < 0 && read_errno == ESRCH)) return GPR_PROC_GONE;
  if (n < 0) return GPR_PROC_UNKNOWN;
  buf[n] = 0;
  /* comm may contain spaces and parentheses: fields resume after the last ')'. */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return GPR_PROC_UNKNOWN;
  p += 2;
  *state = *p;
  /* p is at field 3 (state); skip to field 22. */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return GPR_PROC_UNKNOWN;
    p++;
  }
  *start_time = strtoull(p, NULL, 10);
  return GPR_PROC_RUNNING;
}

/* The start time of process `pid` while it runs (exists and is not a zombie:
 * a killed child its parent has not reaped yet is dead to us). Returns
 * GPR_PROC_RUNNING and sets *start_time, GPR_PROC_GONE or GPR_PROC_UNKNOWN. */
GPR_INLINE int gpr_running_start_time(uint32_t pid, uint64_t *start_time) {
  char state;
  if (pid == 0) return GPR_PROC_GONE;
  int rc = gpr_proc_stat(pid, &state, start_time);
  if (rc != GPR_PROC_RUNNING) return rc;
  return state == 'Z' || state == 'X' || state == 'x' ? GPR_PROC_GONE : GPR_PROC_RUNNING;
}

/* A participant is alive while a process with its pid and start time runs,
 * and while we cannot tell. */
GPR_INLINE int gpr_process_alive(uint32_t pid, uint64_t start_time) {
  uint64_t started;
  int rc = gpr_running_start_time(pid, &started);
  return rc == GPR_PROC_UNKNOWN || (rc == GPR_PROC_RUNNING && started == start_time);
}

/* Is some process `pid` running (or can we not tell)? For the transient
 * participant states, whose word names a pid but no start time. */
GPR_INLINE int gpr_pid_running(uint32_t pid) {
  uint64_t started;
  return gpr_running_start_time(pid, &started) != GPR_PROC_GONE;
}

/* This process's start time, 0 if /proc cannot be read now. Cached per pid
 * (a forked child reads its own): read once at attach, it is never lost to a
 * later descriptor shortage. */
GPR_INLINE uint64_t gpr_self_start_time(void) {
  static int32_t cached_pid;
  static uint64_t cached;
  int32_t pid = (int32_t)getpid();
  char state;
  uint64_t started;
  if (__atomic_load_n(&cached_pid, __ATOMIC_ACQUIRE) == pid) return __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (gpr_proc_stat((uint32_t)pid, &state, &started) != GPR_PROC_RUNNING) return 0;
  __atomic_store_n(&cached, started, __ATOMIC_RELAXED);
  __atomic_store_n(&cached_pid, pid, __ATOMIC_RELEASE);
  return started;
}

/* Participants identify each other by pid, so all must share a PID namespace. */
GPR_INLINE uint64_t gpr_pid_namespace(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/* Futex words live in shared memory, so these use the shared (non-PRIVATE)
 * operations. Returns 0 when woken or the value differed, ETIMEDOUT, or EINTR. */
GPR_INLINE int gpr_futex_wait(uint32_t *word, uint32_t expected, uint64_t timeout_ns) {
  struct timespec ts, *tsp = NULL;
  if (timeout_ns != UINT64_MAX) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000ull);
    ts.tv_nsec = (long)(timeout_ns % 1000000000ull);
    tsp = &ts;
  }
  long rc = syscall(SYS_futex, word, FUTEX_WAIT, expected, tsp, NULL, 0);
  if (rc == 0) return 0;
  return errno == EAGAIN ? 0 : errno;
}

/* Returns how many threads it woke (0 on error). */
GPR_INLINE long gpr_futex_wake_all(uint32_t *word) {
  long woken = syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
  return woken > 0 ? woken : 0;
}

/* Bumps a futex word and wakes its sleepers, only if any announced themselves:
 * the fast path makes no system call. The seq_cst fence pairs with the one in
 * gpr_wait_for: either the sleeper sees the new state, or we see the sleeper. */
GPR_INLINE uint32_t gpr_load_waiters_after_fence(uint32_t *waiters) {
#if defined(__SANITIZE_THREAD__)
  /* ThreadSanitizer does not model fences; an RMW gives it the same ordering. */
  return __atomic_fetch_add(waiters, 0u, __ATOMIC_SEQ_CST);
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(waiters, __ATOMIC_RELAXED);
#endif
}

GPR_INLINE void gpr_notify(uint32_t *seq, uint32_t *waiters) {
  if (gpr_load_waiters_after_fence(waiters) != 0) {
    __atomic_fetch_add(seq, 1u, __ATOMIC_RELEASE);
    gpr_futex_wake_all(seq);
  }
}

GPR_INLINE void gpr_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}
