/* exp(x) in single precision, rounded exactly as llama.cpp's x86 AVX2 build rounds it.
 *
 * Why: ggml's softmax and SiLU do not call libm's expf; they evaluate a vectorised expf (the
 * Arm optimized-routines method: 2^n by exponent arithmetic, n = round(x / ln 2); a two-constant
 * Cody-Waite reduction r = x - n ln 2; a degree-5 polynomial for e^r - 1; a rescaled path when
 * |n| > 126 so that 2^n neither overflows nor underflows early). Its results differ from expf in
 * the last bit now and then, and attention probabilities are then rounded to F16, so one bit
 * decides a rounding step and, through later layers, sometimes a top-1 token. We evaluate the
 * same operations in the same order so that our logits are llama.cpp's bit for bit.
 *
 * specd_vexp_lane is the scalar form (one vector lane: every vector operation is lane-wise IEEE,
 * fused multiply-adds included, so fmaf reproduces it); specd_vexp8_avx2 is the vector form. */
#ifndef SPECD_KERNELS_CPU_VEXP_H
#define SPECD_KERNELS_CPU_VEXP_H

#include <math.h>
#include <stdint.h>

#include "kernels/cpu/fp16.h"

#define SPECD_VEXP_SHIFT 0x1.8p23f        /* adding it rounds x / ln 2 to an integer */
#define SPECD_VEXP_INV_LN2 0x1.715476p+0f /* 1 / ln 2 */
#define SPECD_VEXP_LN2_HI 0x1.62e4p-1f    /* ln 2 = LN2_HI + LN2_LO */
#define SPECD_VEXP_LN2_LO 0x1.7f7d1cp-20f
#define SPECD_VEXP_C1 0x1.ffffecp-1f /* e^r - 1 ~ C1 r + C2 r^2 + ... + C5 r^5 */
#define SPECD_VEXP_C2 0x1.fffdb6p-2f
#define SPECD_VEXP_C3 0x1.555e66p-3f
#define SPECD_VEXP_C4 0x1.573e2ep-5f
#define SPECD_VEXP_C5 0x1.0e4020p-7f

static inline float specd_vexp_lane(float x) {
    const float z = fmaf(x, SPECD_VEXP_INV_LN2, SPECD_VEXP_SHIFT);
    const float n = z - SPECD_VEXP_SHIFT;
    const float r = fmaf(-n, SPECD_VEXP_LN2_LO, fmaf(-n, SPECD_VEXP_LN2_HI, x));
    const uint32_t e = specd_f32_bits(z) << 23; /* n in the exponent field */
    const float scale = specd_f32_from_bits(e + specd_f32_bits(1.0f)); /* 2^n */
    const float r2 = r * r;
    const float poly =
        fmaf(fmaf(fmaf(SPECD_VEXP_C5, r, SPECD_VEXP_C4), r2, fmaf(SPECD_VEXP_C3, r, SPECD_VEXP_C2)),
             r2, SPECD_VEXP_C1 * r);
    if (!(fabsf(n) > 126.0f)) return fmaf(poly, scale, scale);
    /* 2^n out of float's normal range: split it into two factors s1 * s2 */
    const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
    const float s1 = specd_f32_from_bits(g + 0x7f000000u);
    if (fabsf(n) > 192.0f) return s1 * s1; /* certain overflow to inf or underflow to 0 */
    const float s2 = specd_f32_from_bits(e - g);
    return fmaf(s2, poly, s2) * s1;
}

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2,fma"))) static inline __m256 specd_vexp8_avx2(__m256 x) {
    const __m256 shift = _mm256_set1_ps(SPECD_VEXP_SHIFT);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(SPECD_VEXP_INV_LN2), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(SPECD_VEXP_LN2_LO),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(SPECD_VEXP_LN2_HI), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 scale =
        _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));
    const __m256 abs_n = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 big = _mm256_cmp_ps(abs_n, _mm256_set1_ps(126.0f), _CMP_GT_OQ);
    const __m256 r2 = _mm256_mul_ps(r, r);
    const __m256 poly = _mm256_fmadd_ps(
        _mm256_fmadd_ps(
            _mm256_fmadd_ps(_mm256_set1_ps(SPECD_VEXP_C5), r, _mm256_set1_ps(SPECD_VEXP_C4)), r2,
            _mm256_fmadd_ps(_mm256_set1_ps(SPECD_VEXP_C3), r, _mm256_set1_ps(SPECD_VEXP_C2))),
        r2, _mm256_mul_ps(_mm256_set1_ps(SPECD_VEXP_C1), r));
    const __m256 normal = _mm256_fmadd_ps(poly, scale, scale);
    if (!_mm256_movemask_ps(big)) return normal;
    const __m256i g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
        _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_GT_OQ);
    const __m256 scaled = _mm256_mul_ps(_mm256_fmadd_ps(s2, poly, s2), s1);
    const __m256 out = _mm256_blendv_ps(normal, scaled, big);
    return _mm256_blendv_ps(out, _mm256_mul_ps(s1, s1), huge);
}
#endif

#endif
