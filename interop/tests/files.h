/* Whole-file reads and writes for the C tests and fixture tools. */
#ifndef GPR_TEST_FILES_H
#define GPR_TEST_FILES_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* The file's bytes plus a NUL (so text can be used as a string); NULL if it cannot be opened. */
static inline __attribute__((unused)) uint8_t *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  *len = 0;
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = (uint8_t *)malloc(*len + 1);
  if (fread(b, 1, *len, f) != *len) *len = 0;
  b[*len] = 0;
  fclose(f);
  return b;
}

/* 0 when all n bytes were written. */
static inline __attribute__((unused)) int write_whole_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f) return -1;
  int ok = fwrite(data, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

#endif
