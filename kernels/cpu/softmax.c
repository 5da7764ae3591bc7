#include "kernels/cpu/ops.h"

#include "kernels/cpu/vexp.h"

#include <math.h>

/* ggml's order: exponentials in chunks of eight from index 0, each chunk summed in float as
 * ((e0+e4)+(e2+e6)) + ((e1+e5)+(e3+e7)) and added to a double; a last partial chunk is padded
 * with exp(-inf) = 0, which is what llama.cpp's masked padding of the KV cache contributes. */
static float chunk_sum(const float e[8]) {
    return ((e[0] + e[4]) + (e[2] + e[6])) + ((e[1] + e[5]) + (e[3] + e[7]));
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static double exp_chunks_avx2(float *x, int64_t n, float max) {
    double sum = 0.0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = specd_vexp8_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(max)));
        _mm256_storeu_ps(x + i, e);
        __m128 s = _mm_add_ps(_mm256_extractf128_ps(e, 1), _mm256_castps256_ps128(e));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        sum += (double)_mm_cvtss_f32(s);
    }
    if (i < n) {
        float e[8] = {0};
        for (int64_t j = i; j < n; j++)
            x[j] = e[j - i] = specd_vexp_lane(x[j] - max);
        sum += (double)chunk_sum(e);
    }
    return sum;
}

/* The largest of x[0..n) as the sequential x[i] > max ? x[i] : max finds it (a NaN is never
 * taken): vmaxps(x, m) is that comparison lane by lane. Only a tie between +0 and -0 could come
 * out with the other sign; a maximum of zero is therefore found again in order (x - max must
 * keep its sign bits). */
__attribute__((target("avx2,fma"))) static float max_avx2(const float *x, int64_t n) {
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_ps(_mm256_loadu_ps(x + i), m);
    float lanes[8], max = -INFINITY;
    _mm256_storeu_ps(lanes, m);
    for (int l = 0; l < 8; l++)
        max = lanes[l] > max ? lanes[l] : max;
    for (; i < n; i++)
        max = x[i] > max ? x[i] : max;
    if (max == 0.0f) {
        max = -INFINITY;
        for (i = 0; i < n; i++)
            max = x[i] > max ? x[i] : max;
    }
    return max;
}

__attribute__((target("avx2,fma"))) static void scale_avx2(float *x, int64_t n, float inv) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(inv)));
    for (; i < n; i++)
        x[i] *= inv;
}
#endif

static double exp_chunks(float *x, int64_t n, float max) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i += 8) {
        float e[8] = {0};
        for (int64_t j = i; j < n && j < i + 8; j++)
            x[j] = e[j - i] = specd_vexp_lane(x[j] - max);
        sum += (double)chunk_sum(e);
    }
    return sum;
}

void specd_softmax_f32(float *x, int64_t n, int simd) {
#if defined(__x86_64__)
    if (simd) {
        const float max = max_avx2(x, n);
        scale_avx2(x, n, (float)(1.0 / exp_chunks_avx2(x, n, max)));
        return;
    }
#else
    (void)simd;
#endif
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    const float inv = (float)(1.0 / exp_chunks(x, n, max));
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}
