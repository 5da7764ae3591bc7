/* AVX2/FMA kernels, compiled for that target function by function and chosen at run time (see
 * specd_dtype_traits_get), so one binary runs on any x86-64.
 *
 * Quantized dot products compute the same exact integer sums as the scalar references in vector
 * registers and then do the same float operations in the same order, so they agree with the
 * references bit for bit. F32/F16/BF16 dots sum in eight-lane float accumulators in a fixed order
 * that depends only on n: close to the double-precision reference, deterministic for each n.
 * Activation quants (Q8_0/Q8_1) must lie in [-127, 127], as from_float makes them for finite
 * input; weights may use the full int8 range. */
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/lanes_avx2.h"
#include "kernels/cpu/quant_blocks.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>
#include <math.h>

#define AVX2 __attribute__((target("avx2,fma")))

static AVX2 inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* The 32 nibbles of a Q4_0/Q4_1 block in element order: low nibbles then high nibbles. */
static AVX2 inline __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    const __m128i lo = _mm_and_si128(q, m);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), m);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

/* --- 32-element blocks ------------------------------------------------------------------- */
/* The Q4_0/Q4_1/Q8_0 dots keep eight float lanes of exact integer partial sums (four elements
 * each) and fuse one multiply-add per block, as llama.cpp's x86 kernels and the scalar references
 * in quant_32.c do; other dots sum eight blocks at a time in block order. */

static AVX2 inline __m256 f16x8_to_f32(__m128i h);

/* Int32 partial sums of x*y for one block, lane i = elements 4i..4i+3: exact for x, y in
 * [-127, 127] (no int16 saturation, since |x| <= 128 and |y| <= 127). */
static AVX2 inline __m256i partial_i8(__m256i x, __m256i y) {
    const __m256i ax = _mm256_sign_epi8(x, x);
    const __m256i sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

static AVX2 inline __m256i partial_u4(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

AVX2 void specd_q4_0_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_0 *x = vx;
    const specd_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        const __m256i xq = _mm256_sub_epi8(unpack_nibbles(x[b].qs), _mm256_set1_epi8(8));
        const __m256i p = partial_i8(xq, _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
    }
    *s = specd_lanes_sum_avx2(acc);
}

AVX2 void specd_q4_1_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_1 *x = vx;
    const specd_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float mins = 0.0f;
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        mins = fmaf(specd_fp16_to_fp32(x[b].m), specd_fp16_to_fp32(y[b].s), mins);
        const __m256i p =
            partial_u4(unpack_nibbles(x[b].qs), _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
    }
    *s = specd_lanes_sum_avx2(acc) + mins;
}

AVX2 void specd_q8_0_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q8_0 *x = vx;
    const specd_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        const __m256i p = partial_i8(_mm256_loadu_si256((const __m256i *)x[b].qs),
                                     _mm256_loadu_si256((const __m256i *)y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(p), acc);
    }
    *s = specd_lanes_sum_avx2(acc);
}

/* 32 floats to int8 with scale id, round half to even, in element order; the int32 sum of the
 * quants goes to *sum when sum is not NULL. */
static AVX2 inline void quantize_32(const float *src, float id, int8_t *dst, int *sum) {
    const __m256 mul = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + 8 * k), mul);
        q[k] =
            _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    if (sum)
        *sum =
            hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    /* the packs interleave 128-bit lanes; the permute restores element order */
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]);
    const __m256i p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    const __m256i ordered =
        _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)dst, ordered);
}

static AVX2 inline float block_amax(const float *src) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(src));
    for (int k = 1; k < 4; k++)
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * k)));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

AVX2 float specd_q8_block_avx2(const float *src, int8_t *qs, int32_t *sum) {
    const float amax = block_amax(src);
    int s;
    quantize_32(src, amax != 0.0f ? 127.0f / amax : 0.0f, qs, &s);
    if (sum) *sum = s;
    return amax;
}

