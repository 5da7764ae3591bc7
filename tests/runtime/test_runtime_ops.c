/* The runtime's CPU ops and thread pool, without a model: F16 conversion exact against the
 * hardware's (F16C) on every half and on random floats, RoPE against a double-precision rotation,
 * softmax, the vectorised exp against libm, the AVX2 paths of exp, softmax, SwiGLU and attention
 * bit for bit against their scalar forms, and the pool's run/barrier semantics. (That these forms
 * equal llama.cpp's arithmetic is checked end to end by test_runtime_golden.) */
#include "test_main.h"

#include "common/threadpool.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cpu/vexp.h"

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
    float cs[HD / 2], sn[HD / 2];
    memcpy(y, x, sizeof x);
    specd_rope_angles(0, HD, 10000.0f, cs, sn);
    specd_rope_f32(y, NH, HD, HD, cs, sn, 0);
    assert_memory_equal(x, y, sizeof x); /* position 0 rotates by nothing */
    for (int neox = 0; neox < 2; neox++) {
        const int pos = 37;
        memcpy(y, x, sizeof x);
        specd_rope_angles(pos, HD, 100000.0f, cs, sn);
        specd_rope_f32(y, NH, HD, HD, cs, sn, neox);
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
    specd_softmax_f32(x, 5, 0);
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
 * bit, for every row count up to past two 16-row groups, uneven column ranges, and each CPU path
 * this machine runs (AVX2 tiles, AVX-512 VNNI tiles): what batch invariance and ISA independence
 * rest on. Q8_0 weights include -128, the one quant the AVX-512 kernel's unsigned offset wraps. */
static void test_matmul_matches_vec_dot(void **state) {
    (void)state;
    const uint32_t types[3] = {SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0};
    enum { N_IN = 96, N_OUT = 37, MAX_ROWS = 35 };
    for (int path = SPECD_CPU_SCALAR; path <= SPECD_CPU_AVX512; path++) {
        if (!specd_cpu_path_supported((specd_cpu_path)path)) continue;
        for (int t = 0; t < 3; t++) {
            const specd_dtype_traits *tr = specd_dtype_traits_get(types[t]);
            const specd_dtype_traits *vt = specd_dtype_traits_get(tr->vec_dot_type);
            assert_non_null(tr);
            assert_non_null(vt);
            const size_t wrb = specd_dtype_row_bytes(types[t], N_IN);
            const size_t xrb = specd_dtype_row_bytes(tr->vec_dot_type, N_IN);
            static float wf[N_OUT * N_IN], x[MAX_ROWS * N_IN], y[MAX_ROWS * N_OUT];
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
            if (types[t] == SPECD_DTYPE_Q8_0)
                for (int o = 0; o < N_OUT; o += 3)
                    w[o * wrb + 2 + (size_t)o % 32] = 0x80; /* quant -128 */
            specd_quantize_rows(vt, tr->vec_dot_type, x, N_IN, MAX_ROWS, N_IN, xq);
            float ref;
            for (int rows = 1; rows <= MAX_ROWS; rows++) {
                memset(y, 0, sizeof y);
                specd_matmul_rows(tr, types[t], w, N_IN, 3, N_OUT, xq, xrb, rows, y, N_OUT, path);
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
}

static float test_input(uint32_t *s, float range) {
    *s = *s * 1664525u + 1013904223u;
    return ((float)(*s >> 8) / 16777216.0f - 0.5f) * range;
}

/* Q4_K and Q6_K weights (random blocks: every byte random, scales over the full 6-bit or int8
 * range, d and dmin random halves) against Q8_K activations from the quantizer, some quants then
 * set to -128 and 127 (the int8 extremes the tiles' unsigned offset and 16-bit pair sums must
 * hold): on every CPU path this machine runs, each tile output equals the scalar reference
 * vec_dot bit for bit (so the AVX-512 tiles equal the AVX2 ones, and a row's result is the same
 * alone or in any batch), the AVX2 vec_dot equals it too, and all lie close to a double-precision
 * dot of the dequantized rows. Rows 1..35 pass two 16-row groups and a short one. */
static void test_kquant_matmul(void **state) {
    (void)state;
    const uint32_t types[2] = {SPECD_DTYPE_Q4_K, SPECD_DTYPE_Q6_K};
    enum { N_IN = 768, N_OUT = 19, MAX_ROWS = 35 };
    for (int t = 0; t < 2; t++) {
        const specd_dtype_traits *ref = specd_dtype_traits_scalar(types[t]);
        const specd_dtype_traits *fast = specd_dtype_traits_get(types[t]);
        const specd_dtype_traits *q8k = specd_dtype_traits_scalar(SPECD_DTYPE_Q8_K);
        assert_non_null(ref);
        assert_non_null(fast);
        assert_int_equal(ref->vec_dot_type, SPECD_DTYPE_Q8_K);
        const size_t wrb = specd_dtype_row_bytes(types[t], N_IN);
        const size_t xrb = specd_dtype_row_bytes(SPECD_DTYPE_Q8_K, N_IN);
        unsigned char *w = malloc(wrb * N_OUT), *xq = malloc(xrb * MAX_ROWS);
        static float x[MAX_ROWS * N_IN], wf[N_OUT * N_IN], xf[MAX_ROWS * N_IN];
        static float y[MAX_ROWS * N_OUT], want[MAX_ROWS * N_OUT];
        uint32_t s = 5 + (uint32_t)t;
        for (size_t i = 0; i < wrb * N_OUT; i++) {
            s = s * 1664525u + 1013904223u;
            w[i] = (unsigned char)(s >> 24);
        }
        const size_t bb = ref->block_bytes;
        for (size_t b = 0; b < wrb * N_OUT / bb; b++) { /* finite scales: d (and dmin) */
            unsigned char *blk = w + b * bb;
            const size_t d_off = types[t] == SPECD_DTYPE_Q4_K ? 0 : bb - 2;
            for (int h = 0; h < (types[t] == SPECD_DTYPE_Q4_K ? 2 : 1); h++) {
                const uint16_t d = specd_fp32_to_fp16(test_input(&s, 0.02f));
                memcpy(blk + d_off + 2 * (size_t)h, &d, sizeof d);
            }
        }
        for (int i = 0; i < MAX_ROWS * N_IN; i++)
            x[i] = test_input(&s, 3.0f) * (1 + i % 11);
        q8k->from_float(x, xq, (int64_t)MAX_ROWS * N_IN);
        for (int r = 0; r < MAX_ROWS; r += 3) { /* int8 extremes, bsums kept consistent */
            specd_block_q8_k *blk = (specd_block_q8_k *)(xq + (size_t)r * xrb) + r % 3;
            const int e = (r * 37) % 256, f = (e + 101) % 256;
            blk->bsums[e / 16] = (int16_t)(blk->bsums[e / 16] - blk->qs[e] - 128);
            blk->qs[e] = -128;
            blk->bsums[f / 16] = (int16_t)(blk->bsums[f / 16] - blk->qs[f] + 127);
            blk->qs[f] = 127;
        }
        ref->to_float(w, wf, (int64_t)N_OUT * N_IN);
        q8k->to_float(xq, xf, (int64_t)MAX_ROWS * N_IN);
        for (int r = 0; r < MAX_ROWS; r++)
            for (int o = 0; o < N_OUT; o++) {
                const unsigned char *wr = w + (size_t)o * wrb, *xr = xq + (size_t)r * xrb;
                float a, b;
                ref->vec_dot(N_IN, &a, wr, xr);
                fast->vec_dot(N_IN, &b, wr, xr);
                assert_memory_equal(&a, &b, sizeof a);
                want[r * N_OUT + o] = a;
                double dot = 0, mag = 0;
                for (int i = 0; i < N_IN; i++) {
                    dot += (double)wf[o * N_IN + i] * xf[r * N_IN + i];
                    mag += fabs((double)wf[o * N_IN + i] * xf[r * N_IN + i]);
                }
                assert_true(fabs(a - dot) <= 1e-4 * mag + 1e-6);
            }
        for (int path = SPECD_CPU_SCALAR; path <= SPECD_CPU_AVX512; path++) {
            if (!specd_cpu_path_supported((specd_cpu_path)path)) continue;
            for (int rows = 1; rows <= MAX_ROWS; rows++) {
                memset(y, 0, sizeof y);
                specd_matmul_rows(fast, types[t], w, N_IN, 2, N_OUT, xq, xrb, rows, y, N_OUT,
                                  path);
                for (int r = 0; r < rows; r++)
                    assert_memory_equal(&want[r * N_OUT + 2], &y[r * N_OUT + 2],
                                        sizeof(float) * (N_OUT - 2));
            }
        }
        free(w);
        free(xq);
    }
}

/* ggml's exp is within a few ulp of expf, and underflows and overflows as expf does. */
static void test_vexp_accuracy(void **state) {
    (void)state;
    uint32_t s = 7;
    for (int i = 0; i < 200000; i++) {
        s = s * 1664525u + 1013904223u;
        const float x = ((float)(s >> 8) / 16777216.0f - 0.5f) * 200.0f; /* [-100, 100) */
        const float a = specd_vexp_lane(x), b = expf(x);
        /* a few ulp: relative for normal results, absolute (subnormal ulps) below */
        if (isinf(b))
            assert_true(isinf(a));
        else
            assert_true(fabsf(a - b) <= (b >= 0x1p-126f ? 4e-7f * b : 0x1p-147f));
    }
    assert_true(specd_vexp_lane(-INFINITY) == 0.0f);
    assert_true(specd_vexp_lane(-200.0f) == 0.0f);
    assert_true(isinf(specd_vexp_lane(200.0f)));
    assert_true(specd_vexp_lane(0.0f) == 1.0f);
    const float sub = specd_vexp_lane(-100.0f); /* a subnormal result */
    assert_true(sub > 0.0f && fabsf(sub - expf(-100.0f)) <= 1e-44f);
}

/* Every AVX2 path against its scalar form, bit for bit (batch invariance and the llama.cpp match
 * must not depend on the CPU's features). */
static void test_simd_equals_scalar(void **state) {
    (void)state;
    if (!specd_cpu_has_avx2_f16c()) skip();
    uint32_t s = 11;
    enum { N = 1000, HD = 64, NPOS = 77 };
    float a[N], b[N], u[N], ya[N], yb[N];
    for (int i = 0; i < N; i++) {
        a[i] = test_input(&s, 400.0f);
        if (i % 97 == 0) a[i] = -INFINITY;
        b[i] = a[i];
        u[i] = test_input(&s, 4.0f);
    }
    for (int n = 1; n <= N; n += 37) { /* softmax over lengths with partial chunks */
        memcpy(ya, a, sizeof ya);
        memcpy(yb, a, sizeof yb);
        ya[n - 1] = yb[n - 1] = 1.0f; /* one finite entry at least */
        specd_softmax_f32(ya, n, 1);
        specd_softmax_f32(yb, n, 0);
        assert_memory_equal(ya, yb, sizeof(float) * (size_t)n);
    }
    /* a maximum of zero held by -0 and +0 in different lanes (the vector max may meet them in
     * another order than the scalar loop); with a NaN beside them, every output is NaN on both
     * paths (the NaNs' sign bits are the exp's own and may differ) */
    for (int nan = 0; nan < 2; nan++) {
        for (int i = 0; i < 40; i++)
            ya[i] = -(float)(i % 13) - 0.5f;
        ya[3] = -0.0f, ya[12] = 0.0f, ya[21] = -0.0f, ya[30] = 0.0f;
        if (nan) ya[17] = NAN;
        memcpy(yb, ya, sizeof(float) * 40);
        specd_softmax_f32(ya, 40, 1);
        specd_softmax_f32(yb, 40, 0);
        if (nan)
            for (int i = 0; i < 40; i++)
                assert_true(isnan(ya[i]) && isnan(yb[i]));
        else
            assert_memory_equal(ya, yb, sizeof(float) * 40);
    }
    for (int i = 0; i < N; i++)
        b[i] = test_input(&s, 60.0f);
    specd_swiglu_f32(b, u, ya, N - 3, 1);
    specd_swiglu_f32(b, u, yb, N - 3, 0);
    assert_memory_equal(ya, yb, sizeof(float) * (N - 3));
    /* attention: K rows and a transposed V, causal and masked, n_pos not a multiple of 32 */
    uint16_t k[NPOS * HD], vt[HD * NPOS];
    float q[HD], sc[NPOS], pr[(NPOS + 31) / 32 * 32], oa[HD], ob[HD];
    uint8_t vis[NPOS];
    for (int i = 0; i < NPOS * HD; i++) {
        k[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
        vt[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
    }
    for (int d = 0; d < HD; d++)
        q[d] = test_input(&s, 6.0f);
    for (int j = 0; j < NPOS; j++)
        vis[j] = (uint8_t)(j % 3 != 1);
    for (int masked = 0; masked < 2; masked++)
        for (int n_pos = 1; n_pos <= NPOS; n_pos += 19) {
            const uint8_t *v = masked ? vis : NULL;
            specd_attention_row(q, k, HD, vt, NPOS, v, n_pos, HD, 0.125f, sc, pr, oa, 1);
            specd_attention_row(q, k, HD, vt, NPOS, v, n_pos, HD, 0.125f, sc, pr, ob, 0);
            assert_memory_equal(oa, ob, sizeof oa);
        }
}

/* Attention tiles (several query rows over one cache, each K and V^T row converted once) against
 * the one-row op, bit for bit, on each vector path: rows with their own n_pos (causal steps, so
 * each row's last 32-position chunk ends elsewhere), with and without masks, head sizes that are
 * and are not multiples of 32, and cache entries past a row's n_pos that are infinite (a row must
 * not read them: 0 * inf is NaN). */
static void test_attention_tiles(void **state) {
    (void)state;
    if (!specd_cpu_has_avx2_f16c()) skip();
    enum { NPOS = 150, MAXR = 19, HDMAX = 64 };
    static uint16_t k[NPOS * HDMAX], vt[HDMAX * NPOS];
    static float q[MAXR * HDMAX], oa[MAXR * HDMAX], ob[HDMAX], sc[NPOS], pr[NPOS + 32];
    static uint8_t vis[MAXR * NPOS];
    static float work[MAXR * (NPOS + 32 + HDMAX)];
    uint32_t s = 23;
    for (int i = 0; i < NPOS * HDMAX; i++) {
        k[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
        vt[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
    }
    for (int i = 0; i < MAXR * HDMAX; i++)
        q[i] = test_input(&s, 6.0f);
    for (int i = 0; i < MAXR * NPOS; i++)
        vis[i] = (uint8_t)((i * 7) % 5 != 1);
    const int32_t hds[2] = {64, 48};
    for (int path = SPECD_CPU_AVX2; path <= SPECD_CPU_AVX512; path++) {
        if (!specd_cpu_path_supported((specd_cpu_path)path)) continue;
        for (int h = 0; h < 2; h++)
            for (int masked = 0; masked < 2; masked++)
                for (int R = 1; R <= MAXR; R += 3) {
                    const int32_t hd = hds[h], base = 100 - 3 * R;
                    specd_attention_query rows[MAXR];
                    for (int r = 0; r < R; r++) {
                        rows[r] = (specd_attention_query){.q = q + r * HDMAX,
                                                          .visible = masked ? vis + r * NPOS : NULL,
                                                          .n_pos = base + 3 * r + r % 2,
                                                          .out = oa + r * HDMAX};
                    }
                    /* past the longest row: infinities in K and V^T */
                    const int32_t n_max = rows[R - 1].n_pos;
                    for (int j = n_max; j < NPOS; j++)
                        for (int d = 0; d < hd; d++) {
                            k[j * hd + d] = 0x7c00;
                            vt[d * NPOS + j] = 0xfc00;
                        }
                    /* and one inside the longer rows' span, just past the first row's */
                    const int32_t p0 = rows[0].n_pos;
                    for (int d = 0; d < hd; d++)
                        vt[d * NPOS + p0] = 0x7c00;
                    specd_attention_rows(rows, R, k, (size_t)hd, vt, NPOS, hd, 0.125f, work,
                                         sizeof work / sizeof work[0], sc, pr, path);
                    for (int r = 0; r < R; r++) {
                        specd_attention_row(rows[r].q, k, (size_t)hd, vt, NPOS, rows[r].visible,
                                            rows[r].n_pos, hd, 0.125f, sc, pr, ob, path);
                        assert_memory_equal(ob, rows[r].out, sizeof(float) * (size_t)hd);
                        for (int d = 0; d < hd && rows[r].n_pos <= p0; d++)
                            assert_true(isfinite(ob[d]));
                    }
                    for (int d = 0; d < hd; d++)
                        vt[d * NPOS + p0] = specd_fp32_to_fp16(0.75f);
                    for (int j = n_max; j < NPOS; j++) /* finite again for the next case */
                        for (int d = 0; d < hd; d++) {
                            k[j * hd + d] = specd_fp32_to_fp16(0.5f);
                            vt[d * NPOS + j] = specd_fp32_to_fp16(-0.25f);
                        }
                }
    }
}

/* A row whose mask hides positions inside its span (a tree node beside its uncle) equals the same
 * row over a cache that holds only its visible keys, packed in order: what plain decoding sees
 * once the accepted path is committed. Bit for bit, on every path, alone and in a tile beside
 * rows without holes; the hidden positions hold infinities, which must never be read. */
static void test_attention_holes_packed(void **state) {
    (void)state;
    enum { NPOS = 97, HD = 64, R = 5 };
    static uint16_t k[NPOS * HD], vt[HD * NPOS], kp[NPOS * HD], vtp[HD * NPOS];
    static float q[R * HD], out[R * HD], ob[HD], sc[NPOS], pr[NPOS + 32];
    static float work[R * (NPOS + 32 + HD)];
    static uint8_t vis[R * NPOS];
    /* the first hole inside a 32-position chunk, at its start, and in the first chunk; the last
     * with more visible positions past it than a tree row has */
    static const int32_t hide_froms[] = {NPOS - 12, 64, 5};
    int checked_holes = 0;
    for (size_t hf = 0; hf < sizeof hide_froms / sizeof hide_froms[0]; hf++) {
        uint32_t s = 41;
        for (int i = 0; i < NPOS * HD; i++) {
            k[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
            vt[i] = specd_fp32_to_fp16(test_input(&s, 2.0f));
        }
        for (int i = 0; i < R * HD; i++)
            q[i] = test_input(&s, 6.0f);
        /* rows 0, 2, 4 hide a few positions near their end (siblings of their ancestors); rows 1
         * and 3 see everything up to their n_pos */
        int32_t n_pos[R];
        const int32_t hide_from = hide_froms[hf]; /* hidden: every third j from hide_from on */
        for (int r = 0; r < R; r++) {
            n_pos[r] = r % 2 ? hide_from - r : NPOS - r;
            for (int j = 0; j < NPOS; j++)
                vis[r * NPOS + j] = (uint8_t)(j < hide_from || (j - hide_from) % 3 != 0);
        }
        for (int j = hide_from; j < NPOS; j++)
            if ((j - hide_from) % 3 == 0)
                for (int d = 0; d < HD; d++) {
                    k[j * HD + d] = 0x7c00;
                    vt[d * NPOS + j] = 0xfc00;
                }
        for (int path = 0; path <= SPECD_CPU_AVX512; path++) {
            if (path && !specd_cpu_path_supported((specd_cpu_path)path)) continue;
            specd_attention_query rows[R];
            for (int r = 0; r < R; r++)
                rows[r] = (specd_attention_query){.q = q + r * HD,
                                                  .visible = vis + r * NPOS,
                                                  .n_pos = n_pos[r],
                                                  .out = out + r * HD};
            specd_attention_rows(rows, R, k, HD, vt, NPOS, HD, 0.125f, work,
                                 sizeof work / sizeof work[0], sc, pr, path);
            for (int r = 0; r < R; r++) {
                /* the packed cache: visible keys and values only, in order */
                int m = 0;
                for (int j = 0; j < n_pos[r]; j++) {
                    if (!vis[r * NPOS + j]) continue;
                    memcpy(kp + m * HD, k + j * HD, sizeof(uint16_t) * HD);
                    for (int d = 0; d < HD; d++)
                        vtp[d * NPOS + m] = vt[d * NPOS + j];
                    m++;
                }
                checked_holes += m < n_pos[r];
                specd_attention_row(q + r * HD, kp, HD, vtp, NPOS, NULL, m, HD, 0.125f, sc, pr, ob,
                                    path);
                assert_memory_equal(ob, out + r * HD, sizeof ob);
                specd_attention_row(q + r * HD, k, HD, vt, NPOS, vis + r * NPOS, n_pos[r], HD,
                                    0.125f, sc, pr, ob, path);
                assert_memory_equal(ob, out + r * HD, sizeof ob);
                for (int d = 0; d < HD; d++)
                    assert_true(isfinite(ob[d]));
            }
        }
    }
    assert_true(checked_holes >= 9);
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
        cmocka_unit_test(test_half_conversion),
        cmocka_unit_test(test_rope),
        cmocka_unit_test(test_softmax_and_norm),
        cmocka_unit_test(test_matmul_matches_vec_dot),
        cmocka_unit_test(test_kquant_matmul),
        cmocka_unit_test(test_vexp_accuracy),
        cmocka_unit_test(test_simd_equals_scalar),
        cmocka_unit_test(test_attention_tiles),
        cmocka_unit_test(test_attention_holes_packed),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
