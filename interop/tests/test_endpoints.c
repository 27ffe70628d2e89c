/* The producer and consumer of gpuring/producer.h and consumer.h in one
 * process: ownership of allocations, release callbacks, full and empty
 * rings, refused buffers, damaged frames, Arrow exports holding the lease,
 * and frames outliving their consumer. Cross-process use: c_examples_host. */
#include "gpuring.h"
#include "check.h"
#include "int32_frame.h"
#include "stalled_sweeper.h"

#include <sys/wait.h>

static uint64_t released_id;
static int released_calls;

static void on_release(void *context, uint64_t frame_id) {
  CHECK(context == &released_id);
  released_id = frame_id;
  released_calls++;
}

/* One int32 column "v" of `rows` values 0..rows-1, tagged 7. */
static int publish_ints(gpr_producer *p, uint32_t rows, int64_t timeout_ms, gpr_error *err) {
  gpr_publish_options o = {7u, timeout_ms, NULL, 0, on_release, &released_id};
  return publish_int32_column(p, "v", 0, rows, o, err);
}

/* A fresh ring of `slots` named after `what` and this process, with a
 * producer and a consumer on it. */
typedef struct endpoints {
  char name[48];
  gpr_segment seg;
  gpr_producer *p;
  gpr_consumer *c;
} endpoints;

static void endpoints_open(endpoints *e, const char *what, uint32_t slots) {
  gpr_error err;
  snprintf(e->name, sizeof e->name, "endpoints-%s%d", what, (int)getpid());
  gpr_segment_options so = {slots, 8u, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&e->seg, e->name, &so, &err) == 0);
  CHECK(gpr_producer_open(e->name, NULL, &e->p, &err) == 0);
  CHECK(gpr_consumer_open(e->name, 0, &e->c, &err) == 0);
}

/* Closes what is still open (a consumer closed already is NULL) and removes the ring. */
static void endpoints_close(endpoints *e) {
  if (e->c) gpr_consumer_close(e->c);
  gpr_producer_close(e->p);
  gpr_segment_close(&e->seg);
  gpr_segment_unlink(e->name, NULL);
}

static void test_ownership_and_release(gpr_producer *p, gpr_consumer *c) {
  gpr_error err;
  gpr_frame *f = NULL;
  released_calls = 0;
  CHECK(publish_ints(p, 100, 0, &err) == 0);
  CHECK(gpr_consumer_next(c, 1000, &f, &err) == 0);
  CHECK(f->user_tag == 7 && f->desc.row_count == 100 && f->desc.node_count == 1);
  const uint8_t *v = NULL;
  CHECK(gpr_frame_host_buffer(f, 1, &v, &err) == 0);
  int32_t last;
  memcpy(&last, v + 396, 4);
  CHECK(last == 99);
  CHECK(gpr_frame_host_buffer(f, 0, &v, &err) == 0 && v == NULL); /* absent validity */
  CHECK_CODE(gpr_frame_host_buffer(f, 2, &v, &err), GPR_E_INVALID_ARGUMENT);
  CHECK(gpr_producer_reap(p) == 0 && released_calls == 0);
  gpr_frame_release(f);
  CHECK(gpr_producer_reap(p) == 1 && released_calls == 1 && released_id == 1);
  CHECK(p->inflight_count == 0);
}

static void test_full_and_empty(gpr_producer *p, gpr_consumer *c, uint32_t slots) {
  gpr_error err;
  gpr_frame *f = NULL;
  uint64_t free_before = gpr_arena_pool_free_bytes(&p->pool);
  CHECK_CODE(gpr_consumer_next(c, 0, &f, &err), GPR_E_RING_EMPTY);
  CHECK_CODE(gpr_consumer_next(c, 30, &f, &err), GPR_E_TIMEOUT);
  for (uint32_t i = 0; i < slots; i++) CHECK(publish_ints(p, 10, 0, &err) == 0);
  CHECK_CODE(publish_ints(p, 10, 0, &err), GPR_E_RING_FULL);
  CHECK_CODE(publish_ints(p, 10, 30, &err), GPR_E_TIMEOUT);
  for (uint32_t i = 0; i < slots; i++) {
    CHECK(gpr_consumer_next(c, 0, &f, &err) == 0);
    gpr_frame_release(f);
  }
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  CHECK(gpr_arena_pool_free_bytes(&p->pool) == free_before); /* bodies and owned columns freed */
}

/* Handles that name no arena of this producer: each publish is refused; the
 * buffer's own handle is put back after each. */
static void refuse_foreign_names(gpr_producer *p, const gpr_frame_desc *d, gpr_body_buffer *buf) {
  gpr_error err;
  uint8_t good[GPR_HANDLE_BYTES];
  memcpy(good, buf->handle, sizeof good);
  char names[9][GPR_SHM_NAME_MAX];
  gpr_arena_shm_name(p->seg.name, p->index + 1, p->gen, 0, names[0]); /* another participant's */
  gpr_arena_shm_name(p->seg.name, p->index, p->gen + 1, 0, names[1]); /* an earlier life's */
  gpr_arena_shm_name("other", p->index, p->gen, 0, names[2]);          /* another segment's */
  gpr_arena_shm_name(p->seg.name, p->index, p->gen, 99, names[3]);     /* an arena it never made */
  snprintf(names[4], sizeof names[4], "%s0", (const char *)good);     /* a leading zero */
  snprintf(names[5], sizeof names[5], "%sx", (const char *)good);     /* trailing bytes */
  snprintf(names[6], sizeof names[6], "/gpuring.%s.p%ug%u.a", p->seg.name, p->index, p->gen); /* no number */
  snprintf(names[7], sizeof names[7], "/gpuring.%s.p%ug%u.a4294967296", p->seg.name, p->index, p->gen);
  memset(names[8], 'a', sizeof names[8]); /* no NUL in the handle */
  for (int i = 0; i < 9; i++) {
    memset(buf->handle, 0, GPR_HANDLE_BYTES);
    memcpy(buf->handle, names[i], i == 8 ? GPR_HANDLE_BYTES : strlen(names[i]));
    CHECK_CODE(gpr_producer_publish(p, d, NULL, NULL, &err), GPR_E_INVALID_ARGUMENT);
  }
  memcpy(buf->handle, good, sizeof good);
}

