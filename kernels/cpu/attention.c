#include "kernels/cpu/ops.h"

#include "kernels/cpu/fp16.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* llama.cpp's attention over an F16 cache without flash attention, as its x86 build evaluates a
 * one-token decode: scores = K q16 where q16 is q rounded to F16 and each dot is ggml_vec_dot_f16
 * (four 8-lane accumulators over steps of 32, reduced as below); softmax (softmax.c) over all
 * positions with masked ones at -inf; the probabilities rounded to F16; then each output dim is
 * again ggml_vec_dot_f16 of V^T's row for that dim with the probabilities. Positions are cache
 * rows, so a masked row still holds its place in the 8- and 32-wide groupings, as in llama.cpp.
 * Every number depends only on the row's own inputs, whatever the batch. */

/* ggml_vec_dot_f16's reduction of four 8-lane accumulators (GGML_F32x8_REDUCE). */
static float reduce_4x8(float acc[4][8]) {
    float t[8], h[4];
    for (int l = 0; l < 8; l++)
        t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (int l = 0; l < 4; l++)
        h[l] = t[l] + t[l + 4];
    return (h[0] + h[1]) + (h[2] + h[3]);
}

/* dot of n F16 values with n floats (already F16-exact); element i goes to accumulator
 * (i / 8) % 4, lane i % 8; n need not be a multiple of 32: missing elements count as zero. */
static float dot_f16_scalar(const uint16_t *x, const float *y, int32_t n) {
    float acc[4][8] = {{0}};
    for (int32_t i = 0; i < n; i++)
        acc[(i >> 3) & 3][i & 7] = fmaf(specd_fp16_to_fp32(x[i]), y[i], acc[(i >> 3) & 3][i & 7]);
    return reduce_4x8(acc);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static AVX2 inline float reduce_4x8_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

static AVX2 inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* ggml_vec_dot_f16 for any n, y readable and zero up to n rounded up to 32 (missing elements
 * count as zero, as llama.cpp's masked padding does). x is read only below n: a last partial group
 * goes through a zero-padded copy, since the cache beyond n may hold anything and 0 * inf is not 0. */
static AVX2 inline float dot_f16_avx2(const uint16_t *x, const float *y, int32_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint16_t xt[32];
    for (int32_t i = 0; i < n; i += 32) {
        const uint16_t *xs = x + i;
        if (n - i < 32) {
            memset(xt, 0, sizeof xt);
            memcpy(xt, xs, (size_t)(n - i) * sizeof *xt);
            xs = xt;
        }
        a0 = _mm256_fmadd_ps(load_f16x8(xs), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(xs + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(xs + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(xs + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    return reduce_4x8_avx2(a0, a1, a2, a3);
}

/* The row's scores in one AVX2 loop (no call per key): scores[j] = dot(K_j, qh) * scale, or -inf
 * where masked. */
static AVX2 void scores_avx2(const uint16_t *k, size_t k_stride, const float *qh,
                             const uint8_t *visible, int32_t n_pos, int32_t head_dim, float scale,
                             float *scores) {
    for (int32_t j = 0; j < n_pos; j++) {
        if (visible && !visible[j]) {
            scores[j] = -INFINITY;
            continue;
        }
        scores[j] = dot_f16_avx2(k + (size_t)j * k_stride, qh, head_dim) * scale;
    }
}

/* x rounded to F16 and back, eight at a time */
static AVX2 void round_f16_avx2(const float *x, float *y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++)
        y[i] = specd_fp16_to_fp32(specd_fp32_to_fp16(x[i]));
}

static AVX2 void mix_avx2(const uint16_t *vt, size_t vt_stride, const float *probs, int32_t n_pos,
                          int32_t head_dim, float *out) {
    for (int32_t d = 0; d < head_dim; d++)
        out[d] = dot_f16_avx2(vt + (size_t)d * vt_stride, probs, n_pos);
}
#endif

void specd_attention_row(const float *q, const uint16_t *k, size_t k_stride, const uint16_t *vt,
                         size_t vt_stride, const uint8_t *visible, int32_t n_pos, int32_t head_dim,
                         float scale, float *scores, float *probs, float *out, int simd) {
    float qh[512]; /* head_dim <= 512, checked at model load */
#if defined(__x86_64__)
    if (simd) {
        round_f16_avx2(q, qh, head_dim);
        scores_avx2(k, k_stride, qh, visible, n_pos, head_dim, scale, scores);
        specd_softmax_f32(scores, n_pos, simd);
        round_f16_avx2(scores, probs, n_pos);
        for (int32_t j = n_pos; j % 32; j++)
            probs[j] = 0.0f;
        mix_avx2(vt, vt_stride, probs, n_pos, head_dim, out);
        return;
    }
#endif
    for (int32_t d = 0; d < head_dim; d++)
        qh[d] = specd_fp16_to_fp32(specd_fp32_to_fp16(q[d]));
    for (int32_t j = 0; j < n_pos; j++)
        scores[j] = visible && !visible[j]
                        ? -INFINITY
                        : dot_f16_scalar(k + (size_t)j * k_stride, qh, head_dim) * scale;
    specd_softmax_f32(scores, n_pos, simd);
    for (int32_t j = 0; j < n_pos; j++)
        probs[j] = specd_fp16_to_fp32(specd_fp32_to_fp16(scores[j]));
    for (int32_t d = 0; d < head_dim; d++)
        out[d] = dot_f16_scalar(vt + (size_t)d * vt_stride, probs, n_pos);
}
