/* GGUF parsing and validation. Every read goes through a bounds-checked cursor, every count is
 * checked against the bytes left before anything is allocated for it, and every size product is
 * checked for overflow, so a truncated or hostile file ends in SPECD_E_FORMAT, never a crash. */
#include "model/gguf/gguf_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/dtype.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DIMS 4

typedef struct cursor {
    const uint8_t *base;
    size_t size;
    size_t pos;
} cursor;

static size_t left(const cursor *c) {
    return c->size - c->pos;
}

static specd_status truncated(const cursor *c, specd_error *err, const char *what, size_t need) {
    return specd_fail(err, SPECD_E_FORMAT,
                      "truncated file: %s needs %zu bytes at offset %zu, file has %zu", what, need,
                      c->pos, c->size);
}

static specd_status read_bytes(cursor *c, void *out, size_t n, specd_error *err, const char *what) {
    if (left(c) < n) return truncated(c, err, what, n);
    memcpy(out, c->base + c->pos, n);
    c->pos += n;
    return SPECD_OK;
}

static specd_status read_u32(cursor *c, uint32_t *out, specd_error *err, const char *what) {
    return read_bytes(c, out, 4, err, what);
}

static specd_status read_u64(cursor *c, uint64_t *out, specd_error *err, const char *what) {
    return read_bytes(c, out, 8, err, what);
}

static specd_status read_str(cursor *c, specd_gguf_str *out, specd_error *err, const char *what) {
    uint64_t len = 0;
    SPECD_TRY(read_u64(c, &len, err, what));
    if (len > left(c))
        return specd_fail(err, SPECD_E_FORMAT,
                          "%s: string length %llu runs past the end of the file (offset %zu, "
                          "%zu bytes left)",
                          what, (unsigned long long)len, c->pos, left(c));
    out->ptr = (const char *)(c->base + c->pos);
    out->len = len;
    c->pos += (size_t)len;
    return SPECD_OK;
}

/* Bytes of one scalar value; 0 for STRING, ARRAY and unknown types. */
static size_t scalar_size(uint32_t type) {
    switch (type) {
    case SPECD_GGUF_U8:
    case SPECD_GGUF_I8:
    case SPECD_GGUF_BOOL: return 1;
    case SPECD_GGUF_U16:
    case SPECD_GGUF_I16: return 2;
    case SPECD_GGUF_U32:
    case SPECD_GGUF_I32:
    case SPECD_GGUF_F32: return 4;
    case SPECD_GGUF_U64:
    case SPECD_GGUF_I64:
    case SPECD_GGUF_F64: return 8;
    default: return 0;
    }
}

static specd_status check_bools(const uint8_t *p, uint64_t n, specd_error *err, const char *key) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return specd_fail(err, SPECD_E_FORMAT, "key '%s': bool value %u is neither 0 nor 1",
                              key, p[i]);
    return SPECD_OK;
}

static specd_status parse_array(cursor *c, specd_gguf_kv *kv, specd_error *err, const char *key) {
    uint32_t et;
    uint64_t n;
    if (read_u32(c, &et, err, "array element type") != SPECD_OK ||
        read_u64(c, &n, err, "array length") != SPECD_OK)
        return specd_fail(err, SPECD_E_FORMAT,
                          "key '%s': array header runs past the end of the file", key);
    if (et == SPECD_GGUF_ARRAY)
        return specd_fail(err, SPECD_E_FORMAT, "key '%s': nested arrays are not allowed", key);
    kv->elem_type = (specd_gguf_type)et;
    kv->count = n;
    kv->elems = c->base + c->pos;
    if (et == SPECD_GGUF_STRING) {
        /* each element takes at least its 8-byte length: bound n before allocating views */
        if (n > left(c) / 8)
            return specd_fail(err, SPECD_E_FORMAT,
                              "key '%s': %llu strings cannot fit in the %zu bytes left", key,
                              (unsigned long long)n, left(c));
        /* validate every string first, so memory is only spent on strings that are there */
        const size_t start = c->pos;
        specd_gguf_str sv;
        for (uint64_t i = 0; i < n; i++) {
            if (read_str(c, &sv, err, "array string") != SPECD_OK)
                return specd_fail(err, SPECD_E_FORMAT,
                                  "key '%s': string %llu of %llu runs past the end of the file",
                                  key, (unsigned long long)i, (unsigned long long)n);
        }
        if (n == 0) return SPECD_OK;
        kv->strs = specd_alloc_array((size_t)n, sizeof *kv->strs);
        if (!kv->strs)
            return specd_fail(err, SPECD_E_NOMEM, "key '%s': no memory for %llu strings", key,
                              (unsigned long long)n);
        c->pos = start;
        for (uint64_t i = 0; i < n; i++)
            read_str(c, &kv->strs[i], err, "array string");
        return SPECD_OK;
    }
    size_t es = scalar_size(et);
    if (es == 0)
        return specd_fail(err, SPECD_E_FORMAT, "key '%s': unknown array element type %u", key, et);
    if (n > left(c) / es)
        return specd_fail(err, SPECD_E_FORMAT,
                          "key '%s': array of %llu elements of %zu bytes runs past the end of "
                          "the file (%zu bytes left)",
                          key, (unsigned long long)n, es, left(c));
    if (et == SPECD_GGUF_BOOL) SPECD_TRY(check_bools(c->base + c->pos, n, err, key));
    c->pos += (size_t)(n * es);
    return SPECD_OK;
}