static void test_refused_buffers(gpr_producer *p) {
  gpr_error err;
  gpr_allocation a;
  CHECK(gpr_producer_alloc(p, 64, &a, &err) == 0);
  gpr_body_buffer b[2];
  memset(b, 0, sizeof b);
  CHECK_CODE(gpr_producer_host_buffer(p, &a, 32, 64, &b[1], &err), GPR_E_INVALID_ARGUMENT);
  CHECK(gpr_producer_host_buffer(p, &a, 0, 64, &b[1], &err) == 0);
  b[1].offset = 1ull << 40; /* outside every arena of this producer */
  gpr_node_desc n = {"v", 1, "i", 1, NULL, 0, 0, 0, -1, 2, 16, 0, 0};
  gpr_frame_desc d = one_column_frame(&n, b, 2, 16);
  CHECK_CODE(gpr_producer_publish(p, &d, NULL, NULL, &err), GPR_E_INVALID_ARGUMENT);
  b[1].offset = a.offset;
  refuse_foreign_names(p, &d, &b[1]);
  n.length = 17; /* longer than row_count: the consumer's rule, checked here first */
  CHECK_CODE(gpr_producer_publish(p, &d, NULL, NULL, &err), GPR_E_FRAME_BOUNDS);
  gpr_producer_free(p, &a);
}

/* gpr_producer_arena_name writes what gpr_arena_shm_name does for every
 * arena number, and truncates as it does where a 32-character segment name,
 * a four-digit index and a ten-digit generation leave no room. */
static void expect_arena_names(const char *segment, uint32_t index, uint32_t gen) {
  gpr_producer *p = calloc(1, sizeof *p);
  CHECK(p != NULL);
  snprintf(p->seg.name, sizeof p->seg.name, "%s", segment);
  p->index = index;
  p->gen = gen;
  gpr_producer_make_arena_prefix(p);
  const uint32_t arenas[] = {0, 1, 9, 10, 99, 100, 4095, UINT32_MAX};
  for (size_t i = 0; i < sizeof arenas / sizeof arenas[0]; i++) {
    uint8_t got[GPR_HANDLE_BYTES];
    char want[GPR_SHM_NAME_MAX];
    memset(got, 0xAB, sizeof got);
    gpr_producer_arena_name(p, arenas[i], got);
    gpr_arena_shm_name(segment, index, gen, arenas[i], want);
    CHECK(strcmp((const char *)got, want) == 0);
  }
  free(p);
}

static void test_arena_names(void) {
  expect_arena_names("endpoints", 3, 1);
  expect_arena_names("abcdefghijklmnopqrstuvwxyz012345", 8189, UINT32_MAX);
}

static void test_damaged_frame_is_dropped(gpr_producer *p, gpr_consumer *c) {
  gpr_error err;
  gpr_frame *f = NULL;
  CHECK(publish_ints(p, 4, 0, &err) == 0);
  CHECK(publish_ints(p, 5, 0, &err) == 0);
  /* Break the first body in shared memory: its magic. */
  gpr_slot *s = gpr_slot_at(&p->seg, gpr_producer_inflight_at(p, p->inflight_count - 2u)->pos);
  p->pool.arenas[s->ref.body_arena].base[s->ref.body_offset] ^= 0xFF;
  CHECK_CODE(gpr_consumer_next(c, 0, &f, &err), GPR_E_FRAME_INVALID);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0 && f->desc.row_count == 5);
  gpr_frame_release(f);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
}

static void test_export_holds_the_lease(gpr_producer *p, gpr_consumer *c) {
  gpr_error err;
  gpr_frame *f = NULL;
  struct ArrowSchema schema;
  struct ArrowArray array;
  CHECK(publish_ints(p, 50, 0, &err) == 0);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0);
  CHECK(gpr_frame_export_arrow(f, &schema, &array, &err) == 0);
  gpr_frame_release(f);
  CHECK(strcmp(schema.format, "+s") == 0 && schema.n_children == 1);
  CHECK(strcmp(schema.children[0]->format, "i") == 0 && strcmp(schema.children[0]->name, "v") == 0);
  CHECK(array.length == 50 && array.n_children == 1 && array.children[0]->n_buffers == 2);
  int32_t v;
  memcpy(&v, (const uint8_t *)array.children[0]->buffers[1] + 4 * 49, 4);
  CHECK(v == 49);
  schema.release(&schema);
  CHECK(gpr_producer_reap(p) == 0); /* the array still holds the frame */
  array.release(&array);
  CHECK(array.release == NULL && gpr_producer_reap(p) == 1);
}

/* An exported utf8 column's offsets are the private copy that was checked
 * (SPEC.md §8.2): rewriting the shared ones afterwards cannot reach an importer. */
