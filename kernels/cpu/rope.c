#include "kernels/cpu/ops.h"

#include <math.h>

/* theta advances by repeated multiplication in float, as ggml_rope_cache_init does, so our angles
 * round exactly as llama.cpp's. Which products are fused into multiply-adds follows what the
 * compiler made of ggml's rope in llama.cpp's x86 build (its C++ is contracted,
 * -ffp-contract=fast), checked bit for bit against its tensors:
 *   x0' = fma(x0, cos, -(x1 sin)),   x1' = fma(x0, sin, x1 cos). */
void specd_rope_angles(int32_t pos, int32_t n_rot, float freq_base, float *cos_out,
                       float *sin_out) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        cos_out[i] = cosf(theta);
        sin_out[i] = sinf(theta);
        theta *= theta_scale;
    }
}

#if defined(__x86_64__)
#include <immintrin.h>

/* The same two fused multiply-adds per pair, eight lanes at a time (a fused multiply-add rounds
 * once whether libm's fmaf or vfmadd computes it, so the bits are the scalar loop's). Returns the
 * pairs done: whole groups of eight (NeoX: pairs i, i + n/2) or four (adjacent pairs). */
__attribute__((target("avx2,fma"))) static int32_t
rope_head_avx2(float *p, int32_t n_pairs, const float *cs, const float *sn, int neox) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    int32_t i = 0;
    if (neox) {
        for (; i + 8 <= n_pairs; i += 8) {
            const __m256 x0 = _mm256_loadu_ps(p + i), x1 = _mm256_loadu_ps(p + i + n_pairs);
            const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
            const __m256 neg = _mm256_xor_ps(_mm256_mul_ps(x1, s), sign); /* -(x1 s) */
            _mm256_storeu_ps(p + i, _mm256_fmadd_ps(x0, c, neg));
            _mm256_storeu_ps(p + i + n_pairs, _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c)));
        }
        return i;
    }
    const __m256i dup = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    for (; i + 4 <= n_pairs; i += 4) {
        const __m256 v = _mm256_loadu_ps(p + 2 * i);
        const __m256 x0 = _mm256_moveldup_ps(v), x1 = _mm256_movehdup_ps(v);
        const __m256 c =
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cs + i)), dup);
        const __m256 s =
            _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sn + i)), dup);
        const __m256 neg = _mm256_xor_ps(_mm256_mul_ps(x1, s), sign); /* -(x1 s) */
        const __m256 even = _mm256_fmadd_ps(x0, c, neg);
        const __m256 odd = _mm256_fmadd_ps(x0, s, _mm256_mul_ps(x1, c));
        _mm256_storeu_ps(p + 2 * i, _mm256_blend_ps(even, odd, 0xAA));
    }
    return i;
}
#endif

void specd_rope_f32_simd(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot,
                         const float *cs, const float *sn, int neox, int simd) {
    const int32_t n_pairs = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * (size_t)head_dim;
        int32_t i = 0;
#if defined(__x86_64__)
        if (simd) i = rope_head_avx2(p, n_pairs, cs, sn, neox);
#endif
        for (; i < n_pairs; i++) {
            const int32_t a = neox ? i : 2 * i;
            const int32_t b = neox ? i + n_pairs : 2 * i + 1;
            const float x0 = p[a], x1 = p[b];
            p[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
            p[b] = fmaf(x0, sn[i], x1 * cs[i]);
        }
    }
}

void specd_rope_f32(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot, const float *cs,
                    const float *sn, int neox) {
    specd_rope_f32_simd(x, n_heads, head_dim, n_rot, cs, sn, neox, 0);
}