static specd_status parse_kv(cursor *c, int64_t i, specd_gguf_kv *kv, specd_error *err) {
    char what[48];
    snprintf(what, sizeof what, "key %lld name", (long long)i);
    SPECD_TRY(read_str(c, &kv->key, err, what));
    char key[72];
    specd_gguf_printable(kv->key, key, sizeof key);
    if (kv->key.len == 0)
        return specd_fail(err, SPECD_E_FORMAT, "key %lld: empty name", (long long)i);
    uint32_t type = 0;
    snprintf(what, sizeof what, "type of key %lld", (long long)i);
    SPECD_TRY(read_u32(c, &type, err, what));
    kv->type = (specd_gguf_type)type;
    if (type == SPECD_GGUF_STRING) {
        specd_status st = read_str(c, &kv->str, err, "string value");
        if (st != SPECD_OK)
            return specd_fail(err, st, "key '%s': string value runs past the end of the file", key);
        return SPECD_OK;
    }
    if (type == SPECD_GGUF_ARRAY) {
        return parse_array(c, kv, err, key);
    }
    size_t sz = scalar_size(type);
    if (sz == 0)
        return specd_fail(err, SPECD_E_FORMAT, "key '%s': unknown value type %u", key, type);
    if (left(c) < sz)
        return specd_fail(err, SPECD_E_FORMAT, "key '%s': value runs past the end of the file",
                          key);
    kv->value = c->base + c->pos;
    if (type == SPECD_GGUF_BOOL) SPECD_TRY(check_bools(kv->value, 1, err, key));
    c->pos += sz;
    return SPECD_OK;
}

/* Returns arr with room for need elements (capacity *cap, doubling; new elements zeroed), or
 * NULL when out of memory (arr is then untouched). Arrays grow with what was actually parsed, so
 * a hostile count costs no memory up front. */
static void *grow(void *arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return arr;
    size_t new_cap = *cap ? *cap : 64;
    while (new_cap < need)
        new_cap *= 2;
    void *p = specd_alloc_array(new_cap, elem);
    if (!p) return NULL;
    if (arr) memcpy(p, arr, *cap * elem);
    specd_free(arr);
    *cap = new_cap;
    return p;
}

static specd_status sorted_names(specd_gguf_name **out, int64_t n, specd_error *err,
                                 const char *what) {
    if (n == 0) return SPECD_OK;
    *out = specd_alloc_array((size_t)n, sizeof **out);
    if (!*out)
        return specd_fail(err, SPECD_E_NOMEM, "no memory to index %lld %s names", (long long)n,
                          what);
    return SPECD_OK;
}

static int name_cmp(const void *a, const void *b) {
    const specd_gguf_name *x = a, *y = b;
    uint64_t n = x->len < y->len ? x->len : y->len;
    int r = n ? memcmp(x->ptr, y->ptr, (size_t)n) : 0;
    if (r) return r;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Sorts names and refuses duplicates; what is "key" or "tensor". */
static specd_status sort_unique(specd_gguf_name *names, int64_t n, specd_error *err,
                                const char *what) {
    if (n > 1) qsort(names, (size_t)n, sizeof *names, name_cmp);
    for (int64_t i = 1; i < n; i++) {
        if (names[i].len == names[i - 1].len &&
            (names[i].len == 0 || !memcmp(names[i].ptr, names[i - 1].ptr, names[i].len))) {
            char buf[72];
            specd_gguf_str s = {names[i].ptr, names[i].len};
            return specd_fail(err, SPECD_E_FORMAT, "duplicate %s name '%s'", what,
                              specd_gguf_printable(s, buf, sizeof buf));
        }
    }
    return SPECD_OK;
}

static specd_status read_alignment(specd_gguf *g, specd_error *err) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = specd_gguf_name_find(g->kv_sorted, g->n_kv, "general.alignment", 17);
    if (i < 0) return SPECD_OK;
    const specd_gguf_kv *kv = &g->kvs[i];
    if (kv->type != SPECD_GGUF_U32)
        return specd_fail(err, SPECD_E_FORMAT, "key 'general.alignment': type %d, expected u32",
                          (int)kv->type);
    uint32_t a;
    memcpy(&a, kv->value, 4);
    if (a == 0 || (a & (a - 1)) != 0)
        return specd_fail(err, SPECD_E_FORMAT, "key 'general.alignment': %u is not a power of two",
                          a);
    g->alignment = a;
    return SPECD_OK;
}

