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
    float max = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        max = x[i] > max ? x[i] : max;
    double sum;
#if defined(__x86_64__)
    sum = simd ? exp_chunks_avx2(x, n, max) : exp_chunks(x, n, max);
#else
    (void)simd;
    sum = exp_chunks(x, n, max);
#endif
    const float inv = (float)(1.0 / sum);
    for (int64_t i = 0; i < n; i++)
        x[i] *= inv;
}
