/* A consumer written from interop/SPEC.md alone (no gpuring.h): takes FRAMES
 * frames of host memory and prints one JSON line per frame, in the format of
 * interop/c/consumer.c, so that tests compare both with what the producer sent:
 *
 *   {"frame":1,"tag":0,"rows":1000,"columns":[{"name":"id","format":"l",
 *    "memory":"host","nulls":0,"sum":499500}, ...]}
 *
 * Columns may be integers, floats, utf8/binary, and fixed-size lists of those.
 * A frame it cannot read (a check of §8.2 failed, or device memory, which this
 * example does not map) is reported as {"frame":ID,"error":"..."} and released.
 *
 * Usage: spec_consumer RING FRAMES [TIMEOUT_MS] [--die-holding]
 * With --die-holding it takes the first frame to its user (prints it, LEASED),
 * claims the second (CLAIMED), prints {"holding":[TAG1,TAG2]} and kills itself
 * with SIGKILL: the crash that §10 says others recover from. */
#include "spec_frame.h"

/* One body, copied out of its arena (§1) and read through bounds-checked accessors. */
typedef struct body {
  uint8_t *bytes;
  uint64_t length, strings_at, strings_length, rows;
  uint32_t nodes, buffers, roots;
  uint32_t *first_buffer; /* per node: the index of its first buffer (buffers follow node order) */
  const ring *r;
} body;

static uint32_t u32_at(const body *b, uint64_t at) {
  uint32_t v;
  memcpy(&v, b->bytes + at, 4);
  return v;
}
static uint64_t u64_at(const body *b, uint64_t at) {
  uint64_t v;
  memcpy(&v, b->bytes + at, 8);
  return v;
}
static uint64_t node_at(uint32_t i) { return BODY_HEADER + (uint64_t)NODE_SIZE * i; }
static uint64_t buffer_at(const body *b, uint32_t j) {
  return BODY_HEADER + (uint64_t)NODE_SIZE * b->nodes + (uint64_t)BUFFER_SIZE * j;
}

/* A string of the table (§1.1: offsets from the table's first byte), or NULL if outside it. */
static const char *string_at(const body *b, uint64_t field, uint32_t *length) {
  uint32_t off = u32_at(b, field), len = u32_at(b, field + 4u);
  if (off > b->strings_length || len > b->strings_length - off) return NULL;
  *length = len;
  return (const char *)b->bytes + b->strings_at + off;
}

/* §8.2 step 1: the header, and the counts adding up to the length. */
static const char *body_open(body *b, const uint8_t *src, uint32_t length) {
  if (length < BODY_HEADER || length > (64u << 20)) return "FRAME_INVALID: body length";
  b->bytes = (uint8_t *)malloc(length);
  memcpy(b->bytes, src, length);
  b->length = length;
  uint16_t version;
  memcpy(&version, b->bytes + B_VERSION, 2);
  b->nodes = u32_at(b, B_NODES);
  b->buffers = u32_at(b, B_BUFFERS);
  b->roots = u32_at(b, B_ROOTS);
  b->strings_length = u32_at(b, B_STRINGS);
  b->rows = u64_at(b, B_ROWS);
  if (u32_at(b, B_MAGIC) != BODY_MAGIC || version != 1) return "FRAME_INVALID: magic or version";
  if (u32_at(b, B_LENGTH) != length || b->nodes > (1u << 20) || b->buffers > 3u * (1u << 20) ||
      body_size(b->nodes, b->buffers, b->strings_length) != length)
    return "FRAME_INVALID: counts do not add up to the length";
  if (b->rows > MAX_COUNT) return "FRAME_BOUNDS: row count";
  if ((uint64_t)b->roots + u32_at(b, B_DICTS) > b->nodes) return "FRAME_INVALID: more trees than nodes";
  b->strings_at = buffer_at(b, b->buffers);
  b->first_buffer = (uint32_t *)calloc(b->nodes + 1u, sizeof *b->first_buffer);
  for (uint32_t i = 0; i < b->nodes; i++) {
    uint64_t next = (uint64_t)b->first_buffer[i] + u32_at(b, node_at(i) + N_BUFFERS);
    if (next > b->buffers) return "FRAME_INVALID: more buffers than declared";
    b->first_buffer[i + 1u] = (uint32_t)next;
  }
  return NULL;
}

/* Buffer j as host bytes holding at least NEED bytes; NULL with *why set if it cannot be.
 * An absent buffer is NULL with no error where it is OPTIONAL (validity without nulls, §8.2). */
