/* Frame body codec: encode, validate, describe, re-encode byte-identically,
 * and every kind of corruption refused with its code. */
#include "gpuring.h"
#include "check.h"

/* Columns: a int32 (nullable, sliced by 3), s utf8, l list<int64>, t struct{x float64},
 * d dictionary<int8 -> utf8>. 10 rows. */
static gpr_node_desc nodes[] = {
    {"a", 1, "i", 1, NULL, 0, 0, GPR_NODE_NULLABLE, -1, 2, 10, 2, 3},
    {"s", 1, "u", 1, NULL, 0, 0, 0, -1, 3, 10, 0, 0},
    {"l", 1, "+l", 2, NULL, 0, 1, 0, -1, 2, 10, 0, 0},
    {"item", 4, "l", 1, NULL, 0, 0, 0, -1, 2, 30, 0, 0},
    {"t", 1, "+s", 2, NULL, 0, 1, 0, -1, 1, 10, 0, 0},
    {"x", 1, "g", 1, NULL, 0, 0, 0, -1, 2, 10, 0, 0},
    {"d", 1, "c", 1, NULL, 0, 0, 0, 7, 2, 10, 0, 0},
    {"", 0, "u", 1, NULL, 0, 0, 0, -1, 3, 4, 0, 0},
};
static gpr_body_buffer buffers[17];

static void host(int i, uint64_t off, uint64_t len) {
  buffers[i].kind = GPR_MEM_HOST;
  buffers[i].device_ordinal = -1;
  buffers[i].offset = off;
  buffers[i].length = len;
  snprintf((char *)buffers[i].handle, GPR_HANDLE_BYTES, "/gpuring.t.p0g1.a0");
}

static size_t encode(uint8_t *out, size_t cap) {
  static const uint8_t meta[] = {1, 0, 0, 0, 1, 0, 0, 0, 'k', 1, 0, 0, 0, 'v'};
  gpr_frame_desc d;
  memset(&d, 0, sizeof d);
  d.row_count = 10;
  d.root_count = 5;
  d.dictionary_count = 1;
  d.node_count = 8;
  d.buffer_count = 17;
  d.nodes = nodes;
  d.buffers = buffers;
  d.metadata = meta;
  d.metadata_length = sizeof meta;
  size_t n = 0;
  gpr_error err;
  CHECK(gpr_body_encode(&d, out, cap, &n, &err) == 0);
  return n;
}

static void setup(void) {
  memset(buffers, 0, sizeof buffers);
  int b = 0;
  host(b++, 64, 2);          /* a validity: 13 bits */
  host(b++, 128, 52);        /* a data: 13 int32 */
  buffers[b++].kind = GPR_MEM_ABSENT; /* s validity */
  host(b++, 192, 44);        /* s offsets */
  host(b++, 256, 100);       /* s data */
  buffers[b++].kind = GPR_MEM_ABSENT;
  host(b++, 384, 44);        /* l offsets */
  buffers[b++].kind = GPR_MEM_ABSENT;
  host(b++, 448, 240);       /* item data */
  buffers[b++].kind = GPR_MEM_ABSENT; /* t validity */
  buffers[b++].kind = GPR_MEM_ABSENT;
  host(b++, 704, 80);        /* x data */
  buffers[b++].kind = GPR_MEM_ABSENT;
  host(b++, 832, 10);        /* d indices */
  buffers[b++].kind = GPR_MEM_ABSENT;
  host(b++, 896, 20);        /* dictionary offsets */
  host(b++, 960, 8);         /* dictionary data */
}

/* Copies the good body, lets `mutate` damage it, expects `code`. */
static void expect(const uint8_t *good, size_t n, void (*mutate)(uint8_t *, size_t *), gpr_code code) {
  static _Alignas(8) uint8_t copy[8192];
  memcpy(copy, good, n);
  size_t len = n;
  mutate(copy, &len);
  gpr_error err;
  CHECK_CODE(gpr_body_validate(copy, len, NULL, &err), code);
}

static gpr_body_node *node_at(uint8_t *b, int i) { return (gpr_body_node *)(b + 128) + i; }
static gpr_body_buffer *buf_at(uint8_t *b, int i) { return (gpr_body_buffer *)(b + 128 + 8 * 64) + i; }
static void m_magic(uint8_t *b, size_t *n) { (void)n; b[0] ^= 1; }
static void m_short(uint8_t *b, size_t *n) { (void)b; *n -= 8; }
static void m_nodes(uint8_t *b, size_t *n) { (void)n; ((gpr_body_header *)b)->node_count = 9; }
static void m_format(uint8_t *b, size_t *n) { (void)n; node_at(b, 0)->format_length = 0; }
static void m_string(uint8_t *b, size_t *n) { (void)n; node_at(b, 1)->name_offset = 1u << 30; }
static void m_nulls(uint8_t *b, size_t *n) { (void)n; node_at(b, 0)->null_count = 11; }
static void m_small(uint8_t *b, size_t *n) { (void)n; buf_at(b, 1)->length = 51; }
static void m_children(uint8_t *b, size_t *n) { (void)n; node_at(b, 2)->child_count = 2; }
static void m_dict(uint8_t *b, size_t *n) { (void)n; node_at(b, 6)->dictionary = 2; }
static void m_kind(uint8_t *b, size_t *n) { (void)n; buf_at(b, 1)->kind = 9; }
static void m_absent(uint8_t *b, size_t *n) { (void)n; buf_at(b, 0)->kind = GPR_MEM_ABSENT; buf_at(b, 0)->length = 0; }
static void m_rows(uint8_t *b, size_t *n) { (void)n; node_at(b, 1)->length = 9; }
static void m_child_short(uint8_t *b, size_t *n) { (void)n; node_at(b, 5)->length = 9; }
static void m_overflow(uint8_t *b, size_t *n) { (void)n; buf_at(b, 1)->offset = UINT64_MAX - 4; }
static void m_handle(uint8_t *b, size_t *n) { (void)n; memset(buf_at(b, 1)->handle, 'x', 64); }