AVX2 void specd_q8_0_from_float_avx2(const float *src, void *dst, int64_t n) {
    specd_block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK) {
        const float amax = block_amax(src);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        quantize_32(src, id, y[b].qs, NULL);
        y[b].d = specd_fp32_to_fp16(d);
    }
}

AVX2 void specd_q8_1_from_float_avx2(const float *src, void *dst, int64_t n) {
    specd_block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK) {
        const float amax = block_amax(src);
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int sum;
        quantize_32(src, id, y[b].qs, &sum);
        y[b].d = specd_fp32_to_fp16(d);
        y[b].s = specd_fp32_to_fp16(d * (float)sum);
    }
}

/* (float)q * d for 32 int32-convertible quants held as int8 */
static AVX2 inline void scale_store(__m256i q8, float d, float m, int add_min, float *dst) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i halves[2] = {_mm256_castsi256_si128(q8), _mm256_extracti128_si256(q8, 1)};
    for (int h = 0; h < 2; h++) {
        const __m256i lo = _mm256_cvtepi8_epi32(halves[h]);
        const __m256i hi = _mm256_cvtepi8_epi32(_mm_srli_si128(halves[h], 8));
        __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(lo), vd);
        __m256 c = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), vd);
        if (add_min) {
            a = _mm256_add_ps(a, vm);
            c = _mm256_add_ps(c, vm);
        }
        _mm256_storeu_ps(dst + 16 * h, a);
        _mm256_storeu_ps(dst + 16 * h + 8, c);
    }
}

AVX2 void specd_q4_0_to_float_avx2(const void *src, float *dst, int64_t n) {
    const specd_block_q4_0 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK) {
        const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[b].qs), _mm256_set1_epi8(8));
        scale_store(q, specd_fp16_to_fp32(x[b].d), 0.0f, 0, dst);
    }
}

AVX2 void specd_q4_1_to_float_avx2(const void *src, float *dst, int64_t n) {
    const specd_block_q4_1 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK)
        scale_store(unpack_nibbles(x[b].qs), specd_fp16_to_fp32(x[b].d), specd_fp16_to_fp32(x[b].m),
                    1, dst);
}

AVX2 void specd_q8_0_to_float_avx2(const void *src, float *dst, int64_t n) {
    const specd_block_q8_0 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK)
        scale_store(_mm256_loadu_si256((const __m256i *)x[b].qs), specd_fp16_to_fp32(x[b].d), 0.0f,
                    0, dst);
}

/* --- K-quants ------------------------------------------------------------------------------ */
/* Lane l of the result: sum over e in 0..15 with e % 8 == l of x[e] * y[e] (int8 inputs). The
 * int16 products cannot overflow: |x| <= 32 or 15, |y| <= 127. */
static AVX2 inline __m256i lane_dot_16(__m128i x, __m128i y, int x_unsigned) {
    const __m256i xw = x_unsigned ? _mm256_cvtepu8_epi16(x) : _mm256_cvtepi8_epi16(x);
    const __m256i p = _mm256_mullo_epi16(xw, _mm256_cvtepi8_epi16(y));
    return _mm256_add_epi32(_mm256_cvtepi16_epi32(_mm256_castsi256_si128(p)),
                            _mm256_cvtepi16_epi32(_mm256_extracti128_si256(p, 1)));
}

/* Same over 32 elements (both 128-bit halves) */
static AVX2 inline __m256i lane_dot_32(__m256i x, __m256i y, int x_unsigned) {
    return _mm256_add_epi32(
        lane_dot_16(_mm256_castsi256_si128(x), _mm256_castsi256_si128(y), x_unsigned),
        lane_dot_16(_mm256_extracti128_si256(x, 1), _mm256_extracti128_si256(y, 1), x_unsigned));
}

static AVX2 inline float finish_lanes(__m256 sums, float sum) {
    float lanes[8];
    _mm256_storeu_ps(lanes, sums);
    for (int l = 0; l < 8; l++)
        sum += lanes[l];
    return sum;
}

