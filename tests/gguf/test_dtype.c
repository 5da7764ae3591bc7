/* Tensor formats: conversions, quantize/dequantize error bounds, each dot product against the
 * dot of its dequantized inputs, and every AVX2 kernel against its scalar reference. */
#include "test_main.h"

#include "common/alloc.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rng_next(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float rng_float(void) {
    return (float)((double)(rng_next() >> 11) * 0x1p-52 - 1.0);
}

static void fill_floats(float *x, int64_t n, float scale) {
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_float() * scale;
}

static const uint32_t weight_types[] = {SPECD_DTYPE_F32,  SPECD_DTYPE_F16,  SPECD_DTYPE_BF16,
                                        SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0,
                                        SPECD_DTYPE_Q4_K, SPECD_DTYPE_Q6_K};
#define N_WEIGHT_TYPES (sizeof weight_types / sizeof weight_types[0])

/* A random row of n elements of type; K-quants are random bytes with sane fp16 scales, the rest
 * are quantized random floats (which exercises from_float as well). Caller frees. */
static void *random_row(uint32_t type, int64_t n) {
    const specd_dtype_traits *t = specd_dtype_traits_scalar(type);
    size_t bytes = specd_dtype_row_bytes(type, n);
    uint8_t *row = specd_alloc(bytes);
    assert_non_null(row);
    if (type == SPECD_DTYPE_Q4_K || type == SPECD_DTYPE_Q6_K) {
        for (size_t i = 0; i < bytes; i++)
            row[i] = (uint8_t)rng_next();
        for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
            if (type == SPECD_DTYPE_Q4_K) {
                specd_block_q4_k *blk = (specd_block_q4_k *)row + b;
                blk->d = specd_fp32_to_fp16(0.001f + 0.01f * fabsf(rng_float()));
                blk->dmin = specd_fp32_to_fp16(0.001f + 0.01f * fabsf(rng_float()));
            } else {
                specd_block_q6_k *blk = (specd_block_q6_k *)row + b;
                blk->d = specd_fp32_to_fp16(0.0001f + 0.001f * fabsf(rng_float()));
            }
        }
        return row;
    }
    float *x = specd_alloc_array((size_t)n, sizeof *x);
    assert_non_null(x);
    fill_floats(x, n, 2.0f);
    assert_non_null(t->from_float);
    t->from_float(x, row, n);
    specd_free(x);
    return row;
}

static float *dequantize(uint32_t type, const void *row, int64_t n) {
    float *y = specd_alloc_array((size_t)n, sizeof *y);
    assert_non_null(y);
    specd_dtype_traits_scalar(type)->to_float(row, y, n);
    return y;
}

static void test_traits_table(void **state) {
    (void)state;
    static const struct {
        uint32_t id;
        const char *name;
        int64_t bs;
        size_t bb;
        uint32_t vdt;
    } want[] = {
        {0, "F32", 1, 4, 0},        {1, "F16", 1, 2, 1},        {2, "Q4_0", 32, 18, 8},
        {3, "Q4_1", 32, 20, 9},     {8, "Q8_0", 32, 34, 8},     {9, "Q8_1", 32, 36, 9},
        {12, "Q4_K", 256, 144, 15}, {14, "Q6_K", 256, 210, 15}, {15, "Q8_K", 256, 292, 15},
        {30, "BF16", 1, 2, 30},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const specd_dtype_traits *s = specd_dtype_traits_scalar(want[i].id);
        const specd_dtype_traits *f = specd_dtype_traits_get(want[i].id);
        assert_non_null(s);
        assert_non_null(f);
        assert_string_equal(s->name, want[i].name);
        assert_string_equal(f->name, want[i].name);
        assert_int_equal(s->block_size, want[i].bs);
        assert_int_equal(s->block_bytes, want[i].bb);
        assert_int_equal(f->block_bytes, want[i].bb);
        assert_int_equal(s->vec_dot_type, want[i].vdt);
        assert_int_equal(f->vec_dot_type, want[i].vdt);
        assert_non_null(s->to_float);
        /* every activation type can be produced at run time */
        assert_non_null(specd_dtype_traits_get(s->vec_dot_type)->from_float);
    }
    for (size_t i = 0; i < N_WEIGHT_TYPES; i++)
        assert_non_null(specd_dtype_traits_get(weight_types[i])->vec_dot);
    assert_null(specd_dtype_traits_get(4));
    assert_null(specd_dtype_traits_get(13));
    assert_null(specd_dtype_traits_scalar(99));
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_Q4_1, 576), 18 * 20);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_Q8_0, 576), 18 * 34);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_Q4_K, 512), 2 * 144);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_F16, 3), 6);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_Q4_1, 33), 0);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_Q6_K, 255), 0);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_F32, -4), 0);
    assert_int_equal(specd_dtype_row_bytes(SPECD_DTYPE_F32, INT64_MAX), 0);
    assert_int_equal(specd_dtype_row_bytes(99, 32), 0);
}