static const uint8_t *buffer_bytes(const body *b, uint32_t j, uint64_t need, int optional, const char **why) {
  uint64_t d = buffer_at(b, j), offset = u64_at(b, d + D_OFFSET), length = u64_at(b, d + D_LENGTH);
  uint16_t kind;
  memcpy(&kind, b->bytes + d + D_KIND, 2);
  if (offset > MAX_COUNT || length > MAX_COUNT - offset) return *why = "FRAME_BOUNDS: buffer range", NULL;
  if (kind == MEM_ABSENT) {
    if (length || (need && !optional)) *why = "FRAME_INVALID: a required buffer is absent";
    return NULL;
  }
  if (kind == MEM_CUDA_IPC) return *why = "device memory: this example reads host memory only", NULL;
  if (kind != MEM_HOST) return *why = "FRAME_INVALID: buffer kind", NULL;
  const char *handle = (const char *)b->bytes + d + D_HANDLE;
  if (!memchr(handle, 0, 64)) return *why = "FRAME_INVALID: host handle without NUL", NULL;
  if (length < need) return *why = "FRAME_BOUNDS: buffer smaller than its node needs", NULL;
  const arena_in *a = arena_map(b->r, handle);
  if (!a) return *why = "ARENA_INVALID: not an arena of this segment", NULL;
  const uint8_t *p = arena_bytes(a, offset, length);
  if (!p) *why = "FRAME_BOUNDS: buffer outside its arena";
  return p;
}

typedef struct checksum {
  double sum;
  uint64_t chars;
  int has_sum, has_chars;
} checksum;

static int valid(const uint8_t *validity, uint64_t bit) {
  return !validity || (validity[bit / 8u] >> (bit % 8u)) & 1u;
}

static double number(const uint8_t *data, char format, uint64_t i) {
  switch (format) {
#define READ(code, type)                      \
  case code: {                                \
    type x;                                   \
    memcpy(&x, data + i * sizeof x, sizeof x); \
    return (double)x;                         \
  }
    READ('c', int8_t) READ('C', uint8_t) READ('s', int16_t) READ('S', uint16_t) READ('i', int32_t)
    READ('I', uint32_t) READ('l', int64_t) READ('L', uint64_t) READ('f', float) READ('g', double)
#undef READ
  }
  return 0;
}
static unsigned fixed_width(char format) {
  const char *codes = "cCsSiIlLfg";
  static const unsigned widths[] = {1, 1, 2, 2, 4, 4, 8, 8, 4, 8};
  const char *at = strchr(codes, format);
  return at && format ? widths[at - codes] : 0;
}

/* Adds rows [from, from + count) of node i (§8: the node's offset applies to all its buffers). */
static const char *add_values(const body *b, uint32_t i, uint64_t from, uint64_t count, checksum *c) {
  uint64_t n = node_at(i), length = u64_at(b, n + N_LENGTH), offset = u64_at(b, n + N_OFFSET);
  int64_t nulls = (int64_t)u64_at(b, n + N_NULLS);
  uint32_t flen, first = b->first_buffer[i], nbuf = u32_at(b, n + N_BUFFERS);
  const char *format = string_at(b, n + N_FORMAT, &flen), *why = NULL;
  if (!format) return "FRAME_BOUNDS: format outside the string table";
  if (nulls < -1 || nulls > (int64_t)length || offset > MAX_COUNT || length > MAX_COUNT - offset)
    return "FRAME_BOUNDS: node counts";
  if (from > length || count > length - from) return "FRAME_BOUNDS: child shorter than its parent needs";
  uint64_t end = offset + length, at = offset + from;
  const uint8_t *validity = buffer_bytes(b, first, (end + 7u) / 8u, nulls <= 0, &why);
  if (why) return why;
  unsigned width = flen == 1 ? fixed_width(format[0]) : 0;
  if (width && nbuf == 2) {
    const uint8_t *data = buffer_bytes(b, first + 1u, end * width, 0, &why);
    if (why) return why;
    c->has_sum = 1;
    for (uint64_t r = at; r < at + count; r++)
      if (valid(validity, r)) c->sum += number(data, format[0], r);
    return NULL;
  }
  if (flen == 1 && (format[0] == 'u' || format[0] == 'z') && nbuf == 3) {
    const uint8_t *offsets = buffer_bytes(b, first + 1u, (end + 1u) * 4u, 0, &why);
    if (why) return why;
    uint64_t data_length = u64_at(b, buffer_at(b, first + 2u) + D_LENGTH);
    int32_t prev = -1, o;
    for (uint64_t r = offset; r <= end; r++) { /* every offset of the slice (§8.2), not only the ends */
      memcpy(&o, offsets + 4u * r, 4);
      if (o < 0 || o < prev || (uint64_t)o > data_length) return "FRAME_BOUNDS: value offsets outside their data";
      prev = o;
    }
    if (!buffer_bytes(b, first + 2u, (uint64_t)prev, 0, &why) && why) return why;
    c->has_chars = 1;
    for (uint64_t r = at; r < at + count; r++) {
      int32_t lo, hi;
      memcpy(&lo, offsets + 4u * r, 4);
      memcpy(&hi, offsets + 4u * (r + 1u), 4);
      if (valid(validity, r)) c->chars += (uint64_t)(hi - lo);
    }
    return NULL;
  }
  char *tail;
  uint64_t size = flen > 3 && memcmp(format, "+w:", 3) == 0 ? strtoull(format + 3, &tail, 10) : 0;
  if (size && tail == format + flen && nbuf == 1 && u32_at(b, n + N_CHILDREN) == 1 && i + 1u < b->nodes) {
    for (uint64_t r = at; r < at + count; r++) /* §8: the child is indexed from the parent's offset too */
      if (valid(validity, r) && (why = add_values(b, i + 1u, r * size, size, c)) != NULL) return why;
    return NULL;
  }
  return "unsupported format (this example reads numbers, utf8/binary and fixed-size lists)";
}