AVX2 void specd_q4_k_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_k *x = vx;
    const specd_block_q8_k *y = vy;
    __m256 sums = _mm256_setzero_ps();
    float sum = 0.0f;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++)
            specd_q4_k_scale_min(j, x[b].scales, &sc[j], &mn[j]);
        __m256i acc = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            const __m256i q4 = _mm256_loadu_si256((const __m256i *)(x[b].qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q4, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q4, 4), m4);
            const __m256i y0 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * j));
            const __m256i y1 = _mm256_loadu_si256((const __m256i *)(y[b].qs + 64 * j + 32));
            acc = _mm256_add_epi32(
                acc, _mm256_mullo_epi32(lane_dot_32(lo, y0, 1), _mm256_set1_epi32(sc[2 * j])));
            acc = _mm256_add_epi32(
                acc, _mm256_mullo_epi32(lane_dot_32(hi, y1, 1), _mm256_set1_epi32(sc[2 * j + 1])));
        }
        int summ = 0;
        for (int j = 0; j < 16; j++)
            summ += y[b].bsums[j] * mn[j / 2];
        const float d = specd_fp16_to_fp32(x[b].d) * y[b].d;
        sums = _mm256_add_ps(sums, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(acc)));
        const float dmin = specd_fp16_to_fp32(x[b].dmin) * y[b].d;
        sum -= dmin * (float)summ;
    }
    *s = finish_lanes(sums, sum);
}

AVX2 void specd_q6_k_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q6_k *x = vx;
    const specd_block_q8_k *y = vy;
    __m256 sums = _mm256_setzero_ps();
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), off = _mm256_set1_epi8(32);
    for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
        __m256i acc = _mm256_setzero_si256();
        for (int g = 0; g < 2; g++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * g));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x[b].ql + 64 * g + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(x[b].qh + 32 * g));
            /* the four 32-element runs of this group of 128, in element order */
            __m256i q[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(ql1, m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
            for (int r = 0; r < 4; r++) {
                const __m256i a = _mm256_sub_epi8(q[r], off);
                const int e0 = 128 * g + 32 * r; /* first element of this run */
                const __m256i yq = _mm256_loadu_si256((const __m256i *)(y[b].qs + e0));
                const __m256i lo =
                    lane_dot_16(_mm256_castsi256_si128(a), _mm256_castsi256_si128(yq), 0);
                const __m256i hi =
                    lane_dot_16(_mm256_extracti128_si256(a, 1), _mm256_extracti128_si256(yq, 1), 0);
                acc = _mm256_add_epi32(
                    acc, _mm256_mullo_epi32(lo, _mm256_set1_epi32(x[b].scales[e0 / 16])));
                acc = _mm256_add_epi32(
                    acc, _mm256_mullo_epi32(hi, _mm256_set1_epi32(x[b].scales[e0 / 16 + 1])));
            }
        }
        const float d = specd_fp16_to_fp32(x[b].d) * y[b].d;
        sums = _mm256_add_ps(sums, _mm256_mul_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(acc)));
    }
    *s = finish_lanes(sums, 0.0f);
}

/* --- float rows ---------------------------------------------------------------------------- */
/* Sum of products with four 8-lane FMA accumulators over 32-element steps, then one over 8-element
 * steps, then the tail in float: the same order for every call with the same n. */
#define FLOAT_DOT(load_x, load_y, scalar_x, scalar_y)                                              \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),                \
                     _mm256_setzero_ps()};                                                         \
    int64_t i = 0;                                                                                 \
    for (; i + 32 <= n; i += 32)                                                                   \
        for (int k = 0; k < 4; k++)                                                                \
            acc[k] = _mm256_fmadd_ps(load_x(i + 8 * k), load_y(i + 8 * k), acc[k]);                \
    for (; i + 8 <= n; i += 8)                                                                     \
        acc[0] = _mm256_fmadd_ps(load_x(i), load_y(i), acc[0]);                                    \
    float sum =                                                                                    \
        specd_lanes_sum_avx2(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));     \
    for (; i < n; i++)                                                                             \
        sum += scalar_x(i) * scalar_y(i);                                                          \
    *s = sum;

