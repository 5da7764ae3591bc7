#include "kernels/cpu/ops.h"

#include "kernels/cpu/vexp.h"

#include <math.h>

/* silu(g) = g / (1 + exp(0 - g)) with the vectorised exp for whole groups of eight and libm's
 * expf for a tail, as ggml_vec_swiglu_f32 does (kernels/cpu/vexp.h says why it matters). */
#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) static int64_t swiglu8_avx2(const float *g, const float *u,
                                                                float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = specd_vexp8_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x));
        const __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
        _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(u + i)));
    }
    return i;
}
#endif

void specd_swiglu_f32(const float *g, const float *u, float *y, int64_t n, int simd) {
    int64_t i = 0;
#if defined(__x86_64__)
    if (simd) i = swiglu8_avx2(g, u, y, n);
#else
    (void)simd;
#endif
    const int64_t n_vec = n - n % 8;
    for (; i < n_vec; i++) {
        const float s = g[i] / (1.0f + specd_vexp_lane(0.0f - g[i]));
        y[i] = s * u[i];
    }
    for (; i < n; i++) {
        const float s = g[i] / (1.0f + expf(-g[i]));
        y[i] = s * u[i];
    }
}