static void print_string(FILE *out, const char *s, uint32_t n) {
  fputc('"', out);
  for (uint32_t k = 0; k < n; k++) {
    unsigned char ch = (unsigned char)s[k];
    if (ch == '"' || ch == '\\') fprintf(out, "\\%c", ch);
    else if (ch < 0x20) fprintf(out, "\\u%04x", ch);
    else fputc(ch, out);
  }
  fputc('"', out);
}

/* Nodes in a subtree (pre-order), at most 64 levels deep (§8). */
static uint32_t subtree_end(const body *b, uint32_t i, int depth) {
  if (depth > 64 || i >= b->nodes) return UINT32_MAX;
  uint32_t next = i + 1u, children = u32_at(b, node_at(i) + N_CHILDREN);
  for (uint32_t k = 0; k < children && next != UINT32_MAX; k++) next = subtree_end(b, next, depth + 1);
  return next;
}

/* One root column's report into OUT; returns the first check that failed, or NULL. */
static const char *report_column(const body *b, uint32_t i, FILE *out) {
  uint32_t nlen, flen;
  const char *name = i < b->nodes ? string_at(b, node_at(i) + N_NAME, &nlen) : NULL;
  const char *format = name ? string_at(b, node_at(i) + N_FORMAT, &flen) : NULL;
  if (!format) return "FRAME_INVALID: trees, or a name outside the string table";
  if (u64_at(b, node_at(i) + N_LENGTH) != b->rows) return "FRAME_BOUNDS: column length differs from row_count";
  checksum c = {0, 0, 0, 0};
  const char *why = add_values(b, i, 0, b->rows, &c);
  fprintf(out, "{\"name\":");
  print_string(out, name, nlen);
  fprintf(out, ",\"format\":");
  print_string(out, format, flen);
  fprintf(out, ",\"memory\":\"host\",\"nulls\":%" PRId64, (int64_t)u64_at(b, node_at(i) + N_NULLS));
  if (c.has_sum) fprintf(out, ",\"sum\":%.17g", c.sum);
  if (c.has_chars) fprintf(out, ",\"chars\":%" PRIu64, c.chars);
  fputc('}', out);
  return why;
}

/* Prints frame f's report, or returns the first check that failed (printing nothing). */
static const char *report(const ring *r, const frame_ref *f) {
  char shm[96];
  if (f->producer >= r->capacity || f->body_arena >= 4096u) return "FRAME_INVALID: record out of range";
  arena_shm_name(r, f->producer, f->producer_gen, f->body_arena, shm);
  const uint8_t *src = arena_bytes(arena_map(r, shm), f->body_offset, f->body_length);
  if (!src) return "FRAME_BOUNDS: body outside its arena";
  body b = {0};
  b.r = r;
  const char *why = body_open(&b, src, f->body_length);
  char *text = NULL;
  size_t size = 0;
  FILE *out = open_memstream(&text, &size);
  fprintf(out, "{\"frame\":%" PRIu64 ",\"tag\":%" PRIu64 ",\"rows\":%" PRIu64 ",\"columns\":[", f->frame_id,
          f->user_tag, b.rows);
  for (uint32_t k = 0, i = 0; k < b.roots && !why; k++, i = subtree_end(&b, i, 0)) {
    if (k) fputc(',', out);
    why = report_column(&b, i, out);
  }
  fprintf(out, "]}\n");
  fclose(out);
  if (!why) fputs(text, stdout);
  free(text);
  free(b.bytes);
  free(b.first_buffer);
  return why;
}

