/* Writes the golden segment images of fixtures/segments into DIR (the
 * fixtures generator, scripts/fixtures.ts, runs this and guards the files):
 *
 *   fresh             a segment nobody has attached to
 *   mid-stream        producer 0 published frames 1..6 (one int32 "seq" column,
 *                     seq = tag = id - 1); consumer 1 released frame 1 (reaped)
 *                     and 2 (not yet reaped), holds 3, claimed 4; 5 and 6 queued
 *   dead-participant  the same, with consumer 1 dead
 *   garbage-slot      dead-participant with frame 5's record naming producer 4000
 *   damaged-hints     mid-stream with both hints and frame 6's sequence (still
 *                     congruent to its slot) moved 2^40 positions back: a sweep
 *                     puts the hints back and resets frame 6's slot (SPEC.md §7
 *                     step 2), so frame 5 arrives and frame 6 is dropped
 *   passed-slot       mid-stream with frame 5's slot EMPTY at its position, as if
 *                     producers had passed it: a sweep moves it on, so frame 6
 *                     arrives (frame 5 is gone)
 *   corrupt-*         fresh with one header rule broken
 *   broadcast-mid-stream  a broadcast ring (SPEC.md §5.4): producer 0 published
 *                     frames 1..6 (as above) to subscribers 1 and 2; subscriber 1
 *                     released 1 and 2 and holds 3; subscriber 2 released 1; frame 1
 *                     was reaped
 *   broadcast-dead-subscriber  the same, with subscriber 2 dead
 *
 * Each image is NAME.segment.bin plus the producer's arena NAME.p0g1.a0.bin,
 * and NAME.expect says what every language must observe (fixtures/README.md).
 * Process-specific fields are normalized: times and creator pid are 0, the
 * PID namespace is 0 (a loader writes its own), and participant pids are
 * GPR_IMAGE_ALIVE (a loader writes its own pid and start time: alive) or
 * GPR_IMAGE_DEAD (a pid no process can have).
 * Usage: segment_images DIR */
#include "gpuring.h"
#include "check.h"
#include "int32_frame.h"
#include "segment_image.h"

#define GPR_IMAGE_DEAD 0x7FFFFFF0u

static const char *out_dir;

static void write_file(const char *image, const char *suffix, const void *data, size_t n) {
  char path[512];
  snprintf(path, sizeof path, "%s/%s.%s", out_dir, image, suffix);
  CHECK(write_whole_file(path, data, n) == 0);
}

static uint8_t *read_shm(const char *name, size_t *n) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  uint8_t *b = read_file(path, n);
  CHECK(b != NULL);
  return b;
}

/* The segment's bytes with process-specific fields normalized. */
/* Entry `victim` (the consumer the dead-* images kill) gets `consumer_pid`; every other attached entry is alive. */
static uint32_t victim = 1;

static uint8_t *segment_image(const char *ring, size_t *n, uint32_t consumer_pid) {
  char shm[GPR_SHM_NAME_MAX];
  gpr_segment_shm_name(ring, shm);
  uint8_t *b = read_shm(shm, n);
  gpr_segment_header *h = (gpr_segment_header *)b;
  h->pid_namespace = 0;
  h->created_unix_ns = 0;
  h->creator_pid = 0;
  gpr_participant *p = (gpr_participant *)(b + h->participants_offset);
  for (uint32_t i = 0; i < h->participant_capacity; i++) {
    if (p[i].pid) p[i].pid = i == victim ? consumer_pid : GPR_IMAGE_ALIVE;
    p[i].start_time = 0;
    p[i].attached_unix_ns = 0;
  }
  return b;
}

static void write_segment(const char *image, const char *ring, uint32_t consumer_pid,
                          void (*damage)(uint8_t *, size_t *)) {
  size_t n;
  uint8_t *b = segment_image(ring, &n, consumer_pid);
  if (damage) damage(b, &n);
  write_file(image, "segment.bin", b, n);
  free(b);
}

static void write_arena(const char *image, const char *ring) {
  char shm[GPR_SHM_NAME_MAX];
  size_t n;
  gpr_arena_shm_name(ring, 0, 1, 0, shm);
  uint8_t *b = read_shm(shm, &n);
  ((gpr_arena_header *)b)->owner_pid = 0;
  write_file(image, "p0g1.a0.bin", b, n);
  free(b);
}

static void write_expect(const char *image, const char *lines) {
  write_file(image, "expect", lines, strlen(lines));
}

static void publish_seq(gpr_producer *p, int32_t seq) {
  gpr_error err;
  gpr_publish_options o = {(uint64_t)seq, 0, NULL, 0, NULL, NULL};
  CHECK(publish_int32_column(p, "seq", seq, 1, o, &err) == 0);
}

