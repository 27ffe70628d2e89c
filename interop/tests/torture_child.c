/* C child of the kill -9 torture run (test/torture.test.ts), killed at any
 * moment, beside the Node and Python children (test/helpers/torture-child.mjs,
 * interop/python/tests/children/torture.py), with the same frames and logs:
 *
 *   torture_child produce RING ID LOG   says "ready", publishes frames ID:0, ID:1, ...
 *                                       (tag ID << 32 | seq) forever, appending seq to LOG
 *                                       after each publish returned
 *   torture_child consume RING LOG      says "ready", takes frames forever (gpr_consumer_next:
 *                                       asleep on the futex); checks each one's columns against
 *                                       its tag and appends the tag (or "BAD tag") to LOG
 *                                       before releasing it
 *
 * On a broadcast ring consumers subscribe with the on_slow policy
 * GPURING_TORTURE_ON_SLOW names (block, the default; drop-oldest; evict), and
 * log "MISSED n" where gpr_consumer_next says n frames were dropped for them
 * (FRAMES_MISSED, EVICTED). With GPURING_TORTURE_START=oldest they also take
 * the frames still in the ring when they join.
 *
 * The frame: producer int32, seq int32, check utf8
 * "producer:seq:(seq * 2654435761) mod 2^32", one row. It exits only on an
 * error, which the run reports. */
#include <gpuring.h> /* first: it sets the feature macros the system headers read */
#include <inttypes.h>

static void fail(const char *what, const gpr_error *e) {
  fprintf(stderr, "torture_child: %s: %s: %s\n", what, gpr_code_name(e->code), e->message);
  exit(1);
}

static int check_text(char *out, size_t size, int32_t producer, int32_t seq) {
  return snprintf(out, size, "%" PRId32 ":%" PRId32 ":%" PRIu32, producer, seq,
                  (uint32_t)((uint64_t)(uint32_t)seq * 2654435761u));
}

static void log_line(int fd, const char *line) {
  size_t n = strlen(line);
  if (write(fd, line, n) != (ssize_t)n) exit(3);
}

static void ready(void) {
  printf("ready\n");
  fflush(stdout);
}

/* Buffers of the one allocation: producer at 0, seq at 64, offsets at 128, text at 192. */
static void publish_one(gpr_producer *p, int32_t id, int32_t seq) {
  gpr_error err;
  char text[48];
  int32_t offsets[2] = {0, check_text(text, sizeof text, id, seq)};
  gpr_allocation a;
  if (gpr_producer_alloc(p, 192u + (uint64_t)offsets[1], &a, &err) != 0) fail("alloc", &err);
  memcpy(a.ptr, &id, 4);
  memcpy(a.ptr + 64, &seq, 4);
  memcpy(a.ptr + 128, offsets, sizeof offsets);
  memcpy(a.ptr + 192, text, (size_t)offsets[1]);
  gpr_node_desc nodes[3] = {{"producer", 8, "i", 1, NULL, 0, 0, GPR_NODE_NULLABLE, -1, 2, 1, 0, 0},
                            {"seq", 3, "i", 1, NULL, 0, 0, GPR_NODE_NULLABLE, -1, 2, 1, 0, 0},
                            {"check", 5, "u", 1, NULL, 0, 0, GPR_NODE_NULLABLE, -1, 3, 1, 0, 0}};
  gpr_body_buffer b[7];
  memset(b, 0, sizeof b); /* b[0], b[2], b[4]: no validity buffers */
  const struct { uint32_t buffer; uint64_t at, length; } described[4] = {
      {1, 0, 4}, {3, 64, 4}, {5, 128, sizeof offsets}, {6, 192, (uint64_t)offsets[1]}};
  for (int k = 0; k < 4; k++)
    if (gpr_producer_host_buffer(p, &a, described[k].at, described[k].length, &b[described[k].buffer], &err) != 0)
      fail("describe", &err);
  gpr_frame_desc d = {1, 3, 0, 3, 7, nodes, b, NULL, 0, 0, {0}};
  gpr_publish_options o = {(uint64_t)(uint32_t)id << 32 | (uint32_t)seq, 120000, &a, 1, NULL, NULL};
  if (gpr_producer_publish(p, &d, &o, NULL, &err) != 0) fail("publish", &err);
}

static void produce(const char *ring, int32_t id, int log) {
  gpr_error err;
  gpr_producer *p = NULL;
  gpr_producer_options o = {0, 10000};
  if (gpr_producer_open(ring, &o, &p, &err) != 0) fail("open", &err);
  ready();
  for (int32_t seq = 0;; seq++) {
    publish_one(p, id, seq);
    char line[24];
    snprintf(line, sizeof line, "%" PRId32 "\n", seq);
    log_line(log, line);
  }
}

