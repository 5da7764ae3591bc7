/* Logits intake: dtype, stride, device and masks (session/spec_logits.h). */
#include "session/spec_logits.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cudart.h"

#include <float.h>
#include <math.h>
#include <string.h>

enum { MARGIN_Z = 128 }; /* masked z below the best unmasked z: weight 0, never the argmax */

float specd_dtype_lowest(specd_dtype dtype) {
    switch (dtype) {
    case SPECD_DTYPE_F16: return -65504.0f;
    case SPECD_DTYPE_BF16: return specd_bf16_to_fp32(0xff7fu);
    default: return -FLT_MAX;
    }
}

static size_t dtype_size(specd_dtype dtype) { return dtype == SPECD_DTYPE_F32 ? 4 : 2; }

void specd_logits_scratch_free(specd_logits_scratch *s) {
    specd_free(s->rows);
    specd_free(s->stage);
    memset(s, 0, sizeof *s);
}

static specd_status ensure_rows(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                                specd_error *err) {
    if (s->rows) return SPECD_OK;
    s->rows = specd_alloc_array((size_t)max_rows * (size_t)n_vocab, sizeof(float));
    if (!s->rows) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory for logits rows");
    s->max_rows = max_rows;
    return SPECD_OK;
}

/* Device rows -> s->stage, densely (n_vocab apart), still in the source dtype. */
static specd_status copy_from_device(specd_logits_scratch *s, const specd_logits *lg,
                                     int32_t row0, int32_t n_rows, int32_t n_vocab,
                                     specd_error *err) {
    /* libspecd does not link the runtime: it is opened now (kernels/cuda/cudart.h), so a
     * CPU-only program never needs libcudart and any build takes a CUDA host's logits. */
    const specd_cudart *rt = specd_cudart_get(NULL);
    if (!rt)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: CUDA logits given but the CUDA runtime (libcudart) is not "
                          "available");
    if (specd_cuda_device_count() == 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: CUDA logits given but this machine has no CUDA device");
    size_t es = dtype_size(lg->dtype), width = (size_t)n_vocab * es;
    size_t need = width * (size_t)n_rows;
    if (s->stage_bytes < need) {
        specd_free(s->stage);
        s->stage = specd_alloc(need);
        s->stage_bytes = s->stage ? need : 0;
        if (!s->stage) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory for staging");
    }
    const char *src = (const char *)lg->data + (size_t)row0 * (size_t)lg->row_stride * es;
    int ce = rt->memcpy_2d(s->stage, width, src, (size_t)lg->row_stride * es, width,
                           (size_t)n_rows, SPECD_CUDA_MEMCPY_DEVICE_TO_HOST);
    if (ce != SPECD_CUDA_SUCCESS) {
        (void)rt->get_last_error();
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: copying CUDA logits failed: %s",
                          rt->get_error_string(ce));
    }
    return SPECD_OK;
}

/* Scans one row: counts masked entries and the least unmasked value. NaN/+inf are errors, or,
 * when flat is not NULL (a row allowed to turn flat), set *flat and return SPECD_OK. */
static specd_status check_row(const float *l, int32_t n, float lowest, const char *what,
                              int32_t row, int32_t *n_masked, float *umin, int *flat,
                              specd_error *err) {
    int32_t masked = 0;
    int bad = 0;
    float mn = INFINITY;
    for (int32_t x = 0; x < n; x++) {
        float v = l[x];
        bad |= (v != v) | (v == INFINITY);
        masked += v <= lowest;
        mn = v > lowest && v < mn ? v : mn;
    }
    if (flat) *flat = bad;
    if (bad && flat) return SPECD_OK;
    if (bad)
        for (int32_t x = 0; x < n; x++)
            if (l[x] != l[x] || l[x] == INFINITY)
                return specd_fail(err, SPECD_E_NUMERIC, "spec: %s, logits row %d token %d: %g",
                                  what, (int)row, (int)x, (double)l[x]);
    *n_masked = masked;
    *umin = mn;
    return SPECD_OK;
}