/* Frames 1..6 in the states the header comment lists. */
static void make_stream(const char *ring) {
  gpr_error err;
  gpr_producer *p = NULL;
  gpr_consumer *c = NULL;
  gpr_frame *f = NULL;
  gpr_producer_options po = {64u << 10, 0};
  CHECK(gpr_producer_open(ring, &po, &p, &err) == 0 && p->index == 0 && p->gen == 1);
  CHECK(gpr_consumer_open(ring, 0, &c, &err) == 0 && c->index == 1);
  for (int32_t k = 0; k < 6; k++) publish_seq(p, k);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0);
  gpr_frame_release(f);
  CHECK(gpr_producer_reap(p) == 1);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0);
  gpr_frame_release(f);
  CHECK(gpr_consumer_next(c, 0, &f, &err) == 0); /* frame 3: leased, kept */
  gpr_frame_ref ref;
  uint64_t pos;
  CHECK(gpr_ring_try_claim(&c->seg, c->index, &ref, &pos) == 0 && ref.frame_id == 4);
  /* Nobody detaches: the images are taken with both still attached; the
   * process exits without cleaning up, after the caller copied the files. */
}

/* A broadcast ring with frames 1..6 in the states the header comment lists. */
static void make_broadcast(const char *ring) {
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options so = {8u, 4u, 0, 0, 0, GPR_DELIVERY_ALL};
  CHECK(gpr_segment_create(&seg, ring, &so, &err) == 0);
  gpr_producer *p = NULL;
  gpr_consumer *a = NULL, *b = NULL;
  gpr_frame *f = NULL;
  gpr_producer_options po = {64u << 10, 0};
  CHECK(gpr_producer_open(ring, &po, &p, &err) == 0 && p->index == 0 && p->gen == 1);
  CHECK(gpr_consumer_open(ring, 0, &a, &err) == 0 && a->index == 1);
  CHECK(gpr_consumer_open(ring, 0, &b, &err) == 0 && b->index == 2);
  for (int32_t k = 0; k < 6; k++) publish_seq(p, k);
  for (int k = 0; k < 2; k++) {
    CHECK(gpr_consumer_next(a, 0, &f, &err) == 0);
    gpr_frame_release(f);
  }
  CHECK(gpr_consumer_next(a, 0, &f, &err) == 0 && f->frame_id == 3); /* held */
  CHECK(gpr_consumer_next(b, 0, &f, &err) == 0);
  gpr_frame_release(f);
  CHECK(gpr_producer_reap(p) == 1);
  gpr_segment_close(&seg);
}

static void bad_magic(uint8_t *b, size_t *n) { (void)n; b[0] ^= 0xFF; }
static void bad_version(uint8_t *b, size_t *n) { (void)n; ((gpr_segment_header *)b)->ready_version += 1u << 16; }
static void not_ready(uint8_t *b, size_t *n) { (void)n; ((gpr_segment_header *)b)->ready_version = 0; }
static void bad_layout(uint8_t *b, size_t *n) { (void)n; ((gpr_segment_header *)b)->layout_hash ^= 1; }
static void truncated(uint8_t *b, size_t *n) { (void)b; *n -= 128; }
static void other_namespace(uint8_t *b, size_t *n) { (void)n; ((gpr_segment_header *)b)->pid_namespace = 1; }

static void garbage_slot(uint8_t *b, size_t *n) {
  (void)n;
  gpr_segment_header *h = (gpr_segment_header *)b;
  gpr_slot *s = (gpr_slot *)(b + h->slots_offset) + 4; /* position 4: frame 5 */
  s->ref.producer = 4000;
}

static void damaged_hints(uint8_t *b, size_t *n) {
  (void)n;
  gpr_segment_header *h = (gpr_segment_header *)b;
  gpr_control *c = (gpr_control *)(b + h->control_offset);
  const uint64_t back = 1ull << 40;
  c->tail = (c->tail - back) & GPR_SEQ_MASK;
  c->head = (c->head - back) & GPR_SEQ_MASK;
  gpr_slot *s = (gpr_slot *)(b + h->slots_offset) + 5; /* position 5: frame 6 */
  s->word = gpr_slot_word((5u - back) & GPR_SEQ_MASK, gpr_word_state(s->word), gpr_word_owner(s->word));
}