/* The row's value of int32 column `node`, whose data is buffer `data`; 0 with `ok` cleared when absent or null. */
static int32_t int32_at(const gpr_frame *f, uint32_t node, uint32_t data, int *ok) {
  gpr_error err;
  const gpr_node_desc *n = &f->desc.nodes[node];
  const uint8_t *validity = NULL, *values = NULL;
  int32_t v = 0;
  if (n->format_length != 1 || n->format[0] != 'i' || gpr_frame_host_buffer(f, data - 1u, &validity, &err) != 0 ||
      gpr_frame_host_buffer(f, data, &values, &err) != 0 || !values ||
      (validity && !((validity[n->offset / 8u] >> (n->offset % 8u)) & 1u))) {
    *ok = 0;
    return 0;
  }
  memcpy(&v, values + 4u * n->offset, 4);
  return v;
}

/* Whether the frame holds the one row its tag names. */
static int frame_matches_tag(const gpr_frame *f) {
  gpr_error err;
  int ok = f->desc.row_count == 1 && f->desc.root_count == 3 && f->desc.buffer_count == 7;
  if (!ok) return 0;
  int32_t producer = int32_at(f, 0, 1, &ok), seq = int32_at(f, 1, 3, &ok);
  const gpr_node_desc *check = &f->desc.nodes[2];
  const uint8_t *offsets = NULL, *chars = NULL;
  if (!ok || check->format_length != 1 || check->format[0] != 'u' || gpr_frame_host_buffer(f, 5, &offsets, &err) != 0 ||
      gpr_frame_host_buffer(f, 6, &chars, &err) != 0 || !offsets)
    return 0;
  int32_t span[2];
  memcpy(span, offsets + 4u * check->offset, sizeof span);
  char want[48];
  int n = check_text(want, sizeof want, producer, seq);
  return f->user_tag == ((uint64_t)(uint32_t)producer << 32 | (uint32_t)seq) && span[0] >= 0 &&
         span[1] - span[0] == n && (uint64_t)span[1] <= f->desc.buffers[6].length &&
         (n == 0 || memcmp(chars + span[0], want, (size_t)n) == 0);
}

static uint32_t on_slow_policy(void) {
  const char *name = getenv("GPURING_TORTURE_ON_SLOW");
  if (!name || strcmp(name, "block") == 0) return GPR_ON_SLOW_BLOCK;
  if (strcmp(name, "drop-oldest") == 0) return GPR_ON_SLOW_DROP_OLDEST;
  if (strcmp(name, "evict") == 0) return GPR_ON_SLOW_EVICT;
  fprintf(stderr, "torture_child: GPURING_TORTURE_ON_SLOW: unknown policy '%s'\n", name);
  exit(2);
}

static void consume(const char *ring, int log) {
  gpr_error err;
  gpr_consumer *c = NULL;
  const char *start = getenv("GPURING_TORTURE_START");
  gpr_consumer_options o = {10000, on_slow_policy(), start && strcmp(start, "oldest") == 0};
  if (gpr_consumer_open_with(ring, &o, &c, &err) != 0) fail("open", &err);
  ready();
  for (;;) {
    gpr_frame *f = NULL;
    if (gpr_consumer_next(c, 60000, &f, &err) != 0) {
      if (err.code == GPR_E_RING_EMPTY || err.code == GPR_E_TIMEOUT) continue;
      if (err.code != GPR_E_FRAMES_MISSED && err.code != GPR_E_EVICTED) fail("next", &err);
      char line[40];
      snprintf(line, sizeof line, "MISSED %" PRIu64 "\n", gpr_consumer_missed(c));
      log_line(log, line);
      continue;
    }
    char line[40];
    snprintf(line, sizeof line, "%s%" PRIu64 "\n", frame_matches_tag(f) ? "" : "BAD ", f->user_tag);
    log_line(log, line);
    gpr_frame_release(f);
  }
}

int main(int argc, char **argv) {
  int produces = argc == 5 && strcmp(argv[1], "produce") == 0;
  if (!produces && !(argc == 4 && strcmp(argv[1], "consume") == 0)) {
    fprintf(stderr, "usage: torture_child produce RING ID LOG | consume RING LOG\n");
    return 2;
  }
  int log = open(argv[argc - 1], O_WRONLY | O_APPEND | O_CREAT, 0600);
  if (log < 0) return 3;
  if (produces) produce(argv[2], (int32_t)strtol(argv[3], NULL, 10), log);
  else consume(argv[2], log);
  return 0;
}
