/* GGUF reader: loading (into huge pages, or mapped), lifetime and typed access to what
 * gguf_parse.c validated. */
#include "model/gguf/gguf_internal.h"

#include "common/alloc.h"
#include "common/pages.h"
#include "common/status_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

const char *specd_gguf_printable(specd_gguf_str s, char *buf, size_t buf_size) {
    size_t n = 0;
    const size_t max = buf_size - 1;
    for (uint64_t i = 0; i < s.len && n < max; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        buf[n++] = (ch >= 0x20 && ch < 0x7f) ? (char)ch : '?';
    }
    if (s.len > max && max >= 3) memcpy(buf + max - 3, "...", 3), n = max;
    buf[n] = '\0';
    return buf;
}

int64_t specd_gguf_name_find(const specd_gguf_name *names, int64_t n, const char *key, size_t len) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        const specd_gguf_name *m = &names[mid];
        size_t k = m->len < len ? (size_t)m->len : len;
        int r = k ? memcmp(m->ptr, key, k) : 0;
        if (r == 0 && m->len != len) r = m->len < len ? -1 : 1;
        if (r == 0) return m->index;
        if (r < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

static specd_status finish_create(specd_gguf *g, specd_gguf **out, specd_error *err) {
    specd_status st = specd_gguf_parse(g, err);
    if (st != SPECD_OK) {
        specd_gguf_destroy(g);
        return st;
    }
    *out = g;
    return SPECD_OK;
}

specd_status specd_gguf_create_from_memory(const void *data, size_t size, specd_gguf **out,
                                           specd_error *err) {
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "gguf: out is NULL");
    if (!data && size > 0) return specd_fail(err, SPECD_E_INVALID_ARG, "gguf: data is NULL");
    specd_gguf *g = specd_alloc_array(1, sizeof *g);
    if (!g) return specd_fail(err, SPECD_E_NOMEM, "gguf: no memory for the reader");
    g->base = data;
    g->size = size;
    return finish_create(g, out, err);
}

/* The whole file in huge pages (common/pages.h: a forward reads every weight at every step), or
 * NULL: huge pages off, the copy would not leave room (specd_pages_copy_fits), no memory, or a
 * short read; the caller then maps the file. */
static void *read_into_pages(int fd, size_t size, int *copied) {
    if (!specd_huge_pages_on() || !specd_pages_copy_fits(size)) return NULL;
    uint8_t *p = specd_pages_alloc(size);
    if (!p) return NULL;
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, p + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            specd_pages_free(p, size);
            return NULL;
        }
        got += (size_t)r;
    }
    specd_pages_seal(p, size);
    *copied = 1;
    return p;
}

static void release_map(void *map, size_t size, int copied) {
    if (copied)
        specd_pages_free(map, size);
    else
        munmap(map, size);
}

