/* A C producer of host frames: publishes FRAMES frames of ROWS rows with
 * three columns, then waits until consumers released them all.
 *
 *   id     int64    frame * ROWS + row
 *   score  float64  id / 4, null where id % 7 == 0
 *   name   utf8     "row-<id>"
 *
 * Usage: producer RING [FRAMES [ROWS]]   (creates RING if it does not exist,
 * and removes it at the end if it did). Every column of a frame lives in one
 * arena allocation that the frame owns: gpuring frees it when the frame is
 * released (gpuring/producer.h). */
#include <gpuring.h>
#include <inttypes.h>

static void fail(const char *what, const gpr_error *e) {
  fprintf(stderr, "producer: %s: %s: %s\n", what, gpr_code_name(e->code), e->message);
  exit(1);
}

/* Byte offsets of each buffer inside the frame's one allocation. */
typedef struct layout {
  uint64_t id, score_validity, score, name_offsets, name_chars, total;
} layout;

static uint64_t pad64(uint64_t n) { return (n + 63u) & ~63ull; }

static layout plan(uint64_t first_id, uint32_t rows) {
  layout l;
  uint64_t chars = 0;
  for (uint32_t r = 0; r < rows; r++) chars += (uint64_t)snprintf(NULL, 0, "row-%" PRIu64, first_id + r);
  l.id = 0;
  l.score_validity = pad64(l.id + 8ull * rows);
  l.score = pad64(l.score_validity + (rows + 7u) / 8u);
  l.name_offsets = pad64(l.score + 8ull * rows);
  l.name_chars = pad64(l.name_offsets + 4ull * (rows + 1u));
  l.total = l.name_chars + chars;
  return l;
}

static int64_t fill(uint8_t *p, const layout *l, uint64_t first_id, uint32_t rows) {
  int64_t nulls = 0;
  int32_t at = 0;
  memset(p + l->score_validity, 0, (rows + 7u) / 8u);
  for (uint32_t r = 0; r < rows; r++) {
    int64_t id = (int64_t)(first_id + r);
    double score = (double)id / 4.0;
    memcpy(p + l->id + 8u * r, &id, 8);
    memcpy(p + l->score + 8u * r, &score, 8);
    if (id % 7 == 0) nulls++;
    else p[l->score_validity + r / 8u] |= (uint8_t)(1u << (r % 8u));
    memcpy(p + l->name_offsets + 4u * r, &at, 4);
    /* Not sprintf into the arena: its terminating NUL would land one byte past
     * the last value, which is the first byte of the next allocation (another
     * frame's, possibly one a consumer is reading) when this one ends on a
     * 64-byte boundary. */
    char text[32];
    int n = snprintf(text, sizeof text, "row-%" PRId64, id);
    memcpy(p + l->name_chars + at, text, (size_t)n);
    at += n;
  }
  memcpy(p + l->name_offsets + 4u * rows, &at, 4);
  return nulls;
}

static gpr_node_desc column(const char *name, const char *format, uint32_t buffers, uint32_t rows,
                            int64_t nulls) {
  gpr_node_desc n;
  memset(&n, 0, sizeof n);
  n.name = name;
  n.name_length = (uint32_t)strlen(name);
  n.format = format;
  n.format_length = (uint32_t)strlen(format);
  n.flags = GPR_NODE_NULLABLE;
  n.dictionary = -1;
  n.buffer_count = buffers;
  n.length = rows;
  n.null_count = nulls;
  return n;
}

static void host(gpr_producer *p, const gpr_allocation *a, uint64_t at, uint64_t len,
                 gpr_body_buffer *out) {
  gpr_error err;
  if (gpr_producer_host_buffer(p, a, at, len, out, &err) != 0) fail("describe", &err);
}

static void publish_one(gpr_producer *p, uint64_t frame, uint32_t rows) {
  gpr_error err;
  gpr_allocation a;
  uint64_t first_id = frame * rows;
  layout l = plan(first_id, rows);
  if (gpr_producer_alloc(p, l.total, &a, &err) != 0) fail("alloc", &err);
  int64_t nulls = fill(a.ptr, &l, first_id, rows);
  gpr_node_desc nodes[3] = {column("id", "l", 2, rows, 0), column("score", "g", 2, rows, nulls),
                            column("name", "u", 3, rows, 0)};
  gpr_body_buffer b[7];
  memset(b, 0, sizeof b); /* b[0] and b[4]: id and name have no validity buffer */
  host(p, &a, l.id, 8ull * rows, &b[1]);
  host(p, &a, l.score_validity, (rows + 7u) / 8u, &b[2]);
  host(p, &a, l.score, 8ull * rows, &b[3]);
  host(p, &a, l.name_offsets, 4ull * (rows + 1u), &b[5]);
  host(p, &a, l.name_chars, l.total - l.name_chars, &b[6]);
  gpr_frame_desc d;
  memset(&d, 0, sizeof d);
  d.row_count = rows;
  d.root_count = d.node_count = 3;
  d.buffer_count = 7;
  d.nodes = nodes;
  d.buffers = b;
  gpr_publish_options o;
  memset(&o, 0, sizeof o);
  o.user_tag = frame;
  o.timeout_ms = 30000;
  o.owned = &a; /* the frame frees it at release */
  o.owned_count = 1;
  uint64_t id = 0;
  if (gpr_producer_publish(p, &d, &o, &id, &err) != 0) fail("publish", &err);
  printf("published frame %" PRIu64 " (%u rows, %" PRId64 " null scores)\n", id, rows, nulls);
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: producer RING [FRAMES [ROWS]]\n");
    return 2;
  }
  const char *ring = argv[1];
  uint64_t frames = argc > 2 ? strtoull(argv[2], NULL, 10) : 10u;
  uint32_t rows = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 1000u;
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options so = {64u, 0, 0, 0, 0, GPR_DELIVERY_EACH};
  int created = gpr_segment_create(&seg, ring, &so, &err) == 0;
  if (created) gpr_segment_close(&seg);
  else if (err.code != GPR_E_SEGMENT_EXISTS) fail("create", &err);
  gpr_producer *p = NULL;
  if (gpr_producer_open(ring, NULL, &p, &err) != 0) fail("open", &err);
  for (uint64_t f = 0; f < frames; f++) publish_one(p, f, rows);
  if (gpr_producer_drain(p, 60000, &err) != 0) fail("drain", &err);
  printf("all %" PRIu64 " frames released\n", frames);
  gpr_producer_close(p);
  if (created) gpr_segment_unlink(ring, NULL);
  return 0;
}
