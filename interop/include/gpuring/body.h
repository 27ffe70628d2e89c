/* gpuring/body.h: the frame body codec.
 *
 * A body is: header (128 bytes), node_count nodes (64 bytes each, pre-order:
 * the root_count column trees, then the dictionary_count dictionary trees),
 * buffer_count buffer descriptors (128 bytes each, in node order, Arrow order
 * within a node), then the string table padded with zeros to 8 bytes. Strings
 * are stored in node order (name, format, metadata), schema metadata last.
 *
 * gpr_body_validate checks a body that was already copied out of shared memory:
 * every count, every range, every format and every buffer size. It returns
 * FRAME_INVALID for a malformed structure and FRAME_BOUNDS for an offset or
 * length outside its container; the TypeScript and Python decoders agree.
 * Included by gpuring.h; not a standalone header. */

typedef struct gpr_body_view {
  const gpr_body_header *header;
  const gpr_body_node *nodes;
  const gpr_body_buffer *buffers;
  const char *strings;
} gpr_body_view;

GPR_INLINE uint64_t gpr_body_size_for(uint64_t nodes, uint64_t buffers, uint64_t strings) {
  return sizeof(gpr_body_header) + nodes * sizeof(gpr_body_node) +
         buffers * sizeof(gpr_body_buffer) + gpr_align_up(strings, 8u);
}

GPR_INLINE int gpr_range_ok(uint64_t offset, uint64_t length, uint64_t limit) {
  return offset <= limit && length <= limit - offset;
}

GPR_INLINE int gpr_body_bad(gpr_error *err, gpr_code code, uint32_t node, const char *what) {
  return gpr_fail(err, code, 0, "frame body: node %u: %s", node, what);
}

/* Bytes a buffer needs to hold elements [0, end) at `bits` bits each. */
/* Bytes for `end` values of `bits` each; UINT64_MAX (larger than any buffer)
 * when the product does not fit: w:N with a large N must not wrap into a
 * small size that a tiny buffer satisfies. */
GPR_INLINE uint64_t gpr_bits_to_bytes(uint64_t end, uint64_t bits) {
  if (bits && end > (UINT64_MAX - 7u) / bits) return UINT64_MAX;
  return (end * bits + 7u) / 8u;
}

GPR_INLINE int gpr_body_check_buffers(const gpr_body_view *v, uint32_t i, uint32_t first,
                                      const gpr_format_info *f, gpr_error *err) {
  const gpr_body_node *n = &v->nodes[i];
  uint64_t end = n->offset + n->length;
  for (uint32_t b = 0; b < f->buffers; b++) {
    const gpr_body_buffer *buf = &v->buffers[first + b];
    if (buf->kind > GPR_MEM_CUDA_VMM) return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "unknown memory kind");
    if (buf->device_ordinal < -1) return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "device ordinal below -1");
    if (buf->kind == GPR_MEM_ABSENT) {
      if (buf->length != 0) return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "absent buffer has a length");
      if (b == 0 ? n->null_count > 0 : end > 0)
        return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "a required buffer is absent");
      if (buf->offset > GPR_MAX_COUNT)
        return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "absent buffer offset out of range");
      continue;
    }
    if (buf->length > GPR_MAX_COUNT || buf->offset > GPR_MAX_COUNT - buf->length)
      return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "buffer offset + length out of range");
    /* A zero last byte settles it without a scan: names are zero-padded. */
    if (buf->kind == GPR_MEM_HOST && buf->handle[GPR_HANDLE_BYTES - 1] != 0 &&
        !memchr(buf->handle, 0, GPR_HANDLE_BYTES))
      return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "host handle is not NUL-terminated");
    if (buf->kind == GPR_MEM_CUDA_POOL && buf->pool_id == 0)
      return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "cuda-pool buffer without a pool id");
    if (buf->kind == GPR_MEM_CUDA_VMM && buf->alloc_id == 0)
      return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "cuda-vmm buffer without a span id");
    uint64_t need = 0;
    if (b == 0) need = gpr_bits_to_bytes(end, 1);
    else if (f->layout == GPR_LAYOUT_FIXED || f->layout == GPR_LAYOUT_BOOL)
      need = gpr_bits_to_bytes(end, f->bit_width);
    else if (b == 1 && (f->layout == GPR_LAYOUT_VARBIN || f->layout == GPR_LAYOUT_LIST))
      need = end ? (end + 1u) * f->offset_bytes : 0;
    if (buf->length < need)
      return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "buffer too small for offset + length");
  }
  return 0;
}