static void test_export_offsets_are_private(gpr_producer *p, gpr_consumer *c) {
  gpr_error err;
  gpr_allocation a;
  CHECK(gpr_producer_alloc(p, 64, &a, &err) == 0);
  const int32_t offsets[4] = {0, 2, 4, 5};
  memcpy(a.ptr, offsets, sizeof offsets);
  memcpy(a.ptr + 32, "abcde", 5);
  gpr_node_desc n = {"s", 1, "u", 1, NULL, 0, 0, 0, -1, 3, 3, 0, 0};
  gpr_body_buffer b[3];
  memset(b, 0, sizeof b);
  CHECK(gpr_producer_host_buffer(p, &a, 0, sizeof offsets, &b[1], &err) == 0);
  CHECK(gpr_producer_host_buffer(p, &a, 32, 5, &b[2], &err) == 0);
  gpr_frame_desc d = one_column_frame(&n, b, 3, 3);
  gpr_publish_options o = {0, 0, &a, 1, NULL, NULL};
  CHECK(gpr_producer_publish(p, &d, &o, NULL, &err) == 0);
  gpr_frame *f = NULL;
  struct ArrowSchema schema;
  struct ArrowArray array;
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0 && gpr_frame_export_arrow(f, &schema, &array, &err) == 0);
  gpr_frame_release(f);
  const int32_t huge = 64 << 20;
  memcpy(a.ptr + 4, &huge, 4); /* after the check: the producer (or anyone) rewrites an offset */
  const int32_t *got = (const int32_t *)array.children[0]->buffers[1];
  CHECK(memcmp(got, offsets, sizeof offsets) == 0);
  CHECK(memcmp(array.children[0]->buffers[2], "abcde", 5) == 0);
  schema.release(&schema);
  array.release(&array);
}

/* Dictionary indices outside the dictionary fail the export (FRAME_BOUNDS);
 * one under a null may hold anything (SPEC.md §8.2). Indices [0, 1, 9, 1]
 * with row `null_row` null, into the dictionary ["x", "y"]. */
static int export_dictionary_frame(gpr_producer *p, gpr_consumer *c, uint32_t null_row, gpr_error *err) {
  gpr_allocation a;
  CHECK(gpr_producer_alloc(p, 128, &a, err) == 0);
  const int32_t indices[4] = {0, 1, 9, 1}, offsets[3] = {0, 1, 2};
  memcpy(a.ptr, indices, sizeof indices);
  a.ptr[32] = (uint8_t)(0x0f & ~(1u << null_row));
  memcpy(a.ptr + 64, offsets, sizeof offsets);
  memcpy(a.ptr + 96, "xy", 2);
  gpr_node_desc n[2] = {{"d", 1, "i", 1, NULL, 0, 0, 2, 1, 2, 4, 1, 0}, {"", 0, "u", 1, NULL, 0, 0, 0, -1, 3, 2, 0, 0}};
  gpr_body_buffer b[5];
  memset(b, 0, sizeof b);
  CHECK(gpr_producer_host_buffer(p, &a, 32, 1, &b[0], err) == 0);
  CHECK(gpr_producer_host_buffer(p, &a, 0, sizeof indices, &b[1], err) == 0);
  CHECK(gpr_producer_host_buffer(p, &a, 64, sizeof offsets, &b[3], err) == 0);
  CHECK(gpr_producer_host_buffer(p, &a, 96, 2, &b[4], err) == 0);
  gpr_frame_desc d = one_column_frame(n, b, 5, 4);
  d.node_count = 2;
  d.dictionary_count = 1;
  gpr_publish_options o = {0, 0, &a, 1, NULL, NULL};
  CHECK(gpr_producer_publish(p, &d, &o, NULL, err) == 0);
  gpr_frame *f = NULL;
  struct ArrowSchema schema;
  struct ArrowArray array;
  CHECK(gpr_consumer_next(c, 0, &f, err) == 0);
  int rc = gpr_frame_export_arrow(f, &schema, &array, err);
  gpr_frame_release(f);
  if (rc == 0) {
    schema.release(&schema);
    array.release(&array);
  }
  return rc;
}

static void test_export_checks_dictionary_indices(gpr_producer *p, gpr_consumer *c) {
  gpr_error err;
  CHECK(export_dictionary_frame(p, c, 2, &err) == 0);
  CHECK_CODE(export_dictionary_frame(p, c, 0, &err), GPR_E_FRAME_BOUNDS);
  CHECK(strstr(err.message, "dictionary index 9 of row 2") != NULL);
}

static void test_frame_outlives_its_consumer(gpr_producer *p, const char *name) {
  gpr_error err;
  gpr_consumer *c = NULL;
  gpr_frame *f = NULL;
  CHECK(gpr_consumer_open(name, 0, &c, &err) == 0);
  CHECK(publish_ints(p, 8, 0, &err) == 0);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0);
  gpr_consumer_close(c); /* releases the lease; the mapping stays */
  CHECK(gpr_producer_drain(p, 1000, &err) == 0);
  const uint8_t *v = NULL;
  CHECK(gpr_frame_host_buffer(f, 1, &v, &err) == 0 && v != NULL);
  gpr_frame_release(f); /* after close: frees, touches no slot */
  CHECK_CODE(gpr_consumer_open("no-such-ring-xyz", 0, &c, &err), GPR_E_SEGMENT_NOT_FOUND);
}