specd_status specd_gguf_create(const char *path, specd_gguf **out, specd_error *err) {
    if (!path || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "gguf: path or out is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        char buf[128];
        return specd_fail(err, SPECD_E_IO, "%s: cannot open: %s", path,
                          strerror_r(errno, buf, sizeof buf));
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        char buf[128];
        specd_status st = specd_fail(err, SPECD_E_IO, "%s: cannot stat: %s", path,
                                     strerror_r(errno, buf, sizeof buf));
        close(fd);
        return st;
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return specd_fail(err, SPECD_E_IO, "%s: not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return specd_fail(err, SPECD_E_FORMAT, "%s: empty file, not a GGUF model", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return specd_fail(err, SPECD_E_IO, "%s: too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    int copied = 0;
    void *map = read_into_pages(fd, size, &copied);
    if (!map) map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd);
    if (map == MAP_FAILED) {
        char buf[128];
        return specd_fail(err, SPECD_E_IO, "%s: cannot map %zu bytes: %s", path, size,
                          strerror_r(map_errno, buf, sizeof buf));
    }
    specd_gguf *g = specd_alloc_array(1, sizeof *g);
    if (!g) {
        release_map(map, size, copied);
        return specd_fail(err, SPECD_E_NOMEM, "gguf: no memory for the reader");
    }
    g->base = map;
    g->size = size;
    g->map = map;
    g->map_size = size;
    g->map_copied = copied;
    specd_error local;
    specd_status st = finish_create(g, out, &local);
    if (st != SPECD_OK) return specd_fail(err, st, "%s: %s", path, local.message);
    return SPECD_OK;
}

void specd_gguf_destroy(specd_gguf *g) {
    if (!g) return;
    if (g->kvs)
        for (int64_t i = 0; i < g->n_kv; i++)
            specd_free(g->kvs[i].strs);
    specd_free(g->kvs);
    specd_free(g->kv_sorted);
    specd_free(g->tensors);
    specd_free(g->tensor_sorted);
    if (g->map) release_map(g->map, g->map_size, g->map_copied);
    specd_free(g);
}

uint32_t specd_gguf_version(const specd_gguf *g) {
    return g->version;
}
size_t specd_gguf_alignment(const specd_gguf *g) {
    return g->alignment;
}
uint64_t specd_gguf_data_offset(const specd_gguf *g) {
    return g->data_offset;
}

const char *specd_gguf_type_name(specd_gguf_type type) {
    static const char *const names[] = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    if ((int)type < 0 || (size_t)type >= sizeof names / sizeof names[0]) return "?";
    return names[type];
}

const char *specd_gguf_tensor_type_name(uint32_t type) {
    /* ggml's ids; NULL marks ids ggml has retired */
    static const char *const names[] = {
        "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
        "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
        "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
        "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  NULL,
        NULL,      NULL,     "TQ1_0",   "TQ2_0", NULL,     NULL,    NULL,    "MXFP4"};
    if (type >= sizeof names / sizeof names[0] || !names[type]) return "unknown";
    return names[type];
}

/* --- metadata ------------------------------------------------------------------------------ */
int64_t specd_gguf_key_count(const specd_gguf *g) {
    return g->n_kv;
}

int64_t specd_gguf_key_find(const specd_gguf *g, const char *key) {
    if (!key) return -1;
    return specd_gguf_name_find(g->kv_sorted, g->n_kv, key, strlen(key));
}

specd_gguf_str specd_gguf_key_name(const specd_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return (specd_gguf_str){NULL, 0};
    return g->kvs[i].key;
}

specd_gguf_type specd_gguf_key_type(const specd_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return SPECD_GGUF_INVALID;
    return g->kvs[i].type;
}

static specd_status lookup(const specd_gguf *g, const char *key, const specd_gguf_kv **kv,
                           specd_error *err) {
    int64_t i = specd_gguf_key_find(g, key);
    if (i < 0) return specd_fail(err, SPECD_E_FORMAT, "missing key '%s'", key ? key : "(null)");
    *kv = &g->kvs[i];
    return SPECD_OK;
}

static specd_status wrong_type(const specd_gguf_kv *kv, const char *key, const char *want,
                               specd_error *err) {
    return specd_fail(err, SPECD_E_FORMAT, "key '%s' has type %s, expected %s", key,
                      specd_gguf_type_name(kv->type), want);
}

/* An integer value of any width as a sign and a magnitude (value = neg ? -mag : mag). */
static specd_status get_int(const specd_gguf *g, const char *key, int *neg, uint64_t *mag,
                            specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    size_t width;
    int is_signed;
    switch (kv->type) {
    case SPECD_GGUF_U8: width = 1, is_signed = 0; break;
    case SPECD_GGUF_I8: width = 1, is_signed = 1; break;
    case SPECD_GGUF_U16: width = 2, is_signed = 0; break;
    case SPECD_GGUF_I16: width = 2, is_signed = 1; break;
    case SPECD_GGUF_U32: width = 4, is_signed = 0; break;
    case SPECD_GGUF_I32: width = 4, is_signed = 1; break;
    case SPECD_GGUF_U64: width = 8, is_signed = 0; break;
    case SPECD_GGUF_I64: width = 8, is_signed = 1; break;
    default: return wrong_type(kv, key, "an integer", err);
    }
    uint64_t u = 0;
    memcpy(&u, kv->value, width); /* little-endian host, as the file */
    const uint64_t sign_bit = 1ull << (8 * width - 1);
    *neg = is_signed && (u & sign_bit);
    /* two's complement magnitude of a negative value of this width */
    *mag = *neg ? ((~u + 1) & (sign_bit | (sign_bit - 1))) : u;
    return SPECD_OK;
}

static specd_status out_of_range(specd_error *err, const char *key, int neg, uint64_t mag,
                                 const char *type) {
    return specd_fail(err, SPECD_E_FORMAT, "key '%s': value %s%llu does not fit in %s", key,
                      neg ? "-" : "", (unsigned long long)mag, type);
}

specd_status specd_gguf_get_u32(const specd_gguf *g, const char *key, uint32_t *out,
                                specd_error *err) {
    int neg = 0;
    uint64_t mag = 0;
    SPECD_TRY(get_int(g, key, &neg, &mag, err));
    if (neg || mag > UINT32_MAX) return out_of_range(err, key, neg, mag, "u32");
    if (out) *out = (uint32_t)mag;
    return SPECD_OK;
}

specd_status specd_gguf_get_i64(const specd_gguf *g, const char *key, int64_t *out,
                                specd_error *err) {
    int neg = 0;
    uint64_t mag = 0;
    SPECD_TRY(get_int(g, key, &neg, &mag, err));
    if (mag > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return out_of_range(err, key, neg, mag, "i64");
    if (out) *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return SPECD_OK;
}

specd_status specd_gguf_get_u64(const specd_gguf *g, const char *key, uint64_t *out,
                                specd_error *err) {
    int neg = 0;
    uint64_t mag = 0;
    SPECD_TRY(get_int(g, key, &neg, &mag, err));
    if (neg) return out_of_range(err, key, neg, mag, "u64");
    if (out) *out = mag;
    return SPECD_OK;
}

specd_status specd_gguf_get_f64(const specd_gguf *g, const char *key, double *out,
                                specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    double v;
    if (kv->type == SPECD_GGUF_F64) {
        memcpy(&v, kv->value, 8);
    } else if (kv->type == SPECD_GGUF_F32) {
        float f;
        memcpy(&f, kv->value, 4);
        v = f;
    } else {
        return wrong_type(kv, key, "f64", err);
    }
    if (out) *out = v;
    return SPECD_OK;
}

specd_status specd_gguf_get_f32(const specd_gguf *g, const char *key, float *out,
                                specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    float v;
    if (kv->type == SPECD_GGUF_F32) {
        memcpy(&v, kv->value, 4);
    } else if (kv->type == SPECD_GGUF_F64) {
        double d;
        memcpy(&d, kv->value, 8);
        if (isfinite(d) && fabs(d) > 3.4028234663852886e38)
            return specd_fail(err, SPECD_E_FORMAT, "key '%s': value %g does not fit in f32", key,
                              d);
        v = (float)d;
    } else {
        return wrong_type(kv, key, "f32", err);
    }
    if (out) *out = v;
    return SPECD_OK;
}

specd_status specd_gguf_get_bool(const specd_gguf *g, const char *key, int *out, specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    if (kv->type != SPECD_GGUF_BOOL) return wrong_type(kv, key, "bool", err);
    if (out) *out = kv->value[0];
    return SPECD_OK;
}

specd_status specd_gguf_get_str(const specd_gguf *g, const char *key, specd_gguf_str *out,
                                specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    if (kv->type != SPECD_GGUF_STRING) return wrong_type(kv, key, "string", err);
    if (out) *out = kv->str;
    return SPECD_OK;
}

specd_status specd_gguf_get_array(const specd_gguf *g, const char *key, specd_gguf_type *elem_type,
                                  uint64_t *count, const void **data, specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    if (kv->type != SPECD_GGUF_ARRAY) return wrong_type(kv, key, "array", err);
    if (elem_type) *elem_type = kv->elem_type;
    if (count) *count = kv->count;
    if (data) *data = kv->elems;
    return SPECD_OK;
}

specd_status specd_gguf_get_array_str(const specd_gguf *g, const char *key, uint64_t i,
                                      specd_gguf_str *out, specd_error *err) {
    const specd_gguf_kv *kv = NULL;
    SPECD_TRY(lookup(g, key, &kv, err));
    if (kv->type != SPECD_GGUF_ARRAY || kv->elem_type != SPECD_GGUF_STRING)
        return specd_fail(err, SPECD_E_FORMAT, "key '%s' is not an array of strings", key);
    if (i >= kv->count)
        return specd_fail(err, SPECD_E_INVALID_ARG, "key '%s': index %llu out of range (%llu)", key,
                          (unsigned long long)i, (unsigned long long)kv->count);
    if (out) *out = kv->strs[i];
    return SPECD_OK;
}

/* --- tensors ------------------------------------------------------------------------------- */
int64_t specd_gguf_tensor_count(const specd_gguf *g) {
    return g->n_tensors;
}

const specd_gguf_tensor *specd_gguf_tensor_at(const specd_gguf *g, int64_t i) {
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const specd_gguf_tensor *specd_gguf_tensor_find(const specd_gguf *g, const char *name) {
    if (!name) return NULL;
    int64_t i = specd_gguf_name_find(g->tensor_sorted, g->n_tensors, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}
