#include "kernels/cpu/ops.h"

#include "kernels/cpu/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Scores and the weighted sum of V are the only reductions: each runs over one row in a fixed
 * order (8 lanes of head dims, keys ascending), so the result depends only on the row's keys. */

static void scores_scalar(const float *q, const uint16_t *k, size_t stride, const int32_t *keys,
                          int32_t n_keys, int32_t hd, float scale, float *s) {
    for (int32_t j = 0; j < n_keys; j++) {
        const uint16_t *kr = k + (size_t)keys[j] * stride;
        float lane[8] = {0};
        for (int32_t d = 0; d < hd; d++)
            lane[d & 7] += q[d] * specd_fp16_to_fp32(kr[d]);
        float sum = ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
                    ((lane[2] + lane[6]) + (lane[3] + lane[7]));
        s[j] = sum * scale;
    }
}

static void mix_scalar(const float *p, const uint16_t *v, size_t stride, const int32_t *keys,
                       int32_t n_keys, int32_t hd, float *out) {
    for (int32_t d = 0; d < hd; d++)
        out[d] = 0.0f;
    for (int32_t j = 0; j < n_keys; j++) {
        const uint16_t *vr = v + (size_t)keys[j] * stride;
        for (int32_t d = 0; d < hd; d++)
            out[d] += p[j] * specd_fp16_to_fp32(vr[d]);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma,f16c"))) static void scores_avx2(const float *q, const uint16_t *k,
                                                                 size_t stride, const int32_t *keys,
                                                                 int32_t n_keys, int32_t hd,
                                                                 float scale, float *s) {
    for (int32_t j = 0; j < n_keys; j++) {
        const uint16_t *kr = k + (size_t)keys[j] * stride;
        __m256 acc = _mm256_setzero_ps();
        for (int32_t d = 0; d < hd; d += 8) {
            __m256 kv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + d)));
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), kv, acc);
        }
        __m128 lo = _mm256_castps256_ps128(acc), hi = _mm256_extractf128_ps(acc, 1);
        __m128 t = _mm_add_ps(lo, hi);
        t = _mm_add_ps(t, _mm_movehl_ps(t, t));
        t = _mm_add_ss(t, _mm_movehdup_ps(t));
        s[j] = _mm_cvtss_f32(t) * scale;
    }
}

__attribute__((target("avx2,fma,f16c"))) static void mix_avx2(const float *p, const uint16_t *v,
                                                              size_t stride, const int32_t *keys,
                                                              int32_t n_keys, int32_t hd,
                                                              float *out) {
    if (hd == 64) { /* the common head size: keep the whole output row in registers */
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,
               a7 = a0;
        for (int32_t j = 0; j < n_keys; j++) {
            const uint16_t *vr = v + (size_t)keys[j] * stride;
            const __m256 pj = _mm256_set1_ps(p[j]);
#define MIX_LANE(acc, o)                                                                           \
    acc = _mm256_fmadd_ps(pj, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + (o)))), acc)
            MIX_LANE(a0, 0);
            MIX_LANE(a1, 8);
            MIX_LANE(a2, 16);
            MIX_LANE(a3, 24);
            MIX_LANE(a4, 32);
            MIX_LANE(a5, 40);
            MIX_LANE(a6, 48);
            MIX_LANE(a7, 56);
#undef MIX_LANE
        }
        _mm256_storeu_ps(out + 0, a0);
        _mm256_storeu_ps(out + 8, a1);
        _mm256_storeu_ps(out + 16, a2);
        _mm256_storeu_ps(out + 24, a3);
        _mm256_storeu_ps(out + 32, a4);
        _mm256_storeu_ps(out + 40, a5);
        _mm256_storeu_ps(out + 48, a6);
        _mm256_storeu_ps(out + 56, a7);
        return;
    }
    for (int32_t d = 0; d < hd; d += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t j = 0; j < n_keys; j++) {
            const uint16_t *vr = v + (size_t)keys[j] * stride;
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]),
                                  _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + d))), acc);
        }
        _mm256_storeu_ps(out + d, acc);
    }
}

#endif

void specd_attention_row(const float *q, const uint16_t *k, const uint16_t *v, size_t kv_stride,
                         const int32_t *keys, int32_t n_keys, int32_t head_dim, float scale,
                         float *scores, float *out, int simd) {
    float qh[512]; /* head_dim <= 512, checked at model load */
    for (int32_t d = 0; d < head_dim; d++)
        qh[d] = specd_fp16_to_fp32(specd_fp32_to_fp16(q[d]));
#if defined(__x86_64__)
    const int vec = (head_dim % 8 == 0) && simd;
#else
    const int vec = 0;
#endif
    if (vec) {
#if defined(__x86_64__)
        scores_avx2(qh, k, kv_stride, keys, n_keys, head_dim, scale, scores);
#endif
    } else {
        scores_scalar(qh, k, kv_stride, keys, n_keys, head_dim, scale, scores);
    }
    specd_softmax_f32(scores, n_keys);
    for (int32_t j = 0; j < n_keys; j++)
        scores[j] = specd_fp16_to_fp32(specd_fp32_to_fp16(scores[j]));
    if (vec) {
#if defined(__x86_64__)
        mix_avx2(scores, v, kv_stride, keys, n_keys, head_dim, out);
#endif
    } else {
        mix_scalar(scores, v, kv_stride, keys, n_keys, head_dim, out);
    }
}
