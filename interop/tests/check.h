/* Minimal test harness for the C suites: CHECK records a failure and goes on;
 * each binary exits non-zero if anything failed. */
#ifndef GPR_CHECK_H
#define GPR_CHECK_H
#include <stdio.h>
static int gpr_checks_failed = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      gpr_checks_failed++;                                                   \
    }                                                                        \
  } while (0)
#define CHECK_CODE(expr, code_) CHECK((expr) == -(int)(code_))
#define CHECK_DONE() (gpr_checks_failed ? (fprintf(stderr, "%d checks failed\n", gpr_checks_failed), 1) : 0)
#endif
