/* Fuzz target for the frame-body validator: any bytes go through
 * gpr_body_validate; a body it accepts must describe, re-encode, validate
 * again and re-encode to the same bytes (the canonical form is a fixed point).
 * The sanitizers catch any read outside the body.
 *
 *   libFuzzer (clang -fsanitize=fuzzer -DGPR_LIBFUZZER): the input is the body.
 *   fuzz_body FIXTURES_DIR ITERATIONS [SEED]: a bounded random-mutation run
 *     (CI), seeded from the golden bodies in fixtures/frames.
 * The three-language differential run over structure-aware mutants is
 * test/body-fuzz.test.ts. */
#include "gpuring.h"
#include "files.h"
#include "mutation.h"

#include <dirent.h>

static uint64_t accepted, rejected;

/* The canonical re-encoding of a valid body (malloc'd), or NULL with *code set. */
static uint8_t *canonical(const uint8_t *body, size_t n, size_t *out_n, gpr_code *code) {
  gpr_body_view view;
  memset(&view, 0, sizeof view);
  gpr_error err;
  *code = GPR_E_OK;
  if (gpr_body_validate(body, n, &view, &err) != 0) {
    *code = err.code;
    return NULL;
  }
  gpr_node_desc *nodes = (gpr_node_desc *)calloc(view.header->node_count + 1u, sizeof *nodes);
  gpr_frame_desc desc;
  gpr_body_describe(&view, nodes, &desc);
  size_t cap = (size_t)gpr_body_encoded_size(&desc);
  uint8_t *out = (uint8_t *)malloc(cap ? cap : 1);
  if (gpr_body_encode(&desc, out, cap, out_n, &err) != 0) {
    fprintf(stderr, "fuzz_body: a valid body does not re-encode (%s)\n", gpr_code_name(err.code));
    abort();
  }
  free(nodes);
  return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* An exact-size private copy: the validator gets no slack to read into. */
  uint8_t *body = (uint8_t *)malloc(size ? size : 1);
  memcpy(body, data, size);
  size_t once_n, twice_n;
  gpr_code code;
  uint8_t *once = canonical(body, size, &once_n, &code);
  if (once) {
    accepted++;
    uint8_t *twice = canonical(once, once_n, &twice_n, &code);
    if (!twice || twice_n != once_n || memcmp(once, twice, once_n) != 0) {
      fprintf(stderr, "fuzz_body: the canonical encoding is not a fixed point (%s)\n", gpr_code_name(code));
      abort();
    }
    free(twice);
    free(once);
  } else {
    rejected++;
  }
  free(body);
  return 0;
}

#ifndef GPR_LIBFUZZER
typedef struct seed_body {
  uint8_t *bytes;
  size_t n;
} seed_body;

static int load_bodies(const char *dir, seed_body *out, int max) {
  DIR *d = opendir(dir);
  int count = 0;
  for (struct dirent *e; d && count < max && (e = readdir(d)) != NULL;) {
    size_t len = strlen(e->d_name);
    if (len < 4 || strcmp(e->d_name + len - 4, ".bin") != 0) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    out[count].bytes = read_file(path, &out[count].n);
    if (out[count].bytes) count++;
  }
  if (d) closedir(d);
  return count;
}

int main(int argc, char **argv) {
  char dir[512];
  long iterations;
  if (gpr_fuzz_args(argc, argv, "frames", dir, sizeof dir, &iterations) != 0) return 2;
  seed_body seeds[64];
  int count = load_bodies(dir, seeds, 64);
  if (count == 0) {
    fprintf(stderr, "fuzz_body: no bodies in %s\n", dir);
    return 2;
  }
  for (long i = 0; i < iterations; i++) {
    const seed_body *s = &seeds[gpr_rnd((uint64_t)count)];
    uint8_t *body = (uint8_t *)malloc(s->n);
    memcpy(body, s->bytes, s->n);
    gpr_mutate(body, s->n);
    /* Sometimes cut the tail too, so the counts and the length disagree. */
    size_t n = gpr_rnd(8) ? s->n : (size_t)gpr_rnd(s->n + 1);
    LLVMFuzzerTestOneInput(body, n);
    free(body);
  }
  printf("fuzz_body: %ld bodies, %llu accepted, %llu rejected\n", iterations, (unsigned long long)accepted,
         (unsigned long long)rejected);
  for (int i = 0; i < count; i++) free(seeds[i].bytes);
  /* Both verdicts must occur often, or the mutations are too mild or too wild. */
  return accepted * 20 >= (uint64_t)iterations && rejected * 20 >= (uint64_t)iterations ? 0 : 1;
}
#endif
