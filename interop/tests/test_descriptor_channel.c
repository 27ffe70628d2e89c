/* The descriptor channel (SPEC.md §9c) across processes, without a GPU: a
 * producer serves a memfd as pool 7 of its entry; an attached child fetches
 * it and reads what the producer wrote there. An unknown id, a process that
 * is not attached to the segment and a producer that is gone are refused
 * with DESCRIPTOR_UNAVAILABLE, and so is a reply carrying more descriptors
 * than the kind allows, none of which stays open in the consumer. A cuda-vmm
 * span arrives as one descriptor and one size per chunk. */
#include "gpuring.h"
#include "check.h"

#include <dirent.h>
#include <pthread.h>
#include <sys/wait.h>

static int served_fd = -1;

static uint32_t lookup(void *ctx, uint16_t kind, uint64_t id, int *fds, uint64_t *sizes) {
  (void)ctx;
  (void)sizes;
  if (kind == GPR_MEM_CUDA_VMM && id == 11) { /* a span of three chunks */
    const uint64_t chunks[3] = {2u << 20, 20u << 20, 2u << 20};
    for (int i = 0; i < 3; i++) fds[i] = served_fd, sizes[i] = chunks[i];
    return 3;
  }
  if (kind != GPR_MEM_CUDA_POOL || id != 7) return 0;
  fds[0] = served_fd;
  return 1;
}

typedef struct server {
  const gpr_segment *seg;
  int listener;
} server;

static void *serve(void *arg) {
  server *s = (server *)arg;
  gpr_channel_serve(s->seg, s->listener, lookup, NULL);
  return NULL;
}

/* Fetches pool `id` of producer (index, gen) in a child process, attached to
 * the segment or not. The child's exit status: 0 when it read "hello" through
 * the descriptor, 100 + the error code when the fetch failed, 99 otherwise. */
static int fetch_in_child(const char *name, int attach, uint32_t index, uint32_t gen, uint64_t id) {
  pid_t child = fork();
  if (child == 0) {
    gpr_segment seg;
    gpr_error err;
    uint32_t me, my_gen;
    if (attach && gpr_segment_join(&seg, name, 1000, GPR_ROLE_CONSUMER, &me, &my_gen, &err) != 0) _exit(99);
    int fd = -1;
    if (gpr_channel_fetch(name, index, gen, GPR_MEM_CUDA_POOL, id, &fd, &err) != 0) _exit(100 + (int)err.code);
    char text[6] = {0};
    _exit(pread(fd, text, 5, 0) == 5 && strcmp(text, "hello") == 0 ? 0 : 99);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int open_descriptors(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  while (d && readdir(d)) n++;
  if (d) closedir(d);
  return n;
}

/* A channel that answers one request with three descriptors and sizes. */
static void *answer_with_three(void *arg) {
  int listener = *(int *)arg;
  int conn = accept(listener, NULL, NULL);
  gpr_channel_message req;
  CHECK(recv(conn, &req, sizeof req, 0) == (ssize_t)sizeof req);
  int fds[3] = {served_fd, served_fd, served_fd};
  uint64_t sizes[3] = {2u << 20, 20u << 20, 2u << 20};
  CHECK(gpr_channel_reply(conn, GPR_CHANNEL_FOUND, fds, 3, sizes) == (ssize_t)(sizeof req + sizeof sizes));
  close(conn);
  return NULL;
}

/* Served by the channel's own answer (gpr_channel_serve with `lookup`). */
static void test_vmm_span_arrives_chunk_by_chunk(const gpr_segment *seg, uint32_t index, uint32_t gen) {
  gpr_error err;
  int before = open_descriptors(), fds[8];
  uint64_t sizes[8];
  uint32_t count = 0;
  CHECK(gpr_channel_fetch_many(seg->name, index, gen, GPR_MEM_CUDA_VMM, 11, fds, sizes, 8, &count, &err) == 0);
  CHECK(count == 3 && sizes[0] == 2u << 20 && sizes[1] == 20u << 20 && sizes[2] == 2u << 20);
  /* The serving thread closes its end of the connection after replying: wait
   * for that, then exactly the three received descriptors are new. */
  for (int waited = 0; waited < 1000 && open_descriptors() != before + 3; waited++) usleep(1000);
  CHECK(open_descriptors() == before + 3);
  for (uint32_t i = 0; i < count; i++) {
    char text[6] = {0};
    CHECK(pread(fds[i], text, 5, 0) == 5 && strcmp(text, "hello") == 0);
    close(fds[i]);
  }
}

static void test_extra_descriptors_are_refused(const gpr_segment *seg) {
  gpr_error err;
  int listener = gpr_channel_listen(seg, 5, 9, &err);
  CHECK(listener >= 0);
  pthread_t t;
  pthread_create(&t, NULL, answer_with_three, &listener);
  int before = open_descriptors(), fd = -1;
  CHECK_CODE(gpr_channel_fetch(seg->name, 5, 9, GPR_MEM_CUDA_POOL, 7, &fd, &err), GPR_E_DESCRIPTOR_UNAVAILABLE);
  pthread_join(t, NULL);
  CHECK(fd == -1 && open_descriptors() == before);
  close(listener);
}

int main(void) {
  char name[32];
  snprintf(name, sizeof name, "channel-%d", (int)getpid());
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options so = {4u, 8u, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, name, &so, &err) == 0);
  gpr_segment prod;
  uint32_t index, gen;
  CHECK(gpr_segment_join(&prod, name, 1000, GPR_ROLE_PRODUCER, &index, &gen, &err) == 0);
  served_fd = memfd_create("pool", MFD_CLOEXEC);
  CHECK(served_fd >= 0 && pwrite(served_fd, "hello", 5, 0) == 5);
  server s = {&prod, gpr_channel_listen(&prod, index, gen, &err)};
  CHECK(s.listener >= 0);
  pthread_t t;
  pthread_create(&t, NULL, serve, &s);

  CHECK(fetch_in_child(name, 1, index, gen, 7) == 0);
  CHECK(fetch_in_child(name, 1, index, gen, 8) == 100 + GPR_E_DESCRIPTOR_UNAVAILABLE); /* unknown id */
  CHECK(fetch_in_child(name, 0, index, gen, 7) == 100 + GPR_E_DESCRIPTOR_UNAVAILABLE); /* not attached */
  CHECK(fetch_in_child(name, 1, index, gen + 1, 7) == 100 + GPR_E_DESCRIPTOR_UNAVAILABLE); /* no such producer */
  test_extra_descriptors_are_refused(&prod);
  test_vmm_span_arrives_chunk_by_chunk(&prod, index, gen);

  shutdown(s.listener, SHUT_RDWR);
  pthread_join(t, NULL);
  close(s.listener);
  CHECK(fetch_in_child(name, 1, index, gen, 7) == 100 + GPR_E_DESCRIPTOR_UNAVAILABLE); /* the channel is closed */
  gpr_participant_detach(&prod, index, gen, NULL);
  gpr_segment_close(&prod);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, NULL);
  return CHECK_DONE();
}
