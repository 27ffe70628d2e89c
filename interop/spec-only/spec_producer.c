/* A producer written from interop/SPEC.md alone (no gpuring.h): publishes
 * FRAMES host frames of ROWS rows, the columns of interop/c/producer.c,
 *
 *   id     int64    frame * ROWS + row
 *   score  float64  id / 4, null where id % 7 == 0
 *   name   utf8     "row-<id>"
 *
 * then waits until every frame was released and detaches, printing
 * {"published":FRAMES}. It creates RING (16 slots) if it does not exist, and
 * then removes it at the end.
 *
 * Memory: one arena of REGIONS equal regions; a frame's body and buffers live
 * in one region from its publish until the producer reaps its slot (§10).
 *
 * Usage: spec_producer RING FRAMES ROWS [--die-writing]
 * With --die-writing it then claims one more slot, writes a frame there without
 * committing it, and kills itself with SIGKILL, leaving the slot WRITING: §10 says such a
 * frame is skipped, and the frames published before it are still delivered. */
#include "spec_frame.h"

#define REGIONS 8u
/* Long: on a 2-core CI machine running a whole test file's processes at once,
 * a consumer can be off the CPU for many seconds (a stall there is no bug). */
#define TIMEOUT_MS 90000u

/* Where each part of a frame lies in its region (offsets from the region start). */
typedef struct plan {
  uint64_t body, id, validity, score, offsets, chars, strings_length, body_length, region;
} plan;

static const char *const STRINGS[] = {"id", "l", "score", "g", "name", "u"};

static plan plan_for(uint32_t rows) {
  plan p;
  uint64_t chars = (uint64_t)rows * 24u; /* "row-" and up to 20 digits */
  p.strings_length = 0;
  for (unsigned k = 0; k < 6; k++) p.strings_length += strlen(STRINGS[k]);
  p.body_length = body_size(3, 7, p.strings_length);
  p.body = 0;
  p.id = align_up(p.body_length, 64u);
  p.validity = align_up(p.id + 8ull * rows, 64u);
  p.score = align_up(p.validity + (rows + 7u) / 8u, 64u);
  p.offsets = align_up(p.score + 8ull * rows, 64u);
  p.chars = align_up(p.offsets + 4ull * (rows + 1u), 64u);
  p.region = align_up(p.chars + chars, 64u);
  return p;
}

/* Writes the columns of frame k at region base `at`; returns score's null count and the chars' length. */
static int64_t fill_columns(uint8_t *at, const plan *p, uint64_t first_id, uint32_t rows, uint64_t *chars) {
  int64_t nulls = 0;
  int32_t end = 0;
  memset(at + p->validity, 0, (rows + 7u) / 8u);
  for (uint32_t r = 0; r < rows; r++) {
    int64_t id = (int64_t)(first_id + r);
    double score = (double)id / 4.0;
    memcpy(at + p->id + 8u * r, &id, 8);
    memcpy(at + p->score + 8u * r, &score, 8);
    if (id % 7 == 0) nulls++;
    else at[p->validity + r / 8u] |= (uint8_t)(1u << (r % 8u));
    memcpy(at + p->offsets + 4u * r, &end, 4);
    char text[32]; /* no sprintf into shared memory: its NUL would pass the last value */
    int n = snprintf(text, sizeof text, "row-%" PRId64, id);
    memcpy(at + p->chars + end, text, (size_t)n);
    end += n;
  }
  memcpy(at + p->offsets + 4u * rows, &end, 4);
  *chars = (uint64_t)end;
  return nulls;
}

static void put32(uint8_t *p, uint64_t at, uint32_t v) { memcpy(p + at, &v, 4); }
static void put64(uint8_t *p, uint64_t at, uint64_t v) { memcpy(p + at, &v, 8); }