/* Checks what a node's children must hold for it. */
GPR_INLINE int gpr_body_check_children(const gpr_body_view *v, uint32_t i,
                                       const gpr_format_info *f, gpr_error *err) {
  const gpr_body_node *n = &v->nodes[i];
  uint64_t end = n->offset + n->length;
  if (f->children >= 0 && n->child_count != (uint32_t)f->children)
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "wrong number of children for its type");
  uint64_t need = f->layout == GPR_LAYOUT_STRUCT ? end
                  : f->layout == GPR_LAYOUT_FIXED_LIST ? end * f->list_size : 0;
  if (f->layout == GPR_LAYOUT_FIXED_LIST && f->list_size && end > GPR_MAX_COUNT / f->list_size)
    return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "fixed-size list too long");
  /* Children follow in pre-order; walk them by skipping each child's subtree. */
  uint32_t c = i + 1u;
  for (uint32_t k = 0; k < n->child_count; k++) {
    if (v->nodes[c].length < need)
      return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "child shorter than its parent needs");
    uint32_t pending = 1;
    while (pending) pending += v->nodes[c++].child_count - 1u;
  }
  return 0;
}

/* Well-formed UTF-8 (no overlongs, no surrogates, nothing above U+10FFFF). */
GPR_INLINE int gpr_utf8_ok(const uint8_t *p, uint64_t n) {
  for (uint64_t i = 0; i < n;) {
    uint8_t c = p[i];
    if (c < 0x80) { /* names and formats are mostly ASCII */
      i++;
      continue;
    }
    uint32_t need = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 4;
    if (need == 4 || n - i <= need) return 0; /* bad lead byte (a lone continuation among them), or truncated */
    uint32_t cp = need == 1 ? (c & 0x1Fu) : need == 2 ? (c & 0x0Fu) : (c & 0x07u);
    for (uint32_t k = 1; k <= need; k++) {
      if ((p[i + k] & 0xC0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + k] & 0x3Fu);
    }
    static const uint32_t min_cp[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[need] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    i += need + 1;
  }
  return 1;
}

/* Arrow C data interface metadata: int32 count, then (int32 len, bytes) twice
 * per pair, consuming exactly `len` bytes. Zero bytes means none. */
GPR_INLINE int gpr_metadata_ok(const uint8_t *p, uint64_t len) {
  if (len == 0) return 1;
  if (len < 4) return 0;
  int32_t count, n;
  memcpy(&count, p, 4);
  if (count < 0 || (uint64_t)count > len / 8u) return 0;
  uint64_t at = 4;
  for (int64_t i = 0; i < 2 * (int64_t)count; i++) {
    if (at + 4u > len) return 0;
    memcpy(&n, p + at, 4);
    if (n < 0 || at + 4u + (uint64_t)n > len || !gpr_utf8_ok(p + at + 4u, (uint64_t)n)) return 0;
    at += 4u + (uint64_t)n;
  }
  return at == len;
}

/* A format string is UTF-8 without NUL: a timestamp's zone is free text, and
 * the Arrow C export hands it on NUL-terminated, so an inner NUL would cut the
 * zone short in C while other languages keep it whole. */
GPR_INLINE int gpr_format_text_ok(const gpr_body_view *v, const gpr_body_node *n) {
  const uint8_t *s = (const uint8_t *)v->strings + n->format_offset;
  /* A loop, not memchr: formats are a few bytes, shorter than a call costs. */
  for (uint32_t k = 0; k < n->format_length; k++)
    if (s[k] == 0) return 0;
  return gpr_utf8_ok(s, n->format_length);
}

GPR_INLINE int gpr_body_check_strings(const gpr_body_view *v, const gpr_body_node *n) {
  uint64_t lim = v->header->strings_length;
  return gpr_range_ok(n->name_offset, n->name_length, lim) &&
         gpr_range_ok(n->format_offset, n->format_length, lim) &&
         gpr_range_ok(n->metadata_offset, n->metadata_length, lim);
}

/* Walks the pre-order node list: every tree must be complete, and the trees
 * must number root_count + dictionary_count. Marks each tree's root in is_root
 * (1 = column, 2 = dictionary). */
GPR_INLINE int gpr_body_check_trees(const gpr_body_view *v, uint8_t *is_root, gpr_error *err) {
  const gpr_body_header *h = v->header;
  uint32_t stack[GPR_MAX_DEPTH + 1u]; /* 260 bytes: no heap allocation per frame */
  uint32_t depth = 0, trees = 0;
  int rc = 0;
  for (uint32_t i = 0; i < h->node_count && rc == 0; i++) {
    if (depth == 0) is_root[i] = ++trees <= h->root_count ? 1 : 2;
    uint32_t children = v->nodes[i].child_count;
    if (children > h->node_count - i - 1u) {
      rc = gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "more children than nodes");
    } else if (children && depth == GPR_MAX_DEPTH) {
      rc = gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "nested deeper than 64 levels");
    } else if (children) {
      stack[depth++] = children;
    } else {
      while (depth && --stack[depth - 1] == 0) depth--;
    }
  }
  if (rc == 0 && (depth != 0 || trees != h->root_count + h->dictionary_count))
    rc = gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: node trees do not match the counts");
  return rc;
}