/* The floor of session/spec_logits.h, checked in float arithmetic as the engine computes. */
static int floor_ok(float f, float umin, const specd_mask_rule *r) {
    float hi = f + r->bias_max, lo = umin + r->bias_min;
    if (!isfinite(f) || !isfinite(hi) || !isfinite(lo)) return 0;
    if (r->temperature <= 0.0f) return hi < lo;
    float zhi = hi / r->temperature, zlo = lo / r->temperature;
    return isfinite(zhi) && isfinite(zlo) && zlo - zhi >= (float)MARGIN_Z;
}

static specd_status clamp_row(float *l, int32_t n, float lowest, int32_t n_masked, float umin,
                              const specd_mask_rule *r, const char *what, int32_t row,
                              specd_error *err) {
    int32_t unbanned = n - n_masked;
    for (int32_t i = 0; i < r->n_banned; i++)
        if (r->banned[i] < n && l[r->banned[i]] > lowest) unbanned--;
    if (unbanned <= 0)
        return specd_fail(err, SPECD_E_NUMERIC,
                          "spec: %s, logits row %d: every token is masked or banned by the bias",
                          what, (int)row);
    double t = r->temperature > 0.0f ? r->temperature : 0.0;
    float f = (float)((double)umin + r->bias_min - r->bias_max - MARGIN_Z * t - 1.0);
    for (int i = 0; i < 64 && isfinite(f) && !floor_ok(f, umin, r); i++)
        f -= fabsf(f) * 0x1p-12f + (float)(MARGIN_Z * t) + 1.0f;
    if (!floor_ok(f, umin, r))
        return specd_fail(err, SPECD_E_NUMERIC,
                          "spec: %s, logits row %d: no floor for masked tokens below %g at "
                          "temperature %g (logits / temperature overflow a float)",
                          what, (int)row, (double)umin, (double)r->temperature);
    for (int32_t x = 0; x < n; x++)
        if (l[x] <= lowest) l[x] = f;
    return SPECD_OK;
}

/* Checks the block and finds rows [row0, row0 + n_rows) of lg on the host: *src with *stride
 * elements between rows (device rows are staged densely in s->stage first). */
static specd_status locate(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                           const specd_logits *lg, int32_t row0, int32_t n_rows, const char *what,
                           const char **src, size_t *stride, specd_error *err) {
    if (!lg || !lg->data)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: %s: NULL logits", what);
    if (lg->dtype != SPECD_DTYPE_F32 && lg->dtype != SPECD_DTYPE_F16 &&
        lg->dtype != SPECD_DTYPE_BF16)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: %s: unknown logits dtype %d", what,
                          (int)lg->dtype);
    if (lg->device != SPECD_DEVICE_HOST && lg->device != SPECD_DEVICE_CUDA)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: %s: unknown logits device %d", what,
                          (int)lg->device);
    if (lg->row_stride < n_vocab || lg->row_stride > ((int64_t)1 << 40))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: %s: logits row stride %lld is below n_vocab %d", what,
                          (long long)lg->row_stride, n_vocab);
    if (row0 < 0 || n_rows < 1 || n_rows > max_rows || (int64_t)row0 + n_rows > lg->n_rows)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: %s needs logits rows [%d, %d) but the block has %d", what,
                          (int)row0, (int)(row0 + n_rows), (int)lg->n_rows);
    size_t es = dtype_size(lg->dtype);
    *src = lg->data;
    *stride = (size_t)lg->row_stride;
    if (lg->device == SPECD_DEVICE_CUDA) {
        SPECD_TRY(copy_from_device(s, lg, row0, n_rows, n_vocab, err));
        *src = s->stage;
        *stride = (size_t)n_vocab;
    } else {
        *src += (size_t)row0 * *stride * es;
    }
    return SPECD_OK;
}

/* One row of the source dtype into f32. */
static void convert_row(float *dst, const char *row, specd_dtype dtype, int32_t n_vocab) {
    if (dtype == SPECD_DTYPE_F32) {
        memcpy(dst, row, (size_t)n_vocab * sizeof(float));
        return;
    }
    const uint16_t *h = (const uint16_t *)(const void *)row;
    if (dtype == SPECD_DTYPE_F16)
        for (int32_t x = 0; x < n_vocab; x++) dst[x] = specd_fp16_to_fp32(h[x]);
    else
        for (int32_t x = 0; x < n_vocab; x++) dst[x] = specd_bf16_to_fp32(h[x]);
}