/* §8 canonical body: 3 nodes, 7 buffers (validity, data | validity, data | validity, offsets, data). */
static void write_body(uint8_t *body, const plan *p, const arena_out *a, uint64_t region_at, uint32_t rows,
                       int64_t score_nulls, uint64_t chars) {
  memset(body, 0, p->body_length);
  put32(body, B_MAGIC, BODY_MAGIC);
  memcpy(body + B_VERSION, &(uint16_t){1}, 2);
  put32(body, B_LENGTH, (uint32_t)p->body_length);
  put32(body, B_NODES, 3);
  put32(body, B_BUFFERS, 7);
  put32(body, B_ROOTS, 3);
  put32(body, B_STRINGS, (uint32_t)p->strings_length);
  put64(body, B_ROWS, rows);
  put32(body, B_MD_OFFSET, (uint32_t)p->strings_length); /* no schema metadata: zero bytes at the end */
  uint8_t *strings = body + body_size(3, 7, 0);
  uint32_t s = 0;
  const int64_t nulls[3] = {0, score_nulls, 0};
  for (uint32_t n = 0; n < 3; n++) {
    uint8_t *node = body + BODY_HEADER + NODE_SIZE * n;
    for (unsigned k = 0; k < 2; k++) { /* name, then format */
      const char *text = STRINGS[2 * n + k];
      put32(node, k ? N_FORMAT : N_NAME, s);
      put32(node, (k ? N_FORMAT : N_NAME) + 4u, (uint32_t)strlen(text));
      memcpy(strings + s, text, strlen(text));
      s += (uint32_t)strlen(text);
    }
    put32(node, N_MD, s); /* no field metadata */
    put32(node, N_FLAGS, 1); /* nullable */
    put32(node, N_DICTIONARY, UINT32_MAX); /* -1: not dictionary-encoded */
    put32(node, N_BUFFERS, n == 2 ? 3 : 2);
    put64(node, N_LENGTH, rows);
    put64(node, N_NULLS, (uint64_t)nulls[n]);
  }
  const uint64_t offsets[7] = {0, p->id, p->validity, p->score, 0, p->offsets, p->chars};
  const uint64_t lengths[7] = {0, 8ull * rows, (rows + 7u) / 8u, 8ull * rows, 0, 4ull * (rows + 1u), chars};
  for (uint32_t j = 0; j < 7; j++) {
    uint8_t *d = body + BODY_HEADER + NODE_SIZE * 3 + BUFFER_SIZE * j;
    int present = j != 0 && j != 4; /* id and name have no nulls: no validity buffers */
    memcpy(d + D_KIND, &(uint16_t){present ? MEM_HOST : MEM_ABSENT}, 2);
    put32(d, D_ORDINAL, UINT32_MAX); /* host: -1 */
    if (!present) continue;
    put64(d, D_OFFSET, region_at + offsets[j]);
    put64(d, D_LENGTH, lengths[j]);
    memcpy(d + D_HANDLE, a->shm, strlen(a->shm) + 1u);
  }
}

typedef struct producer {
  ring r;
  arena_out arena;
  plan p;
  uint64_t pos[REGIONS];
  int used[REGIONS];
  uint64_t frame_id;
  const doorbell *bell; /* --doorbell: waits for space asleep on it (§6.1), else on the futex */
} producer;

/* Reaps every released frame of ours (§5.2); returns a free region, or -1. */
static int reap(producer *pr) {
  int free_region = -1;
  for (uint32_t k = 0; k < REGIONS; k++) {
    if (pr->used[k] && ring_reap(&pr->r, pr->pos[k])) pr->used[k] = 0;
    if (!pr->used[k]) free_region = (int)k;
  }
  return free_region;
}

static int can_reap(void *ctx) { return reap((producer *)ctx) >= 0; }
static int all_reaped(void *ctx) {
  producer *pr = (producer *)ctx;
  reap(pr);
  for (uint32_t k = 0; k < REGIONS; k++)
    if (pr->used[k]) return 0;
  return 1;
}
typedef struct claim_try {
  producer *pr;
  uint64_t pos;
  int rc;
} claim_try;
static int can_claim(void *ctx) {
  claim_try *c = (claim_try *)ctx;
  c->rc = ring_claim_write(&c->pr->r, &c->pos);
  return c->rc != RING_NONE;
}

/* Waits on SPACE until `ready` holds. On the futex it sweeps every 250 ms (a
 * dead consumer's leases come back so); on a doorbell it sleeps for the whole
 * timeout, so that in the tests nothing but a ring wakes it in time. */
