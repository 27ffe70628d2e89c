/* gpuring/format.h: what an Arrow C data interface format string means for the
 * layout of a column: its buffers, their element widths and its children.
 * Included by gpuring.h; not a standalone header. */

typedef enum gpr_layout_class {
  GPR_LAYOUT_FIXED = 1,      /* validity + data of bit_width bits per element */
  GPR_LAYOUT_BOOL = 2,       /* validity + data bit-packed */
  GPR_LAYOUT_VARBIN = 3,     /* validity + offsets (offset_bytes each) + data */
  GPR_LAYOUT_LIST = 4,       /* validity + offsets; one child */
  GPR_LAYOUT_FIXED_LIST = 5, /* validity; one child of list_size per element */
  GPR_LAYOUT_STRUCT = 6      /* validity; any number of children */
} gpr_layout_class;

typedef struct gpr_format_info {
  gpr_layout_class layout;
  uint32_t bit_width;     /* FIXED: bits per element */
  uint32_t offset_bytes;  /* VARBIN, LIST: 4 or 8 */
  uint32_t list_size;     /* FIXED_LIST */
  uint32_t buffers;       /* buffers per node, Arrow order */
  int32_t children;       /* required child count, -1 = any */
  int is_integer;         /* usable as dictionary indices */
} gpr_format_info;

GPR_INLINE int gpr_parse_decimal_uint(const char *s, size_t n, uint64_t max, uint64_t *out) {
  if (n == 0 || n > 10) return -1;
  uint64_t v = 0;
  for (size_t i = 0; i < n; i++) {
    if (s[i] < '0' || s[i] > '9') return -1;
    v = v * 10u + (uint64_t)(s[i] - '0');
  }
  if (v > max || (n > 1 && s[0] == '0')) return -1;
  *out = v;
  return 0;
}

GPR_INLINE void gpr_format_set(gpr_format_info *f, gpr_layout_class layout, uint32_t bits,
                               uint32_t buffers, int32_t children) {
  memset(f, 0, sizeof *f);
  f->layout = layout;
  f->bit_width = bits;
  f->buffers = buffers;
  f->children = children;
}

/* "d:P,S" or "d:P,S,W" with W 128 or 256. */
GPR_INLINE int gpr_format_decimal(const char *s, size_t n, gpr_format_info *f) {
  const char *p = s + 2, *end = s + n;
  const char *c1 = (const char *)memchr(p, ',', (size_t)(end - p));
  if (!c1) return -1;
  const char *c2 = (const char *)memchr(c1 + 1, ',', (size_t)(end - c1 - 1));
  uint64_t precision, scale, width = 128;
  const char *scale_end = c2 ? c2 : end;
  const char *sp = c1 + 1;
  if (sp < scale_end && *sp == '-') sp++;
  if (gpr_parse_decimal_uint(p, (size_t)(c1 - p), 76, &precision) != 0 ||
      gpr_parse_decimal_uint(sp, (size_t)(scale_end - sp), 76, &scale) != 0)
    return -1;
  if (c2 && gpr_parse_decimal_uint(c2 + 1, (size_t)(end - c2 - 1), 256, &width) != 0) return -1;
  if ((width != 128 && width != 256) || precision < 1 || (width == 128 && precision > 38))
    return -1;
  gpr_format_set(f, GPR_LAYOUT_FIXED, (uint32_t)width, 2, 0);
  return 0;
}

/* "w:N" (fixed binary, N bytes) or "+w:N" (fixed-size list of N). */
GPR_INLINE int gpr_format_sized(const char *s, size_t n, size_t at, uint64_t *size) {
  return gpr_parse_decimal_uint(s + at, n - at, 0x7FFFFFFFu, size) == 0 && *size > 0 ? 0 : -1;
}

/* Is `c` one of the time units s, m, u, n? (strchr alone would also match the
 * terminating NUL, accepting "tt\0" where every other language refuses it.) */
GPR_INLINE int gpr_time_unit(char c) { return c && strchr("smun", c); }