static double half_value(uint16_t h) {
    return (double)specd_fp16_to_fp32(h);
}

static void test_fp16_conversions(void **state) {
    (void)state;
    /* every half survives the round trip; NaNs stay NaN */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = specd_fp16_to_fp32((uint16_t)h);
        uint16_t back = specd_fp32_to_fp16(f);
        if (isnan(f))
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
        else
            assert_int_equal(back, h);
    }
    assert_true(specd_fp16_to_fp32(0x3c00) == 1.0f);
    assert_true(specd_fp16_to_fp32(0x0001) == 0x1p-24f);
    assert_true(specd_fp16_to_fp32(0x7bff) == 65504.0f);
    assert_true(isinf(specd_fp16_to_fp32(0xfc00)) && specd_fp16_to_fp32(0xfc00) < 0);
    assert_int_equal(specd_fp32_to_fp16(65520.0f), 0x7c00); /* tie rounds to even: inf */
    assert_int_equal(specd_fp32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(specd_fp32_to_fp16(0x1p-25f), 0x0000); /* tie to even: zero */
    assert_int_equal(specd_fp32_to_fp16(0x1.8p-25f), 0x0001);
    assert_int_equal(specd_fp32_to_fp16(-0.0f), 0x8000);
    /* random floats over the whole half range: the nearest half, ties to even */
    for (int i = 0; i < 200000; i++) {
        float f = ldexpf(rng_float(), (int)(rng_next() % 44) - 28);
        uint16_t h = specd_fp32_to_fp16(f);
        double v = half_value(h), err = fabs((double)f - v);
        if ((h & 0x7fff) == 0x7c00) {
            assert_true(fabs((double)f) >= 65520.0);
            continue;
        }
        for (int step = -1; step <= 1; step += 2) {
            uint16_t nb = (uint16_t)(h + step);
            if ((h & 0x7fff) == 0 && step < 0) continue; /* no neighbour below zero */
            if ((nb & 0x7c00) == 0x7c00) continue;
            double e2 = fabs((double)f - half_value(nb));
            assert_true(err < e2 || (err == e2 && (h & 1) == 0));
        }
    }
}

static void test_bf16_conversions(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = specd_bf16_to_fp32((uint16_t)h);
        if (!isnan(f))
            assert_int_equal(specd_fp32_to_bf16(f), h);
        else
            assert_true(isnan(specd_bf16_to_fp32(specd_fp32_to_bf16(f))));
    }
    for (int i = 0; i < 200000; i++) {
        float f = ldexpf(rng_float(), (int)(rng_next() % 200) - 100);
        uint16_t h = specd_fp32_to_bf16(f);
        double err = fabs((double)f - specd_bf16_to_fp32(h));
        double e_up = fabs((double)f - specd_bf16_to_fp32((uint16_t)(h + 1)));
        double e_dn = fabs((double)f - specd_bf16_to_fp32((uint16_t)(h - 1)));
        assert_true(err <= e_up && err <= e_dn);
        if (err == e_up || err == e_dn) assert_int_equal(h & 1, 0);
    }
}