/* As user nobody, in a child: create ring NAME, publish one frame, read it back.
 * Exits 0 when the frame arrived intact in an arena other than `squatted`. */
static int publish_as_nobody(const char *name, const char *squatted) {
  if (setgid(65534) != 0 || setuid(65534) != 0) return 10;
  gpr_error err;
  gpr_segment seg;
  gpr_producer *p = NULL;
  gpr_consumer *c = NULL;
  gpr_frame *f = NULL;
  const uint8_t *v = NULL;
  gpr_publish_options o;
  memset(&o, 0, sizeof o);
  if (gpr_segment_create(&seg, name, NULL, &err) != 0 || gpr_producer_open(name, NULL, &p, &err) != 0 ||
      gpr_consumer_open(name, 0, &c, &err) != 0)
    return 11;
  if (publish_int32_column(p, "v", 7, 4, o, &err) != 0) return fprintf(stderr, "%s\n", err.message), 12;
  if (gpr_consumer_next(c, 0, &f, &err) != 0 || gpr_frame_host_buffer(f, 1, &v, &err) != 0) return 13;
  int32_t last;
  memcpy(&last, v + 12, 4);
  char arena[GPR_HANDLE_BYTES + 1] = {0};
  memcpy(arena, f->desc.buffers[1].handle, GPR_HANDLE_BYTES);
  int ok = last == 10 && strcmp(arena, squatted) != 0;
  gpr_frame_release(f);
  gpr_consumer_close(c);
  gpr_producer_close(p);
  gpr_segment_close(&seg);
  gpr_segment_unlink(name, NULL);
  return ok ? 0 : 14;
}

/* Another user pre-creates a producer's next arena name: /dev/shm is sticky, so
 * the producer can neither remove the file nor (safely) use it. It skips that
 * arena number and publishes anyway; the squatter's file is left untouched.
 * Needs root (to be the other user). */
static void test_squatted_arena_name(void) {
  if (geteuid() != 0) return;
  char name[32], squatted[GPR_SHM_NAME_MAX], path[96];
  snprintf(name, sizeof name, "squat-%d", (int)getpid());
  gpr_arena_shm_name(name, 0, 1, 0, squatted); /* the first producer's first arena */
  snprintf(path, sizeof path, "/dev/shm%s", squatted);
  int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
  CHECK(fd >= 0);
  pid_t child = fork();
  if (child == 0) _exit(publish_as_nobody(name, squatted));
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  struct stat st;
  CHECK(fstat(fd, &st) == 0 && st.st_uid == 0 && st.st_size == 0);
  close(fd);
  unlink(path);
}

static uint64_t reported[512];
static uint32_t reported_count;

static void note_release(void *context, uint64_t frame_id) {
  (void)context;
  if (reported_count < 512u) reported[reported_count] = frame_id;
  reported_count++;
}

/* Whether the frames reported since `from` are ids first, first + 1, ... */
static int reported_run(uint32_t from, uint64_t first, uint32_t count) {
  if (reported_count != from + count) return 0;
  for (uint32_t i = 0; i < count; i++)
    if (reported[from + i] != first + i) return 0;
  return 1;
}

/* The frames in flight form a circular queue: publishes reap its oldest frames
 * in order; the queue wraps, and grows while wrapped; a frame released behind
 * one still held is reported by gpr_producer_reap, or by the full pass that
 * publishing makes every max(128, frames in flight) frames. */
static void test_inflight_queue(void) {
  endpoints e;
  endpoints_open(&e, "q-", 256u);
  gpr_producer *p = e.p;
  gpr_consumer *c = e.c;
  gpr_error err;
  gpr_publish_options o = {0, 0, NULL, 0, note_release, NULL};
  gpr_frame *f[256];
  for (uint32_t i = 0; i < 12; i++) CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0);
  for (uint32_t i = 0; i < 12; i++) CHECK(gpr_consumer_next(c, 0, &f[i], &err) == 0);
  for (uint32_t i = 0; i < 10; i++) gpr_frame_release(f[i]);
  CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0); /* id 13 */
  CHECK(reported_run(0, 1, 10) && p->inflight_head == 10 && p->inflight_count == 3);
  for (uint32_t i = 0; i < 20; i++) CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0); /* ids 14..33 */
  CHECK(p->inflight_capacity == 32 && p->inflight_count == 23);
  for (uint32_t i = 12; i < 33; i++) CHECK(gpr_consumer_next(c, 0, &f[i], &err) == 0);
  for (uint32_t i = 11; i < 33; i++) gpr_frame_release(f[i]); /* all but id 11 */
  CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0);   /* id 34: nothing in order to reap */
  CHECK(reported_count == 10);
  CHECK(gpr_producer_reap(p) == 22 && reported_run(10, 12, 22));
  /* Held id 11 again blocks the in-order reap; publishes report the frames behind it. */
  CHECK(gpr_consumer_next(c, 0, &f[33], &err) == 0);
  gpr_frame_release(f[33]);
  uint32_t before = reported_count;
  for (uint32_t i = 0; i <= 128 && reported_count == before; i++) {
    CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0);
    CHECK(gpr_consumer_next(c, 0, &f[34], &err) == 0);
    gpr_frame_release(f[34]);
  }
  CHECK(reported_count > before && reported[before] == 34);
  gpr_frame_release(f[10]);
  CHECK(gpr_producer_drain(p, 1000, &err) == 0 && p->inflight_count == 0);
  CHECK(reported_count == p->next_frame_id - 1u);
  endpoints_close(&e);
}