AVX2 void specd_f32_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
#define LX(i) _mm256_loadu_ps(x + (i))
#define LY(i) _mm256_loadu_ps(y + (i))
#define SX(i) x[i]
#define SY(i) y[i]
    FLOAT_DOT(LX, LY, SX, SY)
#undef LX
#undef LY
#undef SX
#undef SY
}

/* 8 halves to floats, bit-exact without F16C: the exponent/mantissa bits shifted into place and
 * scaled by 2^112 rebias normals and subnormals alike; infinities and NaNs are patched. */
static AVX2 inline __m256 f16x8_to_f32(__m128i h16) {
    const __m256i h = _mm256_cvtepu16_epi32(h16);
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x8000)), 16);
    const __m256i em = _mm256_slli_epi32(_mm256_and_si256(h, _mm256_set1_epi32(0x7fff)), 13);
    const __m256 scaled =
        _mm256_mul_ps(_mm256_castsi256_ps(em), _mm256_castsi256_ps(_mm256_set1_epi32(0x77800000)));
    const __m256i special = _mm256_cmpgt_epi32(em, _mm256_set1_epi32(0x0f7fffff));
    const __m256i infnan = _mm256_or_si256(em, _mm256_set1_epi32(0x7f800000));
    const __m256i bits = _mm256_blendv_epi8(_mm256_castps_si256(scaled), infnan, special);
    return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}

static AVX2 inline __m256 load_f16(const uint16_t *p) {
    return f16x8_to_f32(_mm_loadu_si128((const __m128i *)p));
}

static AVX2 inline __m256 load_bf16(const uint16_t *p) {
    const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(h, 16));
}

AVX2 void specd_f16_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
#define LX(i) load_f16(x + (i))
#define LY(i) load_f16(y + (i))
#define SX(i) specd_fp16_to_fp32(x[i])
#define SY(i) specd_fp16_to_fp32(y[i])
    FLOAT_DOT(LX, LY, SX, SY)
#undef LX
#undef LY
#undef SX
#undef SY
}

AVX2 void specd_bf16_vec_dot_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
#define LX(i) load_bf16(x + (i))
#define LY(i) load_bf16(y + (i))
#define SX(i) specd_bf16_to_fp32(x[i])
#define SY(i) specd_bf16_to_fp32(y[i])
    FLOAT_DOT(LX, LY, SX, SY)
#undef LX
#undef LY
#undef SX
#undef SY
}

#else /* not x86: never selected (specd_cpu_has_avx2 is 0); the references keep the links whole */

void specd_f32_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_f32_vec_dot(n, s, x, y);
}
void specd_f16_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_f16_vec_dot(n, s, x, y);
}
void specd_bf16_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_bf16_vec_dot(n, s, x, y);
}
void specd_q4_0_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_q4_0_vec_dot(n, s, x, y);
}
void specd_q4_1_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_q4_1_vec_dot(n, s, x, y);
}
void specd_q8_0_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_q8_0_vec_dot(n, s, x, y);
}
void specd_q4_k_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_q4_k_vec_dot(n, s, x, y);
}
void specd_q6_k_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y) {
    specd_q6_k_vec_dot(n, s, x, y);
}
void specd_q8_0_from_float_avx2(const float *src, void *dst, int64_t n) {
    specd_q8_0_from_float(src, dst, n);
}
void specd_q8_1_from_float_avx2(const float *src, void *dst, int64_t n) {
    specd_q8_1_from_float(src, dst, n);
}
float specd_q8_block_avx2(const float *src, int8_t *qs, int32_t *sum) {
    return specd_q8_block(src, qs, sum);
}
void specd_q4_0_to_float_avx2(const void *src, float *dst, int64_t n) {
    specd_q4_0_to_float(src, dst, n);
}
void specd_q4_1_to_float_avx2(const void *src, float *dst, int64_t n) {
    specd_q4_1_to_float(src, dst, n);
}
void specd_q8_0_to_float_avx2(const void *src, float *dst, int64_t n) {
    specd_q8_0_to_float(src, dst, n);
}

#endif