/* to_float(from_float(x)) stays within each type's quantization step. */
static void test_quantize_round_trip(void **state) {
    (void)state;
    const int64_t n = 4096;
    float *x = specd_alloc_array(n, sizeof *x), *y = specd_alloc_array(n, sizeof *y);
    uint8_t *q = specd_alloc(specd_dtype_row_bytes(SPECD_DTYPE_Q8_K, n) + 4096);
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(q);
    const uint32_t types[] = {SPECD_DTYPE_F16,  SPECD_DTYPE_BF16, SPECD_DTYPE_Q4_0,
                              SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0, SPECD_DTYPE_Q8_1,
                              SPECD_DTYPE_Q8_K};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const specd_dtype_traits *t = specd_dtype_traits_scalar(types[ti]);
        fill_floats(x, n, 3.0f);
        x[5] = 0.0f;
        for (int j = 64; j < 96; j++)
            x[j] = 0.0f; /* an all-zero block */
        t->from_float(x, q, n);
        t->to_float(q, y, n);
        const int64_t bs = t->block_size > 1 ? t->block_size : 32;
        for (int64_t b = 0; b < n / bs; b++) {
            float amax = 0, mn = INFINITY, mx = -INFINITY;
            for (int64_t j = b * bs; j < (b + 1) * bs; j++) {
                amax = fmaxf(amax, fabsf(x[j]));
                mn = fminf(mn, x[j]);
                mx = fmaxf(mx, x[j]);
            }
            double bound;
            switch (types[ti]) {
            case SPECD_DTYPE_F16: bound = amax * 0x1p-11; break;
            case SPECD_DTYPE_BF16: bound = amax * 0x1p-8; break;
            case SPECD_DTYPE_Q4_0: bound = amax / 8 * 1.01; break; /* the far side clamps at 7 */
            case SPECD_DTYPE_Q4_1: bound = (mx - mn) / 15 * 0.51 + amax * 0x1p-10; break;
            case SPECD_DTYPE_Q8_K: bound = amax / 127 * 0.51; break;
            default: bound = amax / 127 * 0.51 + amax * 0x1p-11; break; /* Q8_0, Q8_1 */
            }
            for (int64_t j = b * bs; j < (b + 1) * bs; j++) {
                if (fabs((double)x[j] - y[j]) > bound)
                    fail_msg("%s: element %lld: %g came back as %g (bound %g)", t->name,
                             (long long)j, x[j], y[j], bound);
            }
        }
    }
    /* Q8_1 carries d * sum(q); Q8_K carries the sums of each 16 quants */
    fill_floats(x, n, 1.0f);
    specd_q8_1_from_float(x, q, n);
    for (int64_t b = 0; b < n / 32; b++) {
        const specd_block_q8_1 *blk = (const specd_block_q8_1 *)q + b;
        int sum = 0;
        for (int j = 0; j < 32; j++)
            sum += blk->qs[j];
        float amax = 0;
        for (int j = 0; j < 32; j++)
            amax = fmaxf(amax, fabsf(x[32 * b + j]));
        const float d = amax / 127.0f;
        assert_int_equal(blk->d, specd_fp32_to_fp16(d));
        assert_int_equal(blk->s, specd_fp32_to_fp16(d * (float)sum));
    }
    specd_q8_k_from_float(x, q, n);
    for (int64_t b = 0; b < n / 256; b++) {
        const specd_block_q8_k *blk = (const specd_block_q8_k *)q + b;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += blk->qs[16 * g + j];
            assert_int_equal(blk->bsums[g], sum);
        }
    }
    specd_free(x);
    specd_free(y);
    specd_free(q);
}

/* vec_dot(x, y) equals the double-precision dot of dequantized x and y, up to float rounding (and
 * for Q4_1 the fp16 rounding of Q8_1's stored sum). Catches any disagreement between a dot
 * kernel's reading of a layout and to_float's. */
static void check_dot_against_dequantized(int use_fast) {
    const int64_t sizes[] = {256, 576, 1536, 2048};
    for (size_t ti = 0; ti < N_WEIGHT_TYPES; ti++) {
        const uint32_t type = weight_types[ti];
        const specd_dtype_traits *t =
            use_fast ? specd_dtype_traits_get(type) : specd_dtype_traits_scalar(type);
        const specd_dtype_traits *vt = specd_dtype_traits_scalar(t->vec_dot_type);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int64_t n = sizes[si];
            if (n % t->block_size) continue;
            void *xr = random_row(type, n);
            float *a = specd_alloc_array(n, sizeof *a);
            assert_non_null(a);
            fill_floats(a, n, 1.5f);
            void *yr = specd_alloc(specd_dtype_row_bytes(t->vec_dot_type, n));
            assert_non_null(yr);
            vt->from_float(a, yr, n);
            float *xf = dequantize(type, xr, n), *yf = dequantize(t->vec_dot_type, yr, n);
            double want = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) {
                want += (double)xf[i] * yf[i];
                mag += fabs((double)xf[i] * yf[i]);
            }
            float got;
            t->vec_dot(n, &got, xr, yr);
            double tol = (type == SPECD_DTYPE_Q4_1 ? 2e-3 : 2e-6) * mag + 1e-6;
            if (!(fabs(got - want) <= tol))
                fail_msg("%s (%s) n=%lld: vec_dot %.9g, dequantized dot %.9g (tol %.3g)", t->name,
                         use_fast ? "fastest" : "scalar", (long long)n, got, want, tol);
            specd_free(xr);
            specd_free(yr);
            specd_free(a);
            specd_free(xf);
            specd_free(yf);
        }
    }
}

static void test_dot_matches_dequantized_scalar(void **state) {
    (void)state;
    check_dot_against_dequantized(0);
}

static void test_dot_matches_dequantized_fastest(void **state) {
    (void)state;
    check_dot_against_dequantized(1);
}

/* The AVX2 table against the scalar one: quantized kernels bit for bit, float dots within
 * rounding. Skipped (and said so) on a CPU without AVX2/FMA. */