static specd_status parse_tensor_info(cursor *c, int64_t i, specd_gguf_tensor *t,
                                      specd_error *err) {
    char what[48];
    snprintf(what, sizeof what, "tensor %lld name", (long long)i);
    SPECD_TRY(read_str(c, &t->name, err, what));
    char name[72];
    specd_gguf_printable(t->name, name, sizeof name);
    if (t->name.len == 0)
        return specd_fail(err, SPECD_E_FORMAT, "tensor %lld: empty name", (long long)i);
    specd_status st = read_u32(c, &t->n_dims, err, "tensor dimension count");
    if (st != SPECD_OK) return specd_fail(err, st, "tensor '%s': truncated header", name);
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return specd_fail(err, SPECD_E_FORMAT, "tensor '%s': %u dimensions (must be 1..%d)", name,
                          t->n_dims, GGUF_MAX_DIMS);
    int64_t n_elem = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne = 0;
        st = read_u64(c, &ne, err, "tensor dimension");
        if (st != SPECD_OK) return specd_fail(err, st, "tensor '%s': truncated header", name);
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return specd_fail(err, SPECD_E_FORMAT, "tensor '%s': dimension %u is %llu", name, d,
                              (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
        if (__builtin_mul_overflow(n_elem, t->ne[d], &n_elem))
            return specd_fail(err, SPECD_E_FORMAT, "tensor '%s': element count overflows 64 bits",
                              name);
    }
    st = read_u32(c, &t->type, err, "tensor type");
    if (st == SPECD_OK) st = read_u64(c, &t->offset, err, "tensor offset");
    if (st != SPECD_OK) return specd_fail(err, st, "tensor '%s': truncated header", name);
    const specd_dtype_traits *tr = specd_dtype_traits_scalar(t->type);
    if (!tr)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "tensor '%s': tensor type %u (%s) is not supported", name, t->type,
                          specd_gguf_tensor_type_name(t->type));
    size_t row = specd_dtype_row_bytes(t->type, t->ne[0]);
    if (row == 0)
        return specd_fail(err, SPECD_E_FORMAT,
                          "tensor '%s': row of %lld elements is not a whole number of %s blocks "
                          "of %lld",
                          name, (long long)t->ne[0], tr->name, (long long)tr->block_size);
    size_t bytes = row;
    for (int d = 1; d < GGUF_MAX_DIMS; d++)
        if (!specd_mul_ok(bytes, (size_t)t->ne[d], &bytes))
            return specd_fail(err, SPECD_E_FORMAT, "tensor '%s': byte size overflows", name);
    t->n_bytes = bytes;
    return SPECD_OK;
}

static int offset_cmp(const void *a, const void *b) {
    const specd_gguf_tensor *const *x = a, *const *y = b;
    if ((*x)->offset != (*y)->offset) return (*x)->offset < (*y)->offset ? -1 : 1;
    return 0;
}

/* Data offsets: aligned, inside the file, not overlapping. */
static specd_status place_tensors(specd_gguf *g, specd_error *err) {
    for (int64_t i = 0; i < g->n_tensors; i++) {
        specd_gguf_tensor *t = &g->tensors[i];
        char name[72];
        specd_gguf_printable(t->name, name, sizeof name);
        if (t->offset % g->alignment != 0)
            return specd_fail(err, SPECD_E_FORMAT,
                              "tensor '%s': data offset %llu is not a multiple of the alignment "
                              "%zu",
                              name, (unsigned long long)t->offset, g->alignment);
        uint64_t start, end;
        if (__builtin_add_overflow(g->data_offset, t->offset, &start) ||
            __builtin_add_overflow(start, t->n_bytes, &end) || end > g->size)
            return specd_fail(err, SPECD_E_FORMAT,
                              "tensor '%s': data (offset %llu, %llu bytes) lies outside the file "
                              "(data section at %llu, file size %zu)",
                              name, (unsigned long long)t->offset, (unsigned long long)t->n_bytes,
                              (unsigned long long)g->data_offset, g->size);
        t->data = g->base + start;
    }
    if (g->n_tensors < 2) return SPECD_OK;
    const specd_gguf_tensor **by_offset =
        specd_alloc_array((size_t)g->n_tensors, sizeof *by_offset);
    if (!by_offset) return specd_fail(err, SPECD_E_NOMEM, "no memory to check tensor overlap");
    for (int64_t i = 0; i < g->n_tensors; i++)
        by_offset[i] = &g->tensors[i];
    qsort(by_offset, (size_t)g->n_tensors, sizeof *by_offset, offset_cmp);
    specd_status st = SPECD_OK;
    for (int64_t i = 1; i < g->n_tensors && st == SPECD_OK; i++) {
        const specd_gguf_tensor *a = by_offset[i - 1], *b = by_offset[i];
        if (a->offset + a->n_bytes > b->offset) {
            char na[72], nb[72];
            st = specd_fail(err, SPECD_E_FORMAT, "tensors '%s' and '%s' overlap",
                            specd_gguf_printable(a->name, na, sizeof na),
                            specd_gguf_printable(b->name, nb, sizeof nb));
        }
    }
    specd_free(by_offset);
    return st;
}

