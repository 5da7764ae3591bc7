/* libFuzzer target for the GGUF reader: any bytes must either parse, after which every getter and
 * every tensor view is safe to use, or be refused with a message; never crash, leak or read out
 * of bounds (ASan/UBSan are on in fuzz builds). */
#include "kernels/cpu/dtype.h"
#include "specd/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* NUL-terminated copy of a name, or 0 when it holds a NUL or is too long for buf. */
static int c_name(specd_gguf_str s, char *buf, size_t cap) {
    if (s.len >= cap || memchr(s.ptr, 0, s.len)) return 0;
    memcpy(buf, s.ptr, s.len);
    buf[s.len] = '\0';
    return 1;
}

static void touch_metadata(const specd_gguf *g) {
    char key[256];
    for (int64_t i = 0; i < specd_gguf_key_count(g); i++) {
        if (!c_name(specd_gguf_key_name(g, i), key, sizeof key)) continue;
        if (specd_gguf_key_find(g, key) != i) abort(); /* names are unique */
        uint32_t u;
        int64_t v;
        float f;
        int b;
        specd_gguf_str s;
        specd_gguf_type et;
        uint64_t n;
        const void *p;
        specd_error err;
        specd_gguf_get_u32(g, key, &u, &err);
        specd_gguf_get_i64(g, key, &v, &err);
        specd_gguf_get_f32(g, key, &f, &err);
        specd_gguf_get_bool(g, key, &b, &err);
        if (specd_gguf_get_str(g, key, &s, &err) == SPECD_OK && s.len) {
            volatile char last = s.ptr[s.len - 1];
            (void)last;
        }
        if (specd_gguf_get_array(g, key, &et, &n, &p, &err) == SPECD_OK && n > 0 &&
            et == SPECD_GGUF_STRING) {
            specd_gguf_get_array_str(g, key, 0, &s, &err);
            if (specd_gguf_get_array_str(g, key, n - 1, &s, &err) == SPECD_OK && s.len) {
                volatile char last = s.ptr[s.len - 1];
                (void)last;
            }
            if (specd_gguf_get_array_str(g, key, n, &s, &err) != SPECD_E_INVALID_ARG) abort();
        }
    }
}

static void touch_tensors(const specd_gguf *g) {
    char name[256];
    for (int64_t i = 0; i < specd_gguf_tensor_count(g); i++) {
        const specd_gguf_tensor *t = specd_gguf_tensor_at(g, i);
        if (c_name(t->name, name, sizeof name) && specd_gguf_tensor_find(g, name) != t) abort();
        const uint8_t *bytes = t->data;
        volatile uint8_t first = bytes[0], last = bytes[t->n_bytes - 1];
        (void)first;
        (void)last;
        /* dequantize the first block through an aligned copy (hostile scales included) */
        const specd_dtype_traits *tr = specd_dtype_traits_get(t->type);
        if (!tr || t->n_bytes < tr->block_bytes) abort();
        _Alignas(64) uint8_t block[512];
        float out[256];
        memcpy(block, bytes, tr->block_bytes);
        tr->to_float(block, out, tr->block_size);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    specd_gguf *g = NULL;
    specd_error err;
    specd_error_clear(&err);
    if (specd_gguf_create_from_memory(data, size, &g, &err) == SPECD_OK) {
        touch_metadata(g);
        touch_tensors(g);
    } else if (err.message[0] == '\0' || g != NULL) {
        abort(); /* a refusal always says why and hands nothing out */
    }
    specd_gguf_destroy(g);
    return 0;
}
