/* Fuzz target for a whole segment: a damaged segment image and arena go
 * through everything a participant does with shared memory it did not write:
 * open, sweep, consumer next (copy-out, validation, mapping), Arrow export,
 * reading every host buffer, release, close, and a producer's attach and publish.
 * Every call must return (a watchdog turns a hang into a crash) with a typed
 * error or a frame that passed every check; the sanitizers catch any read
 * outside what was checked.
 *
 *   libFuzzer (clang -fsanitize=fuzzer -DGPR_LIBFUZZER): the input is
 *     u32 segment length, the segment image, then producer 0's arena.
 *   fuzz_segment FIXTURES_DIR ITERATIONS [SEED]: a bounded random-mutation
 *     run (CI), seeded from the golden images in fixtures/segments that open. */
#include "gpuring.h"
#include "int32_frame.h"
#include "mutation.h"
#include "segment_image.h"

#include <dirent.h>

/* Seconds any one image may take before the watchdog's SIGALRM kills the run. */
#define WATCHDOG_SECONDS 20

typedef struct tally {
  uint64_t runs, opened, frames, exported, published;
  uint64_t codes[GPR_E_COUNT_];
} tally;

static tally total;

static void note(int rc) {
  if (rc < 0 && (size_t)-rc < GPR_E_COUNT_) total.codes[-rc]++;
}

static void read_frame(gpr_frame *f) {
  total.frames++;
  gpr_error err;
  volatile uint8_t sink = 0;
  for (uint32_t b = 0; b < f->desc.buffer_count; b++) {
    const uint8_t *p = NULL;
    if (gpr_frame_host_buffer(f, b, &p, &err) != 0 || !p) continue;
    /* Touch the first and last byte: a buffer past its arena would fault. */
    uint64_t n = f->desc.buffers[b].length;
    if (n) sink ^= p[0] ^ p[n - 1];
  }
  struct ArrowSchema schema;
  struct ArrowArray array;
  int rc = gpr_frame_export_arrow(f, &schema, &array, &err);
  note(rc);
  if (rc == 0) {
    total.exported++;
    array.release(&array);
    schema.release(&schema);
  }
  (void)sink;
}

static void consume(void) {
  gpr_error err;
  gpr_consumer *c = NULL;
  int rc = gpr_consumer_open(GPR_IMAGE_RING, 1, &c, &err);
  note(rc);
  if (rc != 0) return;
  for (int i = 0; i < 24; i++) {
    gpr_frame *f = NULL;
    rc = gpr_consumer_next(c, 0, &f, &err);
    note(rc);
    if (rc == -(int)GPR_E_RING_EMPTY) break;
    if (rc != 0) continue;
    read_frame(f);
    gpr_frame_release(f);
  }
  gpr_consumer_close(c);
}

static void produce(void) {
  gpr_error err;
  gpr_producer *p = NULL;
  gpr_producer_options po = {1u << 16, 1};
  int rc = gpr_producer_open(GPR_IMAGE_RING, &po, &p, &err);
  note(rc);
  if (rc != 0) return;
  gpr_publish_options o;
  memset(&o, 0, sizeof o);
  for (int i = 0; i < 3; i++) {
    rc = publish_int32_column(p, "seq", i, 4, o, &err);
    note(rc);
    if (rc == 0) total.published++;
  }
  gpr_producer_close(p);
}

/* One run over one image; the image bytes may be modified (adopted). */
static void run_image(uint8_t *segment, size_t segment_n, const uint8_t *arena, size_t arena_n) {
  total.runs++;
  alarm(WATCHDOG_SECONDS);
  if (gpr_image_load(segment, segment_n, arena, arena_n) == 0) {
    gpr_error err;
    gpr_segment seg;
    gpr_segment_options so = {0, 0, 0, 1, 0, GPR_DELIVERY_EACH};
    int rc = gpr_segment_open(&seg, GPR_IMAGE_RING, &so, &err);
    note(rc);
    if (rc == 0) {
      total.opened++;
      gpr_sweep_report r;
      note(gpr_sweep(&seg, &r, &err));
      gpr_segment_close(&seg);
      consume();
      produce();
      consume();
    }
  }
  gpr_image_unload();
  alarm(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint32_t n;
  if (size < 4) return 0;
  memcpy(&n, data, 4);
  size_t segment_n = n < size - 4 ? n : size - 4;
  uint8_t *segment = (uint8_t *)malloc(segment_n + 1);
  memcpy(segment, data + 4, segment_n);
  size_t arena_n = size - 4 - segment_n;
  run_image(segment, segment_n, arena_n ? data + 4 + segment_n : NULL, arena_n);
  free(segment);
  return 0;
}

#ifndef GPR_LIBFUZZER
typedef struct image {
  uint8_t *segment, *arena;
  size_t segment_n, arena_n;
} image;

static int load_images(const char *dir, image *out, int max) {
  DIR *d = opendir(dir);
  int count = 0;
  for (struct dirent *e; d && count < max && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    /* The corrupt-* images fail at a header check already (the fixture test's job). */
    if (len < 12 || strcmp(e->d_name + len - 12, ".segment.bin") != 0 || strncmp(e->d_name, "corrupt-", 8) == 0)
      continue;
    char path[1024];
    image *im = &out[count++];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    im->segment = read_file(path, &im->segment_n);
    snprintf(path, sizeof path, "%s/%.*s.p0g1.a0.bin", dir, (int)(len - 12), e->d_name);
    im->arena = read_file(path, &im->arena_n);
  }
  if (d) closedir(d);
  return count;
}

static void report(void) {
  printf("fuzz_segment: %llu images, %llu opened, %llu frames taken, %llu exported, %llu published; errors:",
         (unsigned long long)total.runs, (unsigned long long)total.opened, (unsigned long long)total.frames,
         (unsigned long long)total.exported, (unsigned long long)total.published);
  for (size_t c = 1; c < GPR_E_COUNT_; c++)
    if (total.codes[c]) printf(" %s=%llu", gpr_code_name((gpr_code)c), (unsigned long long)total.codes[c]);
  printf("\n");
}

int main(int argc, char **argv) {
  char dir[512];
  long iterations;
  if (gpr_fuzz_args(argc, argv, "segments", dir, sizeof dir, &iterations) != 0) return 2;
  image images[64];
  int count = load_images(dir, images, 64);
  if (count == 0) {
    fprintf(stderr, "fuzz_segment: no images in %s\n", dir);
    return 2;
  }
  for (long i = 0; i < iterations; i++) {
    const image *im = &images[gpr_rnd((uint64_t)count)];
    uint8_t *segment = (uint8_t *)malloc(im->segment_n + 1);
    memcpy(segment, im->segment, im->segment_n);
    uint8_t *arena = im->arena ? (uint8_t *)malloc(im->arena_n) : NULL;
    if (arena) memcpy(arena, im->arena, im->arena_n);
    if (gpr_rnd(8)) gpr_mutate(segment, im->segment_n);
    /* Arena damage stays in its first 8 KiB, where the bodies are. */
    if (arena && gpr_rnd(4) == 0) gpr_mutate(arena, im->arena_n < 8192 ? im->arena_n : 8192);
    run_image(segment, im->segment_n, arena, im->arena_n);
    free(segment);
    free(arena);
  }
  report();
  for (int i = 0; i < count; i++) {
    free(images[i].segment);
    free(images[i].arena);
  }
  /* Most mutants must still open, or the run tests only the header checks. */
  return total.opened * 2 >= total.runs ? 0 : 1;
}
#endif