/* An on_release that publishes on the same producer, from inside a full reap
 * and from inside a publish: the queue stays whole and ids stay distinct. */
static gpr_producer *republisher;
static uint32_t republished;

static void publish_again(void *context, uint64_t frame_id) {
  (void)context;
  note_release(NULL, frame_id);
  gpr_error err;
  gpr_publish_options o = {frame_id, 0, NULL, 0, note_release, NULL};
  if (republished < 4u && publish_int32_column(republisher, "v", 0, 2, o, &err) == 0) republished++;
}

static void test_release_callback_publishes(void) {
  endpoints e;
  endpoints_open(&e, "r-", 16u);
  gpr_producer *p = republisher = e.p;
  gpr_consumer *c = e.c;
  gpr_error err;
  gpr_publish_options o = {0, 0, NULL, 0, publish_again, NULL};
  gpr_frame *f[3];
  reported_count = 0;
  for (uint32_t i = 0; i < 3; i++) CHECK(publish_int32_column(p, "v", 0, 4, o, &err) == 0);
  for (uint32_t i = 0; i < 3; i++) CHECK(gpr_consumer_next(c, 0, &f[i], &err) == 0);
  gpr_frame_release(f[1]);
  gpr_frame_release(f[2]);
  CHECK(gpr_producer_reap(p) == 2 && reported_run(0, 2, 2)); /* behind held frame 1 */
  CHECK(republished == 2 && p->inflight_count == 3 && p->next_frame_id == 6);
  gpr_frame_release(f[0]);
  gpr_publish_options plain = {0, 0, NULL, 0, NULL, NULL};
  CHECK(publish_int32_column(p, "v", 0, 4, plain, &err) == 0); /* reaps frame 1 first: its on_release publishes id 6 */
  CHECK(republished == 3 && p->next_frame_id == 8);
  uint64_t seen = 0;
  for (gpr_frame *g = NULL; gpr_consumer_next(c, 0, &g, &err) == 0; gpr_frame_release(g))
    seen |= 1ull << g->frame_id;
  CHECK(seen == ((1ull << 4) | (1ull << 5) | (1ull << 6) | (1ull << 7)));
  CHECK(gpr_producer_drain(p, 1000, &err) == 0 && p->inflight_count == 0);
  endpoints_close(&e);
}

/* Rewrites entry `index`'s state word from a child process: w -> (w + add) with state `state`. */
static void rewrite_entry(gpr_segment *seg, uint32_t index, uint64_t add, uint32_t state) {
  pid_t child = fork();
  if (child == 0) {
    uint64_t *w = &seg->participants[index].state;
    __atomic_store_n(w, ((__atomic_load_n(w, __ATOMIC_SEQ_CST) + add) & ~(uint64_t)7u) | state, __ATOMIC_SEQ_CST);
    _exit(0);
  }
  CHECK(waitpid(child, NULL, 0) == child);
}

static int arena_exists(const char *ring, uint32_t index, uint32_t gen) {
  char name[GPR_SHM_NAME_MAX], path[GPR_SHM_NAME_MAX + 16];
  gpr_arena_shm_name(ring, index, gen, 0, name);
  snprintf(path, sizeof path, "/dev/shm%s", name);
  return access(path, F_OK) == 0;
}

/* A consumer that stays open lets go of a departed producer's arena once no
 * frame can refer to it (SPEC.md §9), and not while it holds one of its frames. */
static void test_departed_producers_arena_is_let_go(void) {
  endpoints e;
  gpr_error err;
  gpr_frame *held = NULL, *none = NULL;
  endpoints_open(&e, "departed", 4u);
  uint32_t pi = e.p->index, pg = e.p->gen;
  CHECK(publish_ints(e.p, 4, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &held, &err) == 0);
  gpr_producer_close(e.p);
  e.p = NULL;
  CHECK(arena_exists(e.name, pi, pg) && e.c->arena_count == 1); /* named while its frame is out */
  e.c->forget_due_ns = 0;
  CHECK_CODE(gpr_consumer_next(e.c, 0, &none, &err), GPR_E_RING_EMPTY);
  CHECK(e.c->arena_count == 1); /* held: kept */
  gpr_frame_release(held);
  gpr_sweep(&e.seg, NULL, NULL); /* frees the entry no slot refers to, removing its arena */
  CHECK(!arena_exists(e.name, pi, pg) && e.c->arena_count == 1);
  e.c->forget_due_ns = 0;
  CHECK_CODE(gpr_consumer_next(e.c, 0, &none, &err), GPR_E_RING_EMPTY);
  CHECK(e.c->arena_count == 0);
  endpoints_close(&e);
}

/* Entries changed under a live producer and consumer (SPEC.md §4, "Losing the
 * entry"): both fail with DETACHED, close quietly (the producer unlinking its
 * own arenas), and the participants opened after them, one in the consumer's
 * old entry, move more frames than the ring has slots. */
