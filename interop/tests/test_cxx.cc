// The header compiles as C++17 and its layout agrees with C's.
#include "gpuring.h"
#include <cstdio>

int main() {
  static_assert(sizeof(gpr_slot) == 128, "slot");
  gpr_format_info f;
  if (gpr_format_parse("+w:4", 4, &f) != 0 || f.list_size != 4) {
    std::fprintf(stderr, "format parse failed under C++\n");
    return 1;
  }
  return 0;
}
