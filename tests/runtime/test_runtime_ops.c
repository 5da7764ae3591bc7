/* The runtime's CPU ops and thread pool, without a model: F16 conversion exact against the
 * hardware's (F16C) on every half and on random floats, RoPE against a double-precision rotation,
 * softmax, and the pool's run/barrier semantics. */
#include "test_main.h"

#include "common/threadpool.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/ops.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) {
    return _cvtsh_ss(h);
}
#endif

static void test_half_conversion(void **state) {
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = specd_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(specd_fp32_to_fp16(f), h);
#if defined(__x86_64__)
        if (specd_cpu_has_f16c()) {
            float g = hw_h2f((uint16_t)h);
            assert_memory_equal(&f, &g, sizeof f);
        }
#endif
    }
#if defined(__x86_64__)
    if (!specd_cpu_has_f16c()) return;
    uint32_t s = 1;
    for (int i = 0; i < 2000000; i++) {
        s = s * 1664525u + 1013904223u;
        float f;
        memcpy(&f, &s, sizeof f);
        if (isnan(f)) continue;
        assert_int_equal(specd_fp32_to_fp16(f), hw_f2h(f));
    }
#endif
}

static void test_rope(void **state) {
    (void)state;
    enum { HD = 64, NH = 3 };
    float x[NH * HD], y[NH * HD];
    for (int i = 0; i < NH * HD; i++)
        x[i] = sinf((float)i * 0.37f) + 0.1f;
    memcpy(y, x, sizeof x);
    specd_rope_f32(y, NH, HD, HD, 0, 10000.0f, 0);
    assert_memory_equal(x, y, sizeof x); /* position 0 rotates by nothing */
    for (int neox = 0; neox < 2; neox++) {
        const int pos = 37;
        memcpy(y, x, sizeof x);
        specd_rope_f32(y, NH, HD, HD, pos, 100000.0f, neox);
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < HD / 2; i++) {
                int a = neox ? i : 2 * i, b = neox ? i + HD / 2 : 2 * i + 1;
                double th = pos * pow(100000.0, -2.0 * i / HD);
                double x0 = x[h * HD + a], x1 = x[h * HD + b];
                assert_true(fabs(y[h * HD + a] - (x0 * cos(th) - x1 * sin(th))) < 1e-4);
                assert_true(fabs(y[h * HD + b] - (x0 * sin(th) + x1 * cos(th))) < 1e-4);
            }
    }
}

static void test_softmax_and_norm(void **state) {
    (void)state;
    float x[5] = {1, 2, 3, -1000, 3};
    specd_softmax_f32(x, 5);
    double sum = 0;
    for (int i = 0; i < 5; i++)
        sum += x[i];
    assert_true(fabs(sum - 1.0) < 1e-6);
    assert_true(x[3] == 0.0f && x[2] == x[4] && x[2] > x[1]);
    float v[4] = {1, -1, 1, -1}, w[4] = {1, 2, 3, 4}, y[4];
    specd_rmsnorm_f32(v, w, y, 4, 0.0f);
    assert_true(y[0] == 1.0f && y[1] == -2.0f && y[3] == -4.0f);
}

/* The matmul's tiled kernels (several dot products per pass) against the library's vec_dot, bit for
 * bit, for every row count and uneven column ranges: what batch invariance rests on. */
static void test_matmul_matches_vec_dot(void **state) {
    (void)state;
    const uint32_t types[2] = {SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0};
    enum { N_IN = 96, N_OUT = 37, MAX_ROWS = 9 };
    for (int t = 0; t < 2; t++) {
        const specd_dtype_traits *tr = specd_dtype_traits_get(types[t]);
        const specd_dtype_traits *vt = specd_dtype_traits_get(tr->vec_dot_type);
        assert_non_null(tr);
        assert_non_null(vt);
        const size_t wrb = specd_dtype_row_bytes(types[t], N_IN);
        const size_t xrb = specd_dtype_row_bytes(tr->vec_dot_type, N_IN);
        float wf[N_OUT * N_IN], x[MAX_ROWS * N_IN];
        uint32_t s = 99 + (uint32_t)t;
        for (int i = 0; i < N_OUT * N_IN; i++) {
            s = s * 1664525u + 1013904223u;
            wf[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (1 + (i % 7));
        }
        for (int i = 0; i < MAX_ROWS * N_IN; i++)
            x[i] = sinf((float)i * 0.71f) * (1 + (i % 5));
        unsigned char *w = malloc(wrb * N_OUT), *xq = malloc(xrb * MAX_ROWS);
        for (int o = 0; o < N_OUT; o++)
            tr->from_float(wf + o * N_IN, w + o * wrb, N_IN);
        specd_quantize_rows(vt, tr->vec_dot_type, x, N_IN, MAX_ROWS, N_IN, xq);
        float y[MAX_ROWS * N_OUT], ref;
        for (int rows = 1; rows <= MAX_ROWS; rows++) {
            memset(y, 0, sizeof y);
            specd_matmul_rows(tr, types[t], w, N_IN, 3, N_OUT, xq, xrb, rows, y, N_OUT,
                              specd_cpu_has_avx2_f16c());
            for (int r = 0; r < rows; r++)
                for (int o = 3; o < N_OUT; o++) {
                    tr->vec_dot(N_IN, &ref, w + o * wrb, xq + r * xrb);
                    assert_memory_equal(&ref, &y[r * N_OUT + o], sizeof ref);
                }
        }
        free(w);
        free(xq);
    }
}

typedef struct pool_arg {
    specd_threadpool *pool;
    _Atomic int hits[8];
    int phase_ok;
    _Atomic int phase_count;
} pool_arg;

static void pool_fn(void *p, int ith, int nth) {
    pool_arg *a = p;
    atomic_fetch_add(&a->hits[ith], 1);
    for (int ph = 0; ph < 100; ph++) {
        atomic_fetch_add(&a->phase_count, 1);
        specd_threadpool_barrier(a->pool);
        if (atomic_load(&a->phase_count) != (ph + 1) * nth) a->phase_ok = 0;
        specd_threadpool_barrier(a->pool);
    }
}

static void test_threadpool(void **state) {
    (void)state;
    for (int n = 1; n <= 4; n++) {
        pool_arg a;
        memset(&a, 0, sizeof a);
        a.phase_ok = 1;
        specd_error err;
        assert_int_equal(specd_threadpool_create(n, &a.pool, &err), SPECD_OK);
        assert_int_equal(specd_threadpool_size(a.pool), n);
        for (int r = 0; r < 20; r++) {
            atomic_store(&a.phase_count, 0);
            specd_threadpool_run(a.pool, pool_fn, &a);
        }
        for (int i = 0; i < n; i++)
            assert_int_equal(atomic_load(&a.hits[i]), 20);
        assert_true(a.phase_ok);
        specd_threadpool_destroy(a.pool);
    }
    specd_threadpool *p = NULL;
    specd_error err;
    assert_int_equal(specd_threadpool_create(0, &p, &err), SPECD_E_INVALID_ARG);
    specd_threadpool_destroy(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_conversion),  cmocka_unit_test(test_rope),
        cmocka_unit_test(test_softmax_and_norm), cmocka_unit_test(test_matmul_matches_vec_dot),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