GPR_INLINE int gpr_body_check_node(const gpr_body_view *v, uint32_t i, const uint8_t *is_root,
                                   uint32_t *next_buffer, gpr_error *err) {
  const gpr_body_node *n = &v->nodes[i];
  gpr_format_info f;
  if (!gpr_body_check_strings(v, n))
    return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "string outside the string table");
  if (!gpr_metadata_ok((const uint8_t *)v->strings + n->metadata_offset, n->metadata_length))
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "malformed metadata");
  if (!gpr_utf8_ok((const uint8_t *)v->strings + n->name_offset, n->name_length))
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "name is not UTF-8");
  if (!gpr_format_text_ok(v, n) ||
      gpr_format_parse(v->strings + n->format_offset, n->format_length, &f) != 0)
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "unsupported or malformed format string");
  if (n->flags & ~7u) return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "unknown flags");
  if (n->buffer_count != f.buffers)
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "wrong number of buffers for its type");
  if (n->dictionary != -1 &&
      (n->dictionary <= (int32_t)i || (uint32_t)n->dictionary >= v->header->node_count ||
       is_root[n->dictionary] != 2 || !f.is_integer))
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "bad dictionary reference");
  if (n->null_count < -1 || (n->null_count > 0 && (uint64_t)n->null_count > n->length))
    return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "null count out of range");
  if (n->length > GPR_MAX_COUNT || n->offset > GPR_MAX_COUNT - n->length)
    return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "length or offset out of range");
  if (is_root[i] == 1 && n->length != v->header->row_count)
    return gpr_body_bad(err, GPR_E_FRAME_BOUNDS, i, "column length differs from row count");
  if (f.buffers > v->header->buffer_count - *next_buffer)
    return gpr_body_bad(err, GPR_E_FRAME_INVALID, i, "more buffers than the header says");
  int rc = gpr_body_check_buffers(v, i, *next_buffer, &f, err);
  if (rc == 0) rc = gpr_body_check_children(v, i, &f, err);
  *next_buffer += f.buffers;
  return rc;
}

/* Validates `len` bytes of body (already copied out of shared memory) and, on
 * success, fills `view` with typed pointers into it. `body` must be 8-aligned. */