specd_status specd_gguf_parse(specd_gguf *g, specd_error *err) {
    cursor c = {g->base, g->size, 0};
    uint8_t magic[4];
    if (g->size < 4 || memcmp(g->base, "GGUF", 4) != 0) {
        if (g->size < 4)
            return specd_fail(err, SPECD_E_FORMAT, "not a GGUF file: only %zu bytes", g->size);
        return specd_fail(err, SPECD_E_FORMAT, "not a GGUF file: bad magic");
    }
    SPECD_TRY(read_bytes(&c, magic, 4, err, "magic"));
    SPECD_TRY(read_u32(&c, &g->version, err, "version"));
    if (g->version == 1)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "GGUF version 1 is not supported (need 2 or 3)");
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "big-endian GGUF is not supported");
    if (g->version != 2 && g->version != 3)
        return specd_fail(err, SPECD_E_FORMAT, "unknown GGUF version %u (need 2 or 3)", g->version);
    uint64_t n_tensors = 0, n_kv = 0;
    SPECD_TRY(read_u64(&c, &n_tensors, err, "tensor count"));
    SPECD_TRY(read_u64(&c, &n_kv, err, "metadata key count"));
    /* smallest key/value: 8-byte name length + 1-byte name + type + 1-byte value */
    if (n_kv > left(&c) / 14)
        return specd_fail(err, SPECD_E_FORMAT, "%llu metadata keys cannot fit in %zu bytes",
                          (unsigned long long)n_kv, left(&c));
    size_t cap = 0;
    for (int64_t i = 0; i < (int64_t)n_kv; i++) {
        specd_gguf_kv *kvs = grow(g->kvs, &cap, (size_t)i + 1, sizeof *g->kvs);
        if (!kvs)
            return specd_fail(err, SPECD_E_NOMEM, "no memory for metadata key %lld", (long long)i);
        g->kvs = kvs;
        g->n_kv = i + 1; /* counted before parsing, so destroy frees what parse_kv allocates */
        SPECD_TRY(parse_kv(&c, i, &g->kvs[i], err));
    }
    SPECD_TRY(sorted_names(&g->kv_sorted, g->n_kv, err, "key"));
    for (int64_t i = 0; i < g->n_kv; i++)
        g->kv_sorted[i] = (specd_gguf_name){g->kvs[i].key.ptr, g->kvs[i].key.len, i};
    SPECD_TRY(sort_unique(g->kv_sorted, g->n_kv, err, "key"));
    SPECD_TRY(read_alignment(g, err));

    /* smallest tensor info: name length + 1-byte name + n_dims + one dim + type + offset */
    if (n_tensors > left(&c) / 33)
        return specd_fail(err, SPECD_E_FORMAT, "%llu tensors cannot fit in %zu bytes",
                          (unsigned long long)n_tensors, left(&c));
    cap = 0;
    for (int64_t i = 0; i < (int64_t)n_tensors; i++) {
        specd_gguf_tensor *ts = grow(g->tensors, &cap, (size_t)i + 1, sizeof *g->tensors);
        if (!ts) return specd_fail(err, SPECD_E_NOMEM, "no memory for tensor %lld", (long long)i);
        g->tensors = ts;
        g->n_tensors = i + 1;
        SPECD_TRY(parse_tensor_info(&c, i, &g->tensors[i], err));
    }
    SPECD_TRY(sorted_names(&g->tensor_sorted, g->n_tensors, err, "tensor"));
    for (int64_t i = 0; i < g->n_tensors; i++)
        g->tensor_sorted[i] = (specd_gguf_name){g->tensors[i].name.ptr, g->tensors[i].name.len, i};
    SPECD_TRY(sort_unique(g->tensor_sorted, g->n_tensors, err, "tensor"));

    /* the data section starts at the next multiple of the alignment */
    size_t pad = (g->alignment - c.pos % g->alignment) % g->alignment;
    g->data_offset = (uint64_t)c.pos + pad;
    if (g->n_tensors > 0 && g->data_offset > g->size)
        return specd_fail(err, SPECD_E_FORMAT,
                          "truncated file: data section would start at %llu, file has %zu bytes",
                          (unsigned long long)g->data_offset, g->size);
    return place_tensors(g, err);
}