GPR_INLINE int gpr_format_temporal(const char *s, size_t n, gpr_format_info *f) {
  if (n == 3 && s[1] == 'd' && (s[2] == 'D' || s[2] == 'm')) {
    gpr_format_set(f, GPR_LAYOUT_FIXED, s[2] == 'D' ? 32 : 64, 2, 0);
    return 0;
  }
  if (n == 3 && s[1] == 't' && gpr_time_unit(s[2])) {
    gpr_format_set(f, GPR_LAYOUT_FIXED, (s[2] == 's' || s[2] == 'm') ? 32 : 64, 2, 0);
    return 0;
  }
  if (n >= 4 && s[1] == 's' && gpr_time_unit(s[2]) && s[3] == ':') {
    gpr_format_set(f, GPR_LAYOUT_FIXED, 64, 2, 0); /* timestamp; zone may be empty */
    return 0;
  }
  if (n == 3 && s[1] == 'D' && gpr_time_unit(s[2])) {
    gpr_format_set(f, GPR_LAYOUT_FIXED, 64, 2, 0);
    return 0;
  }
  return -1;
}

GPR_INLINE int gpr_format_nested(const char *s, size_t n, gpr_format_info *f) {
  uint64_t size;
  if (n == 2 && (s[1] == 'l' || s[1] == 'L')) {
    gpr_format_set(f, GPR_LAYOUT_LIST, 0, 2, 1);
    f->offset_bytes = s[1] == 'l' ? 4 : 8;
    return 0;
  }
  if (n == 2 && s[1] == 's') {
    gpr_format_set(f, GPR_LAYOUT_STRUCT, 0, 1, -1);
    return 0;
  }
  if (n > 3 && s[1] == 'w' && s[2] == ':' && gpr_format_sized(s, n, 3, &size) == 0) {
    gpr_format_set(f, GPR_LAYOUT_FIXED_LIST, 0, 1, 1);
    f->list_size = (uint32_t)size;
    return 0;
  }
  return -1;
}

/* An integer type of `bits` bits (usable as dictionary indices). */
GPR_INLINE int gpr_format_integer(gpr_format_info *f, uint32_t bits) {
  gpr_format_set(f, GPR_LAYOUT_FIXED, bits, 2, 0);
  f->is_integer = 1;
  return 0;
}

/* Parses a format string (not NUL-terminated, n bytes). 0 if supported. */
GPR_INLINE int gpr_format_parse(const char *s, size_t n, gpr_format_info *f) {
  if (n == 0) return -1;
  if (n == 1) {
    switch (s[0]) {
      case 'c': case 'C': return gpr_format_integer(f, 8);
      case 's': case 'S': return gpr_format_integer(f, 16);
      case 'i': case 'I': return gpr_format_integer(f, 32);
      case 'l': case 'L': return gpr_format_integer(f, 64);
      case 'e': gpr_format_set(f, GPR_LAYOUT_FIXED, 16, 2, 0); return 0;
      case 'f': gpr_format_set(f, GPR_LAYOUT_FIXED, 32, 2, 0); return 0;
      case 'g': gpr_format_set(f, GPR_LAYOUT_FIXED, 64, 2, 0); return 0;
      case 'b': gpr_format_set(f, GPR_LAYOUT_BOOL, 1, 2, 0); return 0;
      case 'z': case 'u': case 'Z': case 'U':
        gpr_format_set(f, GPR_LAYOUT_VARBIN, 8, 3, 0);
        f->offset_bytes = (s[0] == 'z' || s[0] == 'u') ? 4 : 8;
        return 0;
      default: return -1;
    }
  }
  uint64_t size;
  if (s[0] == 'w' && s[1] == ':' && gpr_format_sized(s, n, 2, &size) == 0) {
    if (size > 0x0FFFFFFFu) return -1;
    gpr_format_set(f, GPR_LAYOUT_FIXED, (uint32_t)size * 8u, 2, 0);
    return 0;
  }
  if (s[0] == 'd' && s[1] == ':') return gpr_format_decimal(s, n, f);
  if (s[0] == 't') return gpr_format_temporal(s, n, f);
  if (s[0] == '+') return gpr_format_nested(s, n, f);
  return -1;
}
