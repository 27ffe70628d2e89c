/* The golden segment images (fixtures/segments), observed by the C
 * implementation exactly as the TypeScript and Python suites observe them:
 * load the image into /dev/shm, open it, count slot states, list the
 * participants, sweep, then take frames until the ring is empty. The lines
 * observed must equal NAME.expect (format: fixtures/README.md).
 * Usage: test_segment_images FIXTURES_DIR */
#include "gpuring.h"
#include "check.h"
#include "segment_image.h"

#include <dirent.h>

#define RING GPR_IMAGE_RING

typedef struct text { char p[4096]; size_t n; } text;

static void put(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(text *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->p + t->n, sizeof t->p - t->n, fmt, ap);
  va_end(ap);
  if (n > 0) t->n += (size_t)n;
}

/* Loads fixture image NAME (its segment and, where there is one, its arena). */
static void load(const char *dir, const char *image) {
  char path[1024];
  size_t n = 0, arena_n = 0;
  snprintf(path, sizeof path, "%s/%s.segment.bin", dir, image);
  uint8_t *segment = read_file(path, &n);
  CHECK(segment != NULL);
  snprintf(path, sizeof path, "%s/%s.p0g1.a0.bin", dir, image);
  uint8_t *arena = read_file(path, &arena_n);
  CHECK(segment && gpr_image_load(segment, n, arena, arena_n) == 0);
  free(segment);
  free(arena);
}

static const char *const kSlotStates[] = {"EMPTY", "WRITING", "READY", "CLAIMED", "LEASED", "RELEASED"};
static const char *const kParticipantStates[] = {"FREE", "ACTIVE", "DEAD", "ATTACHING", "FREEING", "?", "?", "?"};

static void observe_segment(gpr_segment *seg, text *t) {
  uint32_t counts[6] = {0};
  for (uint32_t i = 0; i < seg->slot_count; i++) counts[gpr_word_state(gpr_slot_load(&seg->slots[i])) % 6u]++;
  put(t, "states");
  for (int s = 0; s < 6; s++) put(t, " %s=%u", kSlotStates[s], counts[s]);
  put(t, "\n");
  for (uint32_t i = 0; i < seg->participant_capacity; i++) {
    uint64_t w = gpr_participant_word(seg, i);
    if (gpr_pstate(w) == GPR_PARTICIPANT_FREE) continue;
    put(t, "participant %u %u %s %s\n", i, gpr_pgen(w), kParticipantStates[gpr_pstate(w)],
        gpr_participant_alive(seg, i) ? "alive" : "dead");
    if (seg->broadcast && seg->participants[i].subscription != 0) {
      uint32_t held, unread;
      gpr_bc_standing(seg, i, &held, &unread);
      put(t, "subscriber %u held=%u unread=%u missed=%llu\n", i, held, unread,
          (unsigned long long)seg->participants[i].missed);
    }
  }
  gpr_sweep_report r;
  memset(&r, 0, sizeof r);
  CHECK(gpr_sweep(seg, &r, NULL) == 0);
  put(t, "sweep found_dead=%u released=%u redelivered=%u recycled=%u\n", r.found_dead, r.released,
      r.redelivered, r.recycled);
}

static void observe_frames(text *t) {
  gpr_error err;
  gpr_consumer *c = NULL;
  CHECK(gpr_consumer_open(RING, 0, &c, &err) == 0);
  for (int i = 0; c && i < 20; i++) {
    gpr_frame *f = NULL;
    if (gpr_consumer_next(c, 0, &f, &err) != 0) {
      if (err.code == GPR_E_RING_EMPTY) {
        put(t, "empty\n");
        break;
      }
      put(t, "error %s\n", gpr_code_name(err.code));
      continue;
    }
    const uint8_t *seq = NULL;
    int32_t v = -1;
    if (gpr_frame_host_buffer(f, 1, &seq, &err) == 0 && seq) memcpy(&v, seq, 4);
    put(t, "frame %llu %llu %d\n", (unsigned long long)f->frame_id, (unsigned long long)f->user_tag, v);
    gpr_frame_release(f);
  }
  gpr_consumer_close(c);
}

static void check_image(const char *dir, const char *image) {
  char path[1024];
  size_t n = 0;
  snprintf(path, sizeof path, "%s/%s.expect", dir, image);
  char *expect = (char *)read_file(path, &n);
  load(dir, image);
  text t = {{0}, 0};
  gpr_error err;
  gpr_segment seg;
  gpr_segment_options o = {0, 0, 0, 50, 0, GPR_DELIVERY_EACH};
  if (gpr_segment_open(&seg, RING, &o, &err) != 0) {
    put(&t, "open %s\n", gpr_code_name(err.code));
  } else {
    put(&t, "open OK\n");
    observe_segment(&seg, &t);
    observe_frames(&t);
    gpr_segment_close(&seg);
  }
  if (!expect || strcmp(expect, t.p) != 0) {
    fprintf(stderr, "%s: expected\n%sobserved\n%s", image, expect ? expect : "(no .expect)\n", t.p);
    gpr_checks_failed++;
  }
  free(expect);
  gpr_image_unload();
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: test_segment_images FIXTURES_DIR\n");
    return 2;
  }
  char dir[512];
  snprintf(dir, sizeof dir, "%s/segments", argv[1]);
  DIR *d = opendir(dir);
  CHECK(d != NULL);
  int checked = 0;
  for (struct dirent *e; d && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 8 || strcmp(e->d_name + len - 7, ".expect") != 0) continue;
    char image[256];
    snprintf(image, sizeof image, "%.*s", (int)(len - 7), e->d_name);
    check_image(dir, image);
    checked++;
  }
  if (d) closedir(d);
  CHECK(checked >= 10);
  printf("%d segment images checked\n", checked);
  return CHECK_DONE();
}