typedef struct take {
  const ring *r;
  uint64_t pos;
  frame_ref f;
  int detached; /* §4: our entry was taken */
} take;

static int try_claim(void *ctx) {
  take *t = (take *)ctx;
  int rc = ring_claim(t->r, &t->pos, &t->f);
  t->detached = rc == RING_DETACHED;
  if (rc == RING_MISSED || rc == RING_EVICTED) { /* §5.4: told once, then it goes on */
    printf("{\"%s\":%" PRIu64 "}\n", rc == RING_MISSED ? "frames_missed" : "evicted", bc_take_missed(t->r));
    if (rc == RING_EVICTED) bc_subscribe(t->r, ON_SLOW_BLOCK);
  }
  return rc == RING_OK || t->detached;
}

/* Claims the next frame within timeout_ms (§6). On the futex it sweeps every
 * 250 ms while it waits (§7); on a doorbell (`bell`) it sleeps for the whole
 * timeout, so that nothing but a ring wakes it in time: the proof, in tests,
 * that producers ring it (a long-lived sleeper would sweep at a tick). */
static int next_frame(const ring *r, take *t, uint32_t timeout_ms, const doorbell *bell) {
  uint64_t start = now_ns(CLOCK_MONOTONIC);
  for (;;) {
    uint64_t waited = (now_ns(CLOCK_MONOTONIC) - start) / 1000000u;
    if (waited >= timeout_ms) return -1;
    uint32_t left = (uint32_t)(timeout_ms - waited);
    int got = bell ? doorbell_wait(r, bell, BELL_DATA, try_claim, t, left) : ring_wait(r, BELL_DATA, try_claim, t, left < 250u ? left : 250u);
    if (got) return t->detached ? spec_fail("DETACHED: our entry in the ring was taken (§4)") : 0;
    if (!bell) ring_sweep(r);
  }
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: spec_consumer RING FRAMES [TIMEOUT_MS] [--die-holding | --doorbell]\n");
    return 2;
  }
  int die = argc > 4 && strcmp(argv[4], "--die-holding") == 0;
  int sleep_on_bell = argc > 4 && strcmp(argv[4], "--doorbell") == 0;
  uint32_t frames = (uint32_t)strtoul(argv[2], NULL, 10);
  uint32_t timeout = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 30000u;
  ring r;
  if (ring_open(&r, argv[1], timeout) != 0 || ring_attach(&r, ROLE_CONSUMER) != 0) return 1;
  if (r.broadcast) { /* §5.4: a subscriber; producers wait for it */
    proxy_await(&r);
    bc_subscribe(&r, ON_SLOW_BLOCK);
  }
  doorbell bell;
  if (sleep_on_bell && doorbell_open(&r, &bell) != 0) return 1;
  const doorbell *waits_on = sleep_on_bell ? &bell : NULL;
  take t = {&r, 0, {0}, 0};
  for (uint32_t k = 0; k < frames; k++) {
    if (next_frame(&r, &t, timeout, waits_on) != 0) {
      fprintf(stderr, "spec_consumer: no frame within %u ms\n", timeout);
      return 1;
    }
    if (ring_confirm(&r, t.pos) != 0) return 1;
    const char *why = report(&r, &t.f);
    if (why) printf("{\"frame\":%" PRIu64 ",\"error\":\"%s\"}\n", t.f.frame_id, why);
    fflush(stdout);
    if (die) {
      uint64_t first = t.f.user_tag;
      if (next_frame(&r, &t, timeout, waits_on) != 0) return 1;
      printf("{\"holding\":[%" PRIu64 ",%" PRIu64 "]}\n", first, t.f.user_tag);
      fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    if (ring_release(&r, t.pos, &t.f) != 0) return 1;
  }
  ring_detach(&r); /* clears our bits (§4) before the socket goes */
  if (sleep_on_bell) close(bell.fd);
  return 0;
}
