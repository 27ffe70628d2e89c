/* Deterministic mutations for the bounded fuzz runs (fuzz_segment, fuzz_body):
 * a seeded generator, so a failing iteration reproduces from its seed, and
 * word-sized edits with the values that cross checks. */
#ifndef GPR_TEST_MUTATION_H
#define GPR_TEST_MUTATION_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t gpr_rng_state = 1;

static inline __attribute__((unused)) void gpr_mutation_seed(uint64_t seed) { gpr_rng_state = seed; }

static inline __attribute__((unused)) uint64_t gpr_rnd(uint64_t n) {
  /* splitmix64: the same sequence everywhere, so a failing iteration reproduces. */
  uint64_t z = (gpr_rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (z ^ (z >> 31)) % n;
}

/* Values that cross the checks: states, generations, positions near and far. */
static inline uint64_t gpr_edge_value(uint64_t old) {
  static const uint64_t edges[] = {0, 1, 2, 3, 4, 5, 7, 8, 63, 64, 0xFFFFFFFFull, 1ull << 32, 1ull << 46,
                                   1ull << 53, 1ull << 63, ~0ull};
  switch (gpr_rnd(5)) {
    case 0: return old + 1 + gpr_rnd(4);
    case 1: return old - 1 - gpr_rnd(4);
    case 2: return old ^ (1ull << gpr_rnd(64));
    default: return edges[gpr_rnd(sizeof edges / sizeof edges[0])];
  }
}

/* Changes 1 to 8 places: mostly whole 8-byte words (slot words, positions,
 * participant words, header and descriptor fields), sometimes single bytes. */
static inline __attribute__((unused)) void gpr_mutate(uint8_t *b, size_t n) {
  for (uint64_t k = 1 + gpr_rnd(8); k > 0 && n >= 8; k--) {
    size_t at = (size_t)gpr_rnd(n);
    if (gpr_rnd(4)) {
      uint64_t w;
      at &= ~(size_t)7;
      if (at + 8 > n) continue;
      memcpy(&w, b + at, 8);
      w = gpr_edge_value(w);
      memcpy(b + at, &w, 8);
    } else {
      b[at] = (uint8_t)gpr_rnd(256);
    }
  }
}

/* The bounded runs' command line, "NAME FIXTURES_DIR ITERATIONS [SEED]": the
 * seed folder FIXTURES_DIR/SUBDIR in `dir`, the iteration count, and the
 * generator seeded. 0, or 2 (the usage printed) when the arguments are short. */
static inline __attribute__((unused)) int gpr_fuzz_args(int argc, char **argv, const char *subdir, char *dir,
                                                        size_t dir_size, long *iterations) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s FIXTURES_DIR ITERATIONS [SEED]\n", argv[0]);
    return 2;
  }
  snprintf(dir, dir_size, "%s/%s", argv[1], subdir);
  *iterations = strtol(argv[2], NULL, 10);
  gpr_mutation_seed(argc > 3 ? strtoull(argv[3], NULL, 10) : 1);
  return 0;
}

#endif
