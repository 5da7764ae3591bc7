/* Builds GGUF files in memory for tests and for the fuzz seed corpus. Test-side code: aborts on
 * allocation failure rather than reporting it. Everything is written little-endian, as GGUF is. */
#ifndef SPECD_TESTS_GGUF_BUILDER_H
#define SPECD_TESTS_GGUF_BUILDER_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct gguf_builder {
    uint8_t *buf;
    size_t len, cap;
} gguf_builder;

static inline void gb_bytes(gguf_builder *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n)
            cap *= 2;
        b->buf = realloc(b->buf, cap);
        if (!b->buf) abort();
        b->cap = cap;
    }
    if (n) memcpy(b->buf + b->len, p, n);
    b->len += n;
}
static inline void gb_u8(gguf_builder *b, uint8_t v) {
    gb_bytes(b, &v, 1);
}
static inline void gb_u32(gguf_builder *b, uint32_t v) {
    gb_bytes(b, &v, 4);
}
static inline void gb_u64(gguf_builder *b, uint64_t v) {
    gb_bytes(b, &v, 8);
}
static inline void gb_f32(gguf_builder *b, float v) {
    gb_bytes(b, &v, 4);
}
static inline void gb_str(gguf_builder *b, const char *s) {
    gb_u64(b, strlen(s));
    gb_bytes(b, s, strlen(s));
}
static inline void gb_header(gguf_builder *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    gb_bytes(b, "GGUF", 4);
    gb_u32(b, version);
    gb_u64(b, n_tensors);
    gb_u64(b, n_kv);
}
/* key + type; the caller writes the value */
static inline void gb_key(gguf_builder *b, const char *key, uint32_t type) {
    gb_str(b, key);
    gb_u32(b, type);
}
static inline void gb_kv_u32(gguf_builder *b, const char *key, uint32_t v) {
    gb_key(b, key, 4);
    gb_u32(b, v);
}
static inline void gb_kv_f32(gguf_builder *b, const char *key, float v) {
    gb_key(b, key, 6);
    gb_f32(b, v);
}
static inline void gb_kv_str(gguf_builder *b, const char *key, const char *v) {
    gb_key(b, key, 8);
    gb_str(b, v);
}
static inline void gb_kv_bool(gguf_builder *b, const char *key, int v) {
    gb_key(b, key, 7);
    gb_u8(b, (uint8_t)v);
}
static inline void gb_kv_strs(gguf_builder *b, const char *key, const char *const *v, size_t n) {
    gb_key(b, key, 9);
    gb_u32(b, 8);
    gb_u64(b, n);
    for (size_t i = 0; i < n; i++)
        gb_str(b, v[i]);
}
static inline void gb_tensor(gguf_builder *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                             uint32_t type, uint64_t offset) {
    gb_str(b, name);
    gb_u32(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        gb_u64(b, ne[i]);
    gb_u32(b, type);
    gb_u64(b, offset);
}
static inline void gb_pad(gguf_builder *b, size_t align) {
    while (b->len % align)
        gb_u8(b, 0);
}
static inline void gb_free(gguf_builder *b) {
    free(b->buf);
    memset(b, 0, sizeof *b);
}

#endif
