#include "model/runtime/safetensors.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/fp16.h"
#include "model/runtime/json.h"

#include <string.h>

static const char *const dtypes[] = {"F32", "F16", "BF16"};
static const size_t dsize[] = {4, 2, 2};

static specd_status parse_tensor(const rt_json *j, uint32_t key, const uint8_t *data,
                                 size_t data_len, rt_st_tensor *t, specd_error *err) {
    const rt_json_node *k = &j->nodes[key];
    const int nl = (int)(k->end - k->start > 80 ? 80 : k->end - k->start);
    const char *nm = j->text + k->start;
    const uint32_t obj = key + 1;
    if (j->nodes[obj].type != RT_JSON_OBJECT)
        return specd_fail(err, SPECD_E_FORMAT, "safetensors: %.*s is not an object", nl, nm);
    const uint32_t dt = rt_json_get(j, obj, "dtype"), sh = rt_json_get(j, obj, "shape"),
                   off = rt_json_get(j, obj, "data_offsets");
    if (!dt || !sh || !off)
        return specd_fail(err, SPECD_E_FORMAT, "safetensors: %.*s lacks dtype, shape or offsets",
                          nl, nm);
    t->dtype = -1;
    for (int d = 0; d < 3; d++)
        if (rt_json_str_eq(j, dt, dtypes[d])) t->dtype = d;
    if (t->dtype < 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "safetensors: %.*s has an unsupported dtype",
                          nl, nm);
    if (j->nodes[sh].type != RT_JSON_ARRAY || j->nodes[sh].size < 1 || j->nodes[sh].size > 4)
        return specd_fail(err, SPECD_E_FORMAT, "safetensors: %.*s shape must have 1..4 dims", nl,
                          nm);
    size_t numel = 1;
    t->n_dims = (int)j->nodes[sh].size;
    for (int d = 0; d < t->n_dims; d++) {
        double v;
        if (!rt_json_number(j, sh + 1 + (uint32_t)d, &v) || v < 1 || v > 1e9 || v != (int64_t)v ||
            !specd_mul_ok(numel, (size_t)v, &numel))
            return specd_fail(err, SPECD_E_FORMAT, "safetensors: %.*s shape[%d] is bad", nl, nm, d);
        t->shape[d] = (int64_t)v;
    }
    double b, e;
    if (j->nodes[off].type != RT_JSON_ARRAY || j->nodes[off].size != 2 ||
        !rt_json_number(j, off + 1, &b) || !rt_json_number(j, off + 2, &e) || b < 0 || e < b ||
        e > (double)data_len || b != (int64_t)b || e != (int64_t)e)
        return specd_fail(err, SPECD_E_FORMAT,
                          "safetensors: %.*s data_offsets outside the %zu data bytes", nl, nm,
                          data_len);
    size_t bytes;
    if (!specd_mul_ok(numel, dsize[t->dtype], &bytes) || bytes != (size_t)(e - b))
        return specd_fail(err, SPECD_E_FORMAT,
                          "safetensors: %.*s holds %.0f bytes, its shape needs %zu", nl, nm, e - b,
                          bytes);
    t->name = nm;
    t->name_len = k->end - k->start;
    t->data = data + (size_t)b;
    t->n_bytes = bytes;
    return SPECD_OK;
}

specd_status rt_st_parse(const uint8_t *buf, size_t len, rt_st_file *out, specd_error *err) {
    if (len < 8) return specd_fail(err, SPECD_E_FORMAT, "safetensors: %zu bytes is too short", len);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = (hl << 8) | buf[i];
    if (hl > len - 8 || hl > (1u << 30))
        return specd_fail(err, SPECD_E_FORMAT,
                          "safetensors: header length %llu exceeds the %zu bytes after it",
                          (unsigned long long)hl, len - 8);
    rt_json j;
    SPECD_TRY(rt_json_parse((const char *)buf + 8, (size_t)hl, &j, err));
    specd_status st = SPECD_OK;
    if (j.nodes[0].type != RT_JSON_OBJECT)
        st = specd_fail(err, SPECD_E_FORMAT, "safetensors: header is not a JSON object");
    rt_st_tensor *ts = NULL;
    uint32_t n = 0;
    if (st == SPECD_OK) {
        ts = specd_alloc_array(j.nodes[0].size ? j.nodes[0].size : 1, sizeof *ts);
        if (!ts) st = specd_fail(err, SPECD_E_NOMEM, "safetensors: out of memory");
    }
    const uint8_t *data = buf + 8 + hl;
    const size_t data_len = len - 8 - (size_t)hl;
    uint32_t i = 1;
    for (uint32_t m = 0; st == SPECD_OK && m < j.nodes[0].size; m++) {
        const uint32_t val = i + 1;
        if (!rt_json_str_eq(&j, i, "__metadata__"))
            st = parse_tensor(&j, i, data, data_len, &ts[n++], err);
        i = j.nodes[val].next;
    }
    rt_json_free(&j); /* names stay valid: they point into buf */
    if (st != SPECD_OK) {
        specd_free(ts);
        return st;
    }
    out->tensors = ts;
    out->n = n;
    return SPECD_OK;
}

void rt_st_free(rt_st_file *f) {
    if (!f) return;
    specd_free(f->tensors);
    f->tensors = NULL;
    f->n = 0;
}

float rt_st_get(const rt_st_tensor *t, size_t i) {
    const uint8_t *p = t->data + i * dsize[t->dtype];
    if (t->dtype == 0) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h = (uint16_t)(p[0] | (p[1] << 8));
    if (t->dtype == 1) return specd_fp16_to_fp32(h);
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