GPR_INLINE int gpr_body_validate(const uint8_t *body, size_t len, gpr_body_view *view,
                                 gpr_error *err) {
  if (len < sizeof(gpr_body_header))
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: shorter than its header");
  const gpr_body_header *h = (const gpr_body_header *)body;
  if (h->magic != GPR_BODY_MAGIC || h->version != GPR_BODY_VERSION)
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: bad magic or version");
  if (h->body_length != len || h->node_count > GPR_MAX_NODES ||
      h->buffer_count > GPR_MAX_BUFFERS || h->sync_kind > GPR_MEM_CUDA_IPC ||
      gpr_body_size_for(h->node_count, h->buffer_count, h->strings_length) != len)
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: counts do not add up to its length");
  if (h->row_count > GPR_MAX_COUNT)
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "frame body: row count out of range");
  if ((uint64_t)h->root_count + h->dictionary_count > h->node_count)
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: more trees than nodes");
  gpr_body_view v;
  v.header = h;
  v.nodes = (const gpr_body_node *)(body + sizeof *h);
  v.buffers = (const gpr_body_buffer *)(v.nodes + h->node_count);
  v.strings = (const char *)(v.buffers + h->buffer_count);
  if (!gpr_range_ok(h->metadata_offset, h->metadata_length, h->strings_length))
    return gpr_fail(err, GPR_E_FRAME_BOUNDS, 0, "frame body: metadata outside the string table");
  if (!gpr_metadata_ok((const uint8_t *)v.strings + h->metadata_offset, h->metadata_length))
    return gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: malformed schema metadata");
  /* Every frame a reader takes is checked, most with few nodes: no heap
   * allocation for those (malloc and free were 3-4% of a batched Node
   * consumer's CPU). */
  uint8_t few[256];
  uint8_t *is_root = h->node_count < sizeof few ? few : (uint8_t *)malloc((size_t)h->node_count + 1u);
  if (!is_root) return gpr_fail(err, GPR_E_OUT_OF_MEMORY, ENOMEM, "out of memory");
  memset(is_root, 0, (size_t)h->node_count + 1u);
  int rc = gpr_body_check_trees(&v, is_root, err);
  uint32_t next_buffer = 0;
  for (uint32_t i = 0; rc == 0 && i < h->node_count; i++)
    rc = gpr_body_check_node(&v, i, is_root, &next_buffer, err);
  if (is_root != few) free(is_root);
  if (rc == 0 && next_buffer != h->buffer_count)
    rc = gpr_fail(err, GPR_E_FRAME_INVALID, 0, "frame body: fewer buffers used than declared");
  if (rc == 0 && view) *view = v;
  return rc;
}

/* ---- encoding ------------------------------------------------------------ */

/* One node as an encoder's caller describes it; strings need not end in NUL. */
typedef struct gpr_node_desc {
  const char *name;
  uint32_t name_length;
  const char *format;
  uint32_t format_length;
  const uint8_t *metadata;  /* Arrow C data interface metadata encoding, or NULL */
  uint32_t metadata_length;
  uint32_t child_count;
  uint32_t flags;
  int32_t dictionary;
  uint32_t buffer_count;
  uint64_t length;
  int64_t null_count;
  uint64_t offset;
} gpr_node_desc;

typedef struct gpr_frame_desc {
  uint64_t row_count;
  uint32_t root_count;
  uint32_t dictionary_count;
  uint32_t node_count;
  uint32_t buffer_count;
  const gpr_node_desc *nodes;
  const gpr_body_buffer *buffers;
  const uint8_t *metadata;
  uint32_t metadata_length;
  uint16_t sync_kind;
  uint8_t sync_handle[GPR_HANDLE_BYTES];
} gpr_frame_desc;

GPR_INLINE uint64_t gpr_desc_strings_length(const gpr_frame_desc *d) {
  uint64_t total = d->metadata_length;
  for (uint32_t i = 0; i < d->node_count; i++)
    total += (uint64_t)d->nodes[i].name_length + d->nodes[i].format_length +
             d->nodes[i].metadata_length;
  return total;
}

GPR_INLINE uint64_t gpr_body_encoded_size(const gpr_frame_desc *d) {
  return gpr_body_size_for(d->node_count, d->buffer_count, gpr_desc_strings_length(d));
}

GPR_INLINE uint32_t gpr_put_string(char *strings, uint32_t *at, const void *s, uint32_t n) {
  uint32_t start = *at;
  if (n) memcpy(strings + start, s, n);
  *at += n;
  return start;
}

/* Writes the canonical encoding of `d` into out[0, cap). Every reserved byte
 * and padding byte is zero, so equal descriptions give equal bytes. */
