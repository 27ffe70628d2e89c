/* Test helper: the stalled sweeper of stalled_sweeper.h, in its own process.
 *   take_back NAME POS COUNT  for each position POS .. POS+COUNT-1 in turn,
 *                             waits for a claim there and takes it back;
 *                             prints "took POS", or "late POS" where the claim
 *                             was confirmed first, or "none POS" after 10 s
 *                             without a claim.
 * Prints "ready" once the segment is mapped (it never joins the ring). */
#include "stalled_sweeper.h"

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: take_back NAME POS COUNT\n");
    return 2;
  }
  gpr_segment seg;
  gpr_error err;
  if (gpr_segment_open(&seg, argv[1], NULL, &err) != 0) {
    fprintf(stderr, "%s: %s\n", gpr_code_name(err.code), err.message);
    return 1;
  }
  printf("ready\n");
  fflush(stdout);
  static const char *const said[] = {"took", "late", "none"};
  uint64_t first = strtoull(argv[2], NULL, 10), count = strtoull(argv[3], NULL, 10);
  for (uint64_t pos = first; pos < first + count; pos++) {
    printf("%s %llu\n", said[stalled_sweeper_take_back(&seg, pos)], (unsigned long long)pos);
    fflush(stdout);
  }
  gpr_segment_close(&seg);
  return 0;
}