static void test_lost_entries(void) {
  endpoints e;
  gpr_error err;
  gpr_frame *f = NULL, *f2 = NULL;
  endpoints_open(&e, "lost", 4u);
  CHECK(publish_ints(e.p, 4, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &f, &err) == 0);
  uint32_t pi = e.p->index, pg = e.p->gen, ci = e.c->index;
  rewrite_entry(&e.seg, pi, 5ull << 32, GPR_PARTICIPANT_ACTIVE); /* another generation */
  rewrite_entry(&e.seg, ci, 0, GPR_PARTICIPANT_FREE);             /* while it holds f */
  CHECK_CODE(publish_ints(e.p, 4, 0, &err), GPR_E_DETACHED);
  CHECK_CODE(publish_ints(e.p, 4, 100, &err), GPR_E_DETACHED);
  CHECK_CODE(gpr_consumer_next(e.c, 0, &f, &err), GPR_E_DETACHED);
  CHECK(arena_exists(e.name, pi, pg));
  const uint8_t *v = NULL;
  CHECK(gpr_frame_host_buffer(f, 1, &v, &err) == 0);
  gpr_producer_close(e.p);
  CHECK(!arena_exists(e.name, pi, pg));
  /* Its arena removed under a frame still held: no consumer lets go of it while a slot refers to it, */
  char arena[GPR_SHM_NAME_MAX];
  gpr_arena_shm_name(e.seg.name, pi, pg, 0, arena);
  CHECK(!gpr_arena_removed(&e.seg, arena));
  /* and this one keeps it mapped until the release in any case. */
  e.c->forget_due_ns = 0;
  CHECK_CODE(gpr_consumer_next(e.c, 0, &f2, &err), GPR_E_DETACHED);
  int32_t last;
  memcpy(&last, v + 12, 4);
  CHECK(last == 3);
  gpr_consumer *fresh = NULL;
  CHECK(gpr_consumer_open(e.name, 0, &fresh, &err) == 0 && fresh->index == ci);
  CHECK(gpr_producer_open(e.name, NULL, &e.p, &err) == 0);
  int taken = 0;
  for (int i = 0; i < 10; i++) {
    gpr_frame *g = NULL;
    if (publish_ints(e.p, 4, 1000, &err) == 0 && gpr_consumer_next(fresh, 1000, &g, &err) == 0) {
      taken++;
      gpr_frame_release(g);
    }
  }
  CHECK(taken == 10);
  gpr_frame_release(f); /* its slot was repaired away: touches nothing */
  gpr_consumer_close(fresh);
  endpoints_close(&e);
}

/* Frames released to a producer that then lost its entry to damage (its
 * generation rewritten, still ACTIVE under its live pid): nobody will reap
 * them, so a sweep moves them on (SPEC.md §7 step 3), and a new producer
 * finds the ring free instead of blocked by them a lap later. */
static void test_released_frames_of_a_lost_producer(void) {
  endpoints e;
  gpr_error err;
  endpoints_open(&e, "orphan", 4u);
  gpr_frame *f[4] = {NULL};
  for (int i = 0; i < 4; i++) /* published first, released after: each publish reaps what it can */
    CHECK(publish_ints(e.p, 4, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &f[i], &err) == 0);
  for (int i = 0; i < 4; i++) gpr_frame_release(f[i]);
  rewrite_entry(&e.seg, e.p->index, 5ull << 32, GPR_PARTICIPANT_ACTIVE);
  gpr_sweep_report rep;
  CHECK(gpr_sweep(&e.seg, &rep, &err) == 0 && rep.recycled == 4);
  gpr_producer_close(e.p);
  CHECK(gpr_producer_open(e.name, NULL, &e.p, &err) == 0);
  for (int i = 0; i < 4; i++) CHECK(publish_ints(e.p, 4, 0, &err) == 0);
  endpoints_close(&e);
}

/* A stray write into an arena header (SPEC.md §9): the producer's next full
 * reap puts it back, so consumers that map the arena later accept it. */
static void test_arena_header_restored(void) {
  endpoints e;
  gpr_error err;
  gpr_frame *f = NULL;
  endpoints_open(&e, "header", 8u);
  CHECK(publish_ints(e.p, 4, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &f, &err) == 0);
  gpr_frame_release(f);
  gpr_arena_header *h = (gpr_arena_header *)e.p->pool.arenas[0].base, kept = *h;
  pid_t child = fork();
  if (child == 0) {
    h->magic = 0xbad;
    _exit(0);
  }
  CHECK(waitpid(child, NULL, 0) == child && h->magic == 0xbad);
  for (int i = 0; i < 200; i++) { /* more than a full reap's 128 publishes */
    CHECK(publish_ints(e.p, 4, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &f, &err) == 0);
    gpr_frame_release(f);
  }
  CHECK(memcmp(h, &kept, sizeof kept) == 0);
  endpoints_close(&e);
}

/* A producer publishing with `timeout_ms` (30 ms waits, or 0: tries 30 ms
 * apart), over and over, into a ring whose every slot a killed consumer held:
 * the sweep interval is counted across calls, so it still sweeps, finds the
 * dead consumer and publishes (SPEC.md §7). */