GPR_INLINE int gpr_body_encode(const gpr_frame_desc *d, uint8_t *out, size_t cap,
                               size_t *written, gpr_error *err) {
  uint64_t strings_length = gpr_desc_strings_length(d);
  uint64_t size = gpr_body_encoded_size(d);
  if (size > GPR_MAX_BODY_BYTES || strings_length > UINT32_MAX)
    return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "frame body would be %llu bytes; the limit is %u",
                    (unsigned long long)size, GPR_MAX_BODY_BYTES);
  if (size > cap) return gpr_fail(err, GPR_E_INVALID_ARGUMENT, 0, "output buffer too small");
  memset(out, 0, (size_t)size);
  gpr_body_header *h = (gpr_body_header *)out;
  h->magic = GPR_BODY_MAGIC;
  h->version = GPR_BODY_VERSION;
  h->body_length = (uint32_t)size;
  h->node_count = d->node_count;
  h->buffer_count = d->buffer_count;
  h->root_count = d->root_count;
  h->dictionary_count = d->dictionary_count;
  h->strings_length = (uint32_t)strings_length;
  h->row_count = d->row_count;
  h->sync_kind = d->sync_kind;
  memcpy(h->sync_handle, d->sync_handle, GPR_HANDLE_BYTES);
  gpr_body_node *nodes = (gpr_body_node *)(out + sizeof *h);
  gpr_body_buffer *buffers = (gpr_body_buffer *)(nodes + d->node_count);
  char *strings = (char *)(buffers + d->buffer_count);
  uint32_t at = 0;
  for (uint32_t i = 0; i < d->node_count; i++) {
    const gpr_node_desc *s = &d->nodes[i];
    gpr_body_node *n = &nodes[i];
    n->name_offset = gpr_put_string(strings, &at, s->name, s->name_length);
    n->name_length = s->name_length;
    n->format_offset = gpr_put_string(strings, &at, s->format, s->format_length);
    n->format_length = s->format_length;
    n->metadata_offset = gpr_put_string(strings, &at, s->metadata, s->metadata_length);
    n->metadata_length = s->metadata_length;
    n->child_count = s->child_count;
    n->flags = s->flags;
    n->dictionary = s->dictionary;
    n->buffer_count = s->buffer_count;
    n->length = s->length;
    n->null_count = s->null_count;
    n->offset = s->offset;
  }
  h->metadata_offset = gpr_put_string(strings, &at, d->metadata, d->metadata_length);
  h->metadata_length = d->metadata_length;
  if (d->buffer_count) memcpy(buffers, d->buffers, d->buffer_count * sizeof(gpr_body_buffer));
  for (uint32_t b = 0; b < d->buffer_count; b++) {
    /* reserved fields are zero in the canonical form whatever the caller left there */
    buffers[b].flags = 0;
    memset(buffers[b].reserved, 0, sizeof buffers[b].reserved);
    if (buffers[b].kind != GPR_MEM_CUDA_POOL) buffers[b].pool_id = 0; /* meaningful for cuda-pool only */
  }
  if (written) *written = (size_t)size;
  return 0;
}

/* Describes a validated body, pointing into it: the inverse of the encoder.
 * `nodes` must have room for view->header->node_count entries. */
GPR_INLINE void gpr_body_describe(const gpr_body_view *v, gpr_node_desc *nodes,
                                  gpr_frame_desc *out) {
  const gpr_body_header *h = v->header;
  memset(out, 0, sizeof *out);
  out->row_count = h->row_count;
  out->root_count = h->root_count;
  out->dictionary_count = h->dictionary_count;
  out->node_count = h->node_count;
  out->buffer_count = h->buffer_count;
  out->nodes = nodes;
  out->buffers = v->buffers;
  out->metadata = (const uint8_t *)v->strings + h->metadata_offset;
  out->metadata_length = h->metadata_length;
  out->sync_kind = h->sync_kind;
  memcpy(out->sync_handle, h->sync_handle, GPR_HANDLE_BYTES);
  for (uint32_t i = 0; i < h->node_count; i++) {
    const gpr_body_node *n = &v->nodes[i];
    gpr_node_desc *s = &nodes[i];
    s->name = v->strings + n->name_offset;
    s->name_length = n->name_length;
    s->format = v->strings + n->format_offset;
    s->format_length = n->format_length;
    s->metadata = (const uint8_t *)v->strings + n->metadata_offset;
    s->metadata_length = n->metadata_length;
    s->child_count = n->child_count;
    s->flags = n->flags;
    s->dictionary = n->dictionary;
    s->buffer_count = n->buffer_count;
    s->length = n->length;
    s->null_count = n->null_count;
    s->offset = n->offset;
  }
}