static int wait_space(producer *pr, int (*ready)(void *), void *ctx) {
  uint64_t start = now_ns(CLOCK_MONOTONIC);
  for (uint64_t waited = 0; waited < TIMEOUT_MS; waited = (now_ns(CLOCK_MONOTONIC) - start) / 1000000u) {
    uint32_t left = (uint32_t)(TIMEOUT_MS - waited);
    if (pr->bell ? doorbell_wait(&pr->r, pr->bell, BELL_SPACE, ready, ctx, left) : ring_wait(&pr->r, BELL_SPACE, ready, ctx, left < 250u ? left : 250u)) return 0;
    if (!pr->bell) ring_sweep(&pr->r);
  }
  return spec_fail("TIMEOUT: no space or releases within %u ms", TIMEOUT_MS);
}

/* Claims a slot and fills frame k into a free region; the caller commits it. */
static int write_frame(producer *pr, uint32_t k, uint32_t rows, uint64_t *pos, frame_ref *ref) {
  int region = reap(pr);
  if (region < 0) {
    if (wait_space(pr, can_reap, pr) != 0) return -1;
    region = reap(pr);
  }
  claim_try c = {pr, 0, RING_NONE};
  if (!can_claim(&c) && wait_space(pr, can_claim, &c) != 0) return -1;
  if (c.rc == RING_DETACHED) return spec_fail("DETACHED: our entry in the ring was taken (§4)");
  uint64_t at = ARENA_HEADER + (uint64_t)region * pr->p.region, chars;
  uint8_t *base = pr->arena.base + at;
  int64_t nulls = fill_columns(base, &pr->p, (uint64_t)k * rows, rows, &chars);
  write_body(base + pr->p.body, &pr->p, &pr->arena, at, rows, nulls, chars);
  pr->used[region] = 1;
  pr->pos[region] = c.pos;
  *pos = c.pos;
  *ref = (frame_ref){++pr->frame_id, at + pr->p.body, k, pr->r.me, pr->r.gen, pr->arena.number,
                     (uint32_t)pr->p.body_length};
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: spec_producer RING FRAMES ROWS [--die-writing | --broadcast | --doorbell]\n");
    return 2;
  }
  uint32_t frames = (uint32_t)strtoul(argv[2], NULL, 10), rows = (uint32_t)strtoul(argv[3], NULL, 10);
  static producer pr;
  int broadcast = argc > 4 && strcmp(argv[4], "--broadcast") == 0;
  int created = ring_create(argv[1], 16, 64, broadcast);
  if (created < 0 || ring_open(&pr.r, argv[1], TIMEOUT_MS) != 0 ||
      ring_attach(&pr.r, ROLE_PRODUCER) != 0)
    return 1;
  doorbell bell;
  if (argc > 4 && strcmp(argv[4], "--doorbell") == 0) {
    if (doorbell_open(&pr.r, &bell) != 0) return 1;
    pr.bell = &bell;
  }
  pr.p = plan_for(rows);
  if (arena_create(&pr.r, ARENA_HEADER + REGIONS * pr.p.region, &pr.arena) != 0) return 1;
  uint64_t pos;
  frame_ref ref;
  for (uint32_t k = 0; k < frames; k++)
    if (write_frame(&pr, k, rows, &pos, &ref) != 0 || ring_commit(&pr.r, pos, &ref) != 0) return 1;
  if (argc > 4 && strcmp(argv[4], "--die-writing") == 0) {
    if (write_frame(&pr, frames, rows / 2u, &pos, &ref) != 0) return 1;
    kill(getpid(), SIGKILL);
  }
  if (wait_space(&pr, all_reaped, &pr) != 0) return 1;
  if (!ring_detach(&pr.r)) shm_unlink(pr.arena.shm); /* §4: nobody else knows our arena now */
  if (pr.bell) close(bell.fd); /* after detach cleared our bits */
  if (created == 0) ring_unlink(argv[1]);
  printf("{\"published\":%u}\n", frames);
  return 0;
}