/* Validates a one-column frame of `rows` rows of `format` with a 64-byte data buffer. */
static int validate_one(const char *format, uint32_t format_length, uint64_t rows) {
  gpr_node_desc node = {"c", 1, format, format_length, NULL, 0, 0, 0, -1, 2, rows, 0, 0};
  gpr_body_buffer bufs[2];
  memset(bufs, 0, sizeof bufs);
  bufs[1].kind = GPR_MEM_HOST;
  bufs[1].device_ordinal = -1;
  bufs[1].length = 64;
  snprintf((char *)bufs[1].handle, GPR_HANDLE_BYTES, "/gpuring.t.p0g1.a0");
  gpr_frame_desc d;
  memset(&d, 0, sizeof d);
  d.row_count = rows;
  d.root_count = d.node_count = 1;
  d.buffer_count = 2;
  d.nodes = &node;
  d.buffers = bufs;
  static _Alignas(8) uint8_t body[1024];
  size_t n = 0;
  gpr_error err;
  CHECK(gpr_body_encode(&d, body, sizeof body, &n, &err) == 0);
  gpr_body_view v;
  int rc = gpr_body_validate(body, n, &v, &err);
  return rc == 0 ? 0 : (int)err.code;
}

/* Before: 2^41 values of 1 MiB wrapped the byte count to 0 and a 64-byte
 * buffer passed; and "tt" + NUL passed as a time unit (strchr matches the
 * terminator) where TypeScript and Python refuse it. */
static void test_size_overflow_and_nul_units(void) {
  CHECK(validate_one("w:1048576", 9, 1ull << 41) == GPR_E_FRAME_BOUNDS);
  CHECK(validate_one("w:16", 4, 4) == 0);
  CHECK(validate_one("tt\0", 3, 1) == GPR_E_FRAME_INVALID);
  CHECK(validate_one("tD\0", 3, 1) == GPR_E_FRAME_INVALID);
  CHECK(validate_one("ts\0:", 4, 1) == GPR_E_FRAME_INVALID);
  CHECK(validate_one("tts", 3, 1) == 0);
}

int main(void) {
  static _Alignas(8) uint8_t body[8192], again[8192];
  test_size_overflow_and_nul_units();
  setup();
  size_t n = encode(body, sizeof body);
  gpr_body_view v;
  gpr_error err;
  int rc = gpr_body_validate(body, n, &v, &err);
  if (rc) fprintf(stderr, "validate: %s %s\n", gpr_code_name(err.code), err.message);
  CHECK(rc == 0);
  gpr_node_desc described[8];
  gpr_frame_desc d;
  gpr_body_describe(&v, described, &d);
  size_t m = 0;
  CHECK(gpr_body_encode(&d, again, sizeof again, &m, &err) == 0);
  CHECK(m == n && memcmp(body, again, n) == 0);
  expect(body, n, m_magic, GPR_E_FRAME_INVALID);
  expect(body, n, m_short, GPR_E_FRAME_INVALID);
  expect(body, n, m_nodes, GPR_E_FRAME_INVALID);
  expect(body, n, m_format, GPR_E_FRAME_INVALID);
  expect(body, n, m_string, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_nulls, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_small, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_children, GPR_E_FRAME_INVALID);
  expect(body, n, m_dict, GPR_E_FRAME_INVALID);
  expect(body, n, m_kind, GPR_E_FRAME_INVALID);
  expect(body, n, m_absent, GPR_E_FRAME_INVALID);
  expect(body, n, m_rows, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_child_short, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_overflow, GPR_E_FRAME_BOUNDS);
  expect(body, n, m_handle, GPR_E_FRAME_INVALID);
  /* Arbitrary bytes never crash the validator. */
  srand(7);
  for (int round = 0; round < 20000; round++) {
    memcpy(again, body, n);
    for (int k = 0; k < 1 + round % 8; k++) again[rand() % n] = (uint8_t)rand();
    (void)gpr_body_validate(again, n, NULL, &err);
  }
  static const char *utf8_good[] = {"", "abc", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
  static const char *utf8_bad[] = {"\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xff", "a\x80"};
  for (size_t i = 0; i < sizeof utf8_good / sizeof *utf8_good; i++) CHECK(gpr_utf8_ok((const uint8_t *)utf8_good[i], strlen(utf8_good[i])));
  for (size_t i = 0; i < sizeof utf8_bad / sizeof *utf8_bad; i++) CHECK(!gpr_utf8_ok((const uint8_t *)utf8_bad[i], strlen(utf8_bad[i])));
  gpr_format_info f;
  const char *good[] = {"b", "c", "L", "e", "g", "u", "Z", "w:16", "d:38,10", "d:10,-2,256", "tdD", "tdm", "tts", "ttn", "tsu:UTC", "tsn:", "tDm", "+l", "+L", "+w:3", "+s"};
  const char *bad[] = {"", "x", "w:0", "w:", "d:39,1", "d:10", "d:1,1,64", "+w:0", "+q", "tsu", "tx", "w:01"};
  for (size_t i = 0; i < sizeof good / sizeof *good; i++) CHECK(gpr_format_parse(good[i], strlen(good[i]), &f) == 0);
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) CHECK(gpr_format_parse(bad[i], strlen(bad[i]), &f) != 0);
  return CHECK_DONE();
}