specd_status specd_logits_intake(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                                 const specd_logits *lg, int32_t row0, int32_t n_rows,
                                 const specd_mask_rule *rule, const char *what,
                                 const uint8_t *flat_ok, int32_t *n_flat, const float **rows,
                                 specd_error *err) {
    if (n_flat) *n_flat = 0;
    const char *src;
    size_t src_stride;
    SPECD_TRY(locate(s, max_rows, n_vocab, lg, row0, n_rows, what, &src, &src_stride, err));
    const float lowest = rule ? specd_dtype_lowest(lg->dtype) : -INFINITY;
    size_t es = dtype_size(lg->dtype);

    /* The common case: dense host f32 without masks is read where it lies. */
    if (lg->dtype == SPECD_DTYPE_F32 && src_stride == (size_t)n_vocab) {
        int any_masked = 0, any_flat = 0;
        for (int32_t r = 0; r < n_rows && !any_flat; r++) {
            int32_t n_masked = 0;
            float umin = 0.0f;
            /* a row to flatten sends the block through the copying path below */
            SPECD_TRY(check_row((const float *)src + (size_t)r * n_vocab, n_vocab, lowest, what,
                                r, &n_masked, &umin, flat_ok && flat_ok[r] ? &any_flat : NULL,
                                err));
            any_masked |= n_masked > 0;
        }
        if (any_masked && !rule)
            return specd_fail(err, SPECD_E_NUMERIC, "spec: %s holds -inf", what);
        if (!any_masked && !any_flat) {
            *rows = (const float *)src;
            return SPECD_OK;
        }
    }
    SPECD_TRY(ensure_rows(s, max_rows, n_vocab, err));
    for (int32_t r = 0; r < n_rows; r++) {
        float *dst = s->rows + (size_t)r * (size_t)n_vocab;
        convert_row(dst, src + (size_t)r * src_stride * es, lg->dtype, n_vocab);
        int32_t n_masked = 0;
        float umin = 0.0f;
        int flat = 0;
        SPECD_TRY(check_row(dst, n_vocab, lowest, what, r, &n_masked, &umin,
                            flat_ok && flat_ok[r] ? &flat : NULL, err));
        if (flat) {
            memset(dst, 0, (size_t)n_vocab * sizeof(float));
            if (n_flat) (*n_flat)++;
            continue;
        }
        if (n_masked > 0 && !rule)
            return specd_fail(err, SPECD_E_NUMERIC, "spec: %s, row %d holds -inf", what,
                              (int)r);
        if (n_masked > 0)
            SPECD_TRY(clamp_row(dst, n_vocab, lowest, n_masked, umin, rule, what, r, err));
    }
    *rows = s->rows;
    return SPECD_OK;
}

specd_status specd_logits_copy(specd_logits_scratch *s, int32_t max_rows, int32_t n_vocab,
                               const specd_logits *lg, int32_t row0, int32_t n_rows,
                               const char *what, float **rows, specd_error *err) {
    const char *src;
    size_t src_stride;
    SPECD_TRY(locate(s, max_rows, n_vocab, lg, row0, n_rows, what, &src, &src_stride, err));
    SPECD_TRY(ensure_rows(s, max_rows, n_vocab, err));
    const float lowest = specd_dtype_lowest(lg->dtype);
    size_t es = dtype_size(lg->dtype);
    for (int32_t r = 0; r < n_rows; r++) {
        float *dst = s->rows + (size_t)r * (size_t)n_vocab;
        convert_row(dst, src + (size_t)r * src_stride * es, lg->dtype, n_vocab);
        for (int32_t x = 0; x < n_vocab; x++) dst[x] = dst[x] <= lowest ? -INFINITY : dst[x];
    }
    *rows = s->rows;
    return SPECD_OK;
}
