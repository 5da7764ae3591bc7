/* The lane reduction of llama.cpp's x86 dot products (hsum_float_8), shared by the quantized
 * vec_dots (dtype_avx2.c) and the matmul tiles (matmul.c) so that both round alike:
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
#ifndef SPECD_KERNELS_CPU_LANES_AVX2_H
#define SPECD_KERNELS_CPU_LANES_AVX2_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

__attribute__((target("avx2"))) static inline float specd_lanes_sum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

#endif