static void publish_behind_a_dead_consumer(int64_t timeout_ms) {
  endpoints e;
  endpoints_open(&e, timeout_ms ? "w-" : "t-", 2u);
  gpr_consumer_close(e.c);
  e.c = NULL;
  gpr_error err;
  for (int i = 0; i < 2; i++) CHECK(publish_ints(e.p, 1, 0, &err) == 0);
  pid_t child = fork();
  if (child == 0) {
    gpr_consumer *c = NULL;
    gpr_frame *f[2] = {NULL, NULL};
    if (gpr_consumer_open(e.name, 0, &c, NULL) != 0) _exit(1);
    for (int i = 0; i < 2; i++)
      if (gpr_consumer_next(c, 1000, &f[i], NULL) != 0) _exit(1);
    _exit(0); /* holding both leases, without detaching */
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  int tries = 0, rc = -1;
  for (; tries < 60 && rc != 0; tries++) {
    rc = publish_ints(e.p, 1, timeout_ms, &err);
    CHECK(rc == 0 || rc == -(int)(timeout_ms ? GPR_E_TIMEOUT : GPR_E_RING_FULL));
    if (rc != 0 && timeout_ms == 0) usleep(30000);
  }
  CHECK(rc == 0);
  endpoints_close(&e);
}

/* A sweep that marked entry `index` of `e`'s ring dead and then stalled
 * before acting on the mark; meanwhile another sweep freed the entry. Returns
 * the stalled sweep's marks (free them). */
static uint64_t *mark_then_free(endpoints *e, uint32_t index) {
  pid_t child = fork();
  if (child == 0) {
    gpr_consumer *c = NULL;
    _exit(gpr_consumer_open(e->name, 0, &c, NULL) == 0 && c->index == index ? 0 : 1); /* without detaching */
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0);
  uint64_t *dead = (uint64_t *)calloc(e->seg.participant_capacity, sizeof *dead);
  gpr_sweep_report r;
  memset(&r, 0, sizeof r);
  gpr_sweep_mark(&e->p->seg, dead, &r);
  CHECK(r.found_dead == 1 && gpr_pstate(dead[index]) == GPR_PARTICIPANT_DEAD);
  CHECK(gpr_sweep(&e->p->seg, &r, NULL) == 0 && r.freed == 1);
  return dead;
}

/* The stalled sweep goes on after a new consumer attached at the entry and
 * took a frame: slot words name no generation, so the newcomer's lease looks
 * exactly like one the dead consumer left. The sweep must leave it alone and
 * must not free the entry (SPEC.md §7, Acting on a marked entry). Before, it
 * released the lease under the reader, whose producer could then reuse the
 * memory, and a work-queue frame could reach two consumers. */
static void test_stale_sweep_spares_a_new_occupant(void) {
  endpoints e;
  endpoints_open(&e, "stale-", 4u);
  gpr_consumer_close(e.c); /* its entry, 1, is the one that dies and is taken again */
  uint64_t *dead = mark_then_free(&e, 1);
  gpr_error err;
  CHECK(gpr_consumer_open(e.name, 0, &e.c, &err) == 0 && e.c->index == 1);
  CHECK(publish_ints(e.p, 1, 0, &err) == 0);
  gpr_frame *f = NULL;
  CHECK(gpr_consumer_next(e.c, 0, &f, &err) == 0);
  uint32_t refs[8] = {0};
  gpr_sweep_report r;
  memset(&r, 0, sizeof r);
  gpr_sweep_owners(&e.p->seg, dead, refs, &r);
  CHECK(r.released == 0 && r.redelivered == 0);
  CHECK(f && gpr_ring_holds(&e.c->seg, e.c->index, f->pos));
  CHECK(gpr_sweep_free(&e.p->seg, 1, dead[1]) == 0);
  CHECK(gpr_pstate(gpr_participant_word(&e.p->seg, 1)) == GPR_PARTICIPANT_ACTIVE);
  gpr_frame_release(f);
  free(dead);
  endpoints_close(&e);
}

/* A claim taken back before the hand-over (a stalled sweep that judged a
 * previous occupant of the entry dead, or damage): the frame is READY for
 * others again, so the consumer must not hand it over too (SPEC.md §5.2,
 * Confirm). Before, it did: the frame came twice. */
static void test_claim_taken_back(void) {
  endpoints e;
  endpoints_open(&e, "back-", 4u);
  gpr_error err;
  CHECK(publish_ints(e.p, 1, 0, &err) == 0);
  gpr_frame_ref ref;
  uint64_t pos = 0;
  CHECK(gpr_ring_try_claim(&e.c->seg, e.c->index, &ref, &pos) == 0);
  CHECK(gpr_ring_unclaim_as(&e.c->seg, e.c->index, pos, GPR_SLOT_CLAIMED) == 0);
  gpr_frame *f = NULL;
  CHECK(gpr_consumer_hand_over(e.c, pos, &ref, &f, &err) == GPR_CLAIM_TAKEN_BACK && f == NULL);
  CHECK(gpr_consumer_next(e.c, 0, &f, &err) == 0 && f && f->pos == pos); /* redelivered: it comes once */
  gpr_frame_release(f);
  endpoints_close(&e);
}

/* The same take-back from another process, while gpr_consumer_next runs: the
 * call claims again and returns the frame, no error (SPEC.md §5.2, Confirm);
 * one that may not wait says RING_EMPTY, and the frame comes with the next.
 * Before, it failed with FRAME_STATE. The sweeper wins the race for some
 * frames only (and may get no CPU for a while on a busy machine): frames go
 * until it took ENOUGH_TAKEN claims back, at most MAX_FRAMES. */
static void test_next_claims_again_after_a_take_back(void) {
  enum { ENOUGH_FRAMES = 30, ENOUGH_TAKEN = 5, MAX_FRAMES = 20000 };
  endpoints e;
  endpoints_open(&e, "back-again-", 4u);
  uint32_t *took = (uint32_t *)mmap(NULL, sizeof *took, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(took != MAP_FAILED);
  pid_t child = fork();
  if (child == 0)
    for (uint64_t pos = 0;; pos++)
      if (stalled_sweeper_take_back(&e.seg, pos) == GPR_TOOK_BACK) __atomic_add_fetch(took, 1u, __ATOMIC_RELAXED);
  gpr_error err;
  uint64_t k = 0;
  for (; k < MAX_FRAMES && (k < ENOUGH_FRAMES || __atomic_load_n(took, __ATOMIC_RELAXED) < ENOUGH_TAKEN); k++) {
    usleep(100); /* the sweeper's turn to reach position k */
    gpr_frame *f = NULL;
    CHECK(publish_ints(e.p, 1, 0, &err) == 0);
    /* Every other frame without waiting: a claim taken back then says RING_EMPTY, and the frame comes
     * with a next call that may wait (the sweeper makes it findable again a moment after its CAS). */
    int rc = gpr_consumer_next(e.c, k % 2 ? 0 : 1000, &f, &err);
    if (rc == -(int)GPR_E_RING_EMPTY) rc = gpr_consumer_next(e.c, 1000, &f, &err);
    if (rc != 0) fprintf(stderr, "frame %llu: %s: %s\n", (unsigned long long)k, gpr_code_name(err.code), err.message);
    CHECK(rc == 0 && f && f->pos == k);
    if (f) gpr_frame_release(f);
    CHECK(gpr_consumer_next(e.c, 0, &f, &err) == -(int)GPR_E_RING_EMPTY); /* it came once */
    gpr_producer_reap(e.p);
  }
  kill(child, SIGKILL);
  CHECK(waitpid(child, NULL, 0) == child);
  fprintf(stderr, "test_next_claims_again_after_a_take_back: %u of %llu claims taken back\n", *took, (unsigned long long)k);
  CHECK(*took > 0);
  munmap(took, sizeof *took);
  endpoints_close(&e);
}

/* `frames` frames through e's ring: published, taken, released, reaped. */
static void pass_frames(endpoints *e, int frames) {
  gpr_error err;
  for (int k = 0; k < frames; k++) {
    gpr_frame *f = NULL;
    CHECK(publish_ints(e->p, 1, 0, &err) == 0 && gpr_consumer_next(e->c, 0, &f, &err) == 0);
    gpr_frame_release(f);
    gpr_producer_reap(e->p);
  }
}

/* A sweeper that read the window's words while producers went round the ring
 * (it lost the CPU, or reads slowly) holds words from several laps: on that
 * picture healthy slots look laps apart, that is, damaged. Step 2 acts only on
 * a still picture, and judges and CASes from the words it read, never from
 * words read later against it (SPEC.md §7, "A still window"). Before, such a
 * sweep reset healthy slots and hints laps back: positions went backwards,
 * broadcast subscribers missed frames and took them out of order, and a
 * work-queue ring kept READY frames no claim reached. */
static void test_moving_ring_is_not_repaired(void) {
  endpoints e;
  endpoints_open(&e, "moving-", 8u);
  pass_frames(&e, 3);
  int64_t diffs[8];
  uint64_t words[8], now[8];
  gpr_slot_consensus read = gpr_sweep_consensus(&e.p->seg, 0, 8, diffs, words);
  CHECK(gpr_window_still(&e.p->seg, 0, 8, words, &read));
  pass_frames(&e, 5 * 8); /* five laps while the sweeper was away */
  CHECK(!gpr_window_still(&e.p->seg, 0, 8, words, &read));
  for (uint32_t i = 0; i < 8; i++) now[i] = gpr_slot_load(&e.p->seg.slots[i]);
  for (uint32_t i = 0; i < 8; i++) CHECK(gpr_sweep_corrupt(&e.p->seg, i, words[i], &read) == 0);
  for (uint32_t i = 0; i < 8; i++) CHECK(gpr_slot_load(&e.p->seg.slots[i]) == now[i]);
  CHECK(gpr_sweep_damage(&e.p->seg, 0, 8, diffs, words) == 0); /* still now, and healthy */
  gpr_error err;
  gpr_frame *f = NULL;
  CHECK(publish_ints(e.p, 1, 0, &err) == 0 && gpr_consumer_next(e.c, 0, &f, &err) == 0 && f->pos == 3 + 5 * 8);
  gpr_frame_release(f);
  endpoints_close(&e);
}

/* Waits shorter than the sweep interval: each wait counted its own before. */
static void test_short_waits_still_sweep(void) { publish_behind_a_dead_consumer(30); }

/* A producer that only tries (timeout 0) never waits: its tries sweep when a
 * sweep is due. Before, it found the ring full for as long as nobody else swept. */
static void test_tries_alone_still_sweep(void) { publish_behind_a_dead_consumer(0); }

int main(void) {
  endpoints e;
  endpoints_open(&e, "", 4u);
  test_ownership_and_release(e.p, e.c);
  test_full_and_empty(e.p, e.c, 4);
  test_refused_buffers(e.p);
  test_arena_names();
  test_damaged_frame_is_dropped(e.p, e.c);
  test_export_holds_the_lease(e.p, e.c);
  test_export_offsets_are_private(e.p, e.c);
  test_export_checks_dictionary_indices(e.p, e.c);
  gpr_consumer_close(e.c);
  e.c = NULL;
  test_frame_outlives_its_consumer(e.p, e.name);
  test_squatted_arena_name();
  test_inflight_queue();
  test_release_callback_publishes();
  test_lost_entries();
  test_departed_producers_arena_is_let_go();
  test_released_frames_of_a_lost_producer();
  test_arena_header_restored();
  test_short_waits_still_sweep();
  test_tries_alone_still_sweep();
  test_stale_sweep_spares_a_new_occupant();
  test_claim_taken_back();
  test_next_claims_again_after_a_take_back();
  test_moving_ring_is_not_repaired();
  endpoints_close(&e);
  return CHECK_DONE();
}