static void test_avx2_matches_scalar(void **state) {
    (void)state;
    if (!specd_cpu_has_avx2()) {
        print_message("no AVX2/FMA on this CPU: only the scalar table is in use\n");
        skip();
    }
    const uint32_t all[] = {SPECD_DTYPE_F32,  SPECD_DTYPE_F16,  SPECD_DTYPE_BF16, SPECD_DTYPE_Q4_0,
                            SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0, SPECD_DTYPE_Q8_1, SPECD_DTYPE_Q4_K,
                            SPECD_DTYPE_Q6_K, SPECD_DTYPE_Q8_K};
    for (size_t ti = 0; ti < sizeof all / sizeof all[0]; ti++) {
        const specd_dtype_traits *s = specd_dtype_traits_scalar(all[ti]);
        const specd_dtype_traits *f = specd_dtype_traits_get(all[ti]);
        for (int rep = 0; rep < 40; rep++) {
            /* float types: every n from 1 to 40 and some long ones, to cover every tail */
            int64_t n = s->block_size == 1 ? (rep < 36 ? rep + 1 : 1000 + 7 * rep)
                                           : s->block_size * (1 + rep % 9);
            float *a = specd_alloc_array(n, sizeof *a), *ya = specd_alloc_array(n, sizeof *ya),
                  *yb = specd_alloc_array(n, sizeof *yb);
            size_t bytes = specd_dtype_row_bytes(all[ti], n);
            uint8_t *qa = specd_alloc(bytes), *qb = specd_alloc(bytes);
            assert_true(a && ya && yb && qa && qb);
            fill_floats(a, n, rep % 2 ? 100.0f : 0.01f);
            if (s->from_float) {
                s->from_float(a, qa, n);
                f->from_float(a, qb, n);
                if (memcmp(qa, qb, bytes) != 0)
                    fail_msg("%s from_float n=%lld differs", s->name, (long long)n);
            } else {
                void *r = random_row(all[ti], n);
                memcpy(qa, r, bytes);
                specd_free(r);
            }
            s->to_float(qa, ya, n);
            f->to_float(qa, yb, n);
            if (memcmp(ya, yb, (size_t)n * sizeof *ya) != 0)
                fail_msg("%s to_float n=%lld differs", s->name, (long long)n);
            if (s->vec_dot) {
                const specd_dtype_traits *vt = specd_dtype_traits_scalar(s->vec_dot_type);
                uint8_t *yq = specd_alloc(specd_dtype_row_bytes(s->vec_dot_type, n));
                assert_non_null(yq);
                fill_floats(a, n, 1.0f);
                vt->from_float(a, yq, n);
                float ds, df;
                s->vec_dot(n, &ds, qa, yq);
                f->vec_dot(n, &df, qa, yq);
                if (s->block_size > 1) {
                    if (memcmp(&ds, &df, sizeof ds) != 0)
                        fail_msg("%s vec_dot n=%lld: scalar %.9g avx2 %.9g", s->name, (long long)n,
                                 ds, df);
                } else {
                    float *xf = dequantize(all[ti], qa, n),
                          *yf = dequantize(s->vec_dot_type, yq, n);
                    double mag = 0;
                    for (int64_t i = 0; i < n; i++)
                        mag += fabs((double)xf[i] * yf[i]);
                    if (!(fabs((double)ds - df) <= 1e-6 * mag + 1e-30))
                        fail_msg("%s vec_dot n=%lld: scalar %.9g avx2 %.9g", s->name, (long long)n,
                                 ds, df);
                    specd_free(xf);
                    specd_free(yf);
                }
                float again;
                f->vec_dot(n, &again, qa, yq);
                assert_memory_equal(&again, &df, sizeof df);
                specd_free(yq);
            }
            specd_free(a);
            specd_free(ya);
            specd_free(yb);
            specd_free(qa);
            specd_free(qb);
        }
    }
}

/* Weights may use the full int8 range, -128 included (activations never do). */
static void test_avx2_q8_0_extreme_weights(void **state) {
    (void)state;
    if (!specd_cpu_has_avx2()) skip();
    specd_block_q8_0 x[2], y[2];
    for (int b = 0; b < 2; b++) {
        x[b].d = y[b].d = 0x3c00;
        for (int j = 0; j < 32; j++) {
            x[b].qs[j] = (int8_t)(j % 2 ? -128 : 127);
            y[b].qs[j] = (int8_t)(j % 3 ? -127 : 127);
        }
    }
    float s, f;
    specd_dtype_traits_scalar(SPECD_DTYPE_Q8_0)->vec_dot(64, &s, x, y);
    specd_dtype_traits_get(SPECD_DTYPE_Q8_0)->vec_dot(64, &f, x, y);
    assert_memory_equal(&s, &f, sizeof s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_traits_table),
        cmocka_unit_test(test_fp16_conversions),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_quantize_round_trip),
        cmocka_unit_test(test_dot_matches_dequantized_scalar),
        cmocka_unit_test(test_dot_matches_dequantized_fastest),
        cmocka_unit_test(test_avx2_matches_scalar),
        cmocka_unit_test(test_avx2_q8_0_extreme_weights),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