static void passed_slot(uint8_t *b, size_t *n) {
  (void)n;
  gpr_segment_header *h = (gpr_segment_header *)b;
  gpr_slot *s = (gpr_slot *)(b + h->slots_offset) + 4; /* position 4: frame 5 */
  s->word = gpr_slot_word(4u, GPR_SLOT_EMPTY, 0);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: segment_images DIR\n");
    return 2;
  }
  out_dir = argv[1];
  char ring[32];
  snprintf(ring, sizeof ring, "%s", GPR_IMAGE_RING);
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options so = {8u, 4u, 0, 0, 0, GPR_DELIVERY_EACH};
  CHECK(gpr_segment_create(&seg, ring, &so, &err) == 0);
  write_segment("fresh", ring, 0, NULL);
  write_expect("fresh", "open OK\nstates EMPTY=8 WRITING=0 READY=0 CLAIMED=0 LEASED=0 RELEASED=0\n"
                        "sweep found_dead=0 released=0 redelivered=0 recycled=0\nempty\n");
  const struct { const char *name; void (*damage)(uint8_t *, size_t *); const char *code; } bad[] = {
      {"corrupt-foreign", bad_magic, "SEGMENT_FOREIGN"},   {"corrupt-version", bad_version, "SEGMENT_VERSION"},
      {"corrupt-not-ready", not_ready, "SEGMENT_NOT_READY"}, {"corrupt-layout", bad_layout, "SEGMENT_LAYOUT"},
      {"corrupt-truncated", truncated, "SEGMENT_TRUNCATED"}, {"corrupt-namespace", other_namespace, "PID_NAMESPACE"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char expect[64];
    write_segment(bad[i].name, ring, 0, bad[i].damage);
    snprintf(expect, sizeof expect, "open %s\n", bad[i].code);
    write_expect(bad[i].name, expect);
  }
  make_stream(ring);
  write_segment("mid-stream", ring, GPR_IMAGE_ALIVE, NULL);
  write_arena("mid-stream", ring);
  write_expect("mid-stream", "open OK\n" "states EMPTY=3 WRITING=0 READY=2 CLAIMED=1 LEASED=1 RELEASED=1\n"
                             "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE alive\n"
                             "sweep found_dead=0 released=0 redelivered=0 recycled=0\n"
                             "frame 5 4 4\nframe 6 5 5\nempty\n");
  write_segment("damaged-hints", ring, GPR_IMAGE_ALIVE, damaged_hints);
  write_arena("damaged-hints", ring);
  write_expect("damaged-hints", "open OK\n" "states EMPTY=3 WRITING=0 READY=2 CLAIMED=1 LEASED=1 RELEASED=1\n"
                                "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE alive\n"
                                "sweep found_dead=0 released=0 redelivered=0 recycled=0\n"
                                "frame 5 4 4\nempty\n");
  write_segment("passed-slot", ring, GPR_IMAGE_ALIVE, passed_slot);
  write_arena("passed-slot", ring);
  write_expect("passed-slot", "open OK\n" "states EMPTY=4 WRITING=0 READY=1 CLAIMED=1 LEASED=1 RELEASED=1\n"
                              "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE alive\n"
                              "sweep found_dead=0 released=0 redelivered=0 recycled=0\n"
                              "frame 6 5 5\nempty\n");
  write_segment("dead-participant", ring, GPR_IMAGE_DEAD, NULL);
  write_arena("dead-participant", ring);
  write_expect("dead-participant", "open OK\n" "states EMPTY=3 WRITING=0 READY=2 CLAIMED=1 LEASED=1 RELEASED=1\n"
                                   "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE dead\n"
                                   "sweep found_dead=1 released=1 redelivered=1 recycled=0\n"
                                   "frame 5 4 4\nframe 6 5 5\nframe 4 3 3\nempty\n");
  write_segment("garbage-slot", ring, GPR_IMAGE_DEAD, garbage_slot);
  write_arena("garbage-slot", ring);
  write_expect("garbage-slot", "open OK\n" "states EMPTY=3 WRITING=0 READY=2 CLAIMED=1 LEASED=1 RELEASED=1\n"
                               "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE dead\n"
                               "sweep found_dead=1 released=1 redelivered=1 recycled=0\n"
                               "error FRAME_INVALID\nframe 6 5 5\nframe 4 3 3\nempty\n");
  gpr_segment_close(&seg);
  char shm[GPR_SHM_NAME_MAX];
  gpr_segment_unlink(ring, NULL);
  make_broadcast(ring);
  victim = 2;
  write_segment("broadcast-mid-stream", ring, GPR_IMAGE_ALIVE, NULL);
  write_arena("broadcast-mid-stream", ring);
  write_expect("broadcast-mid-stream", "open OK\n" "states EMPTY=3 WRITING=0 READY=5 CLAIMED=0 LEASED=0 RELEASED=0\n"
                                       "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE alive\n"
                                       "subscriber 1 held=1 unread=3 missed=0\n"
                                       "participant 2 1 ACTIVE alive\nsubscriber 2 held=0 unread=5 missed=0\n"
                                       "sweep found_dead=0 released=0 redelivered=0 recycled=0\nempty\n");
  write_segment("broadcast-dead-subscriber", ring, GPR_IMAGE_DEAD, NULL);
  write_arena("broadcast-dead-subscriber", ring);
  write_expect("broadcast-dead-subscriber", "open OK\n" "states EMPTY=3 WRITING=0 READY=5 CLAIMED=0 LEASED=0 RELEASED=0\n"
                                            "participant 0 1 ACTIVE alive\nparticipant 1 1 ACTIVE alive\n"
                                            "subscriber 1 held=1 unread=3 missed=0\n"
                                            "participant 2 1 ACTIVE dead\nsubscriber 2 held=0 unread=5 missed=0\n"
                                            "sweep found_dead=1 released=5 redelivered=0 recycled=0\nempty\n");
  gpr_segment_unlink(ring, NULL);
  gpr_arena_shm_name(ring, 0, 1, 0, shm);
  shm_unlink(shm);
  return CHECK_DONE();
}
