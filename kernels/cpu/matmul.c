#include "kernels/cpu/ops.h"

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/lanes_avx2.h"
#include "kernels/cpu/matmul_avx512.h"
#include "kernels/cpu/matmul_kquant.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* Weight rows per tile: 16 rows of 576..1536 Q4_1 columns stay in L1/L2 while every activation
 * row passes over them. */
enum { TILE_ROWS = 16 };

void specd_quantize_rows(const specd_dtype_traits *vdt_traits, uint32_t vdt, const float *x,
                         int64_t ld_x, int64_t n_rows, int64_t n, void *dst) {
    const size_t rb = specd_dtype_row_bytes(vdt, n);
    for (int64_t r = 0; r < n_rows; r++) {
        char *d = (char *)dst + (size_t)r * rb;
        if (vdt == SPECD_DTYPE_F32)
            memcpy(d, x + r * ld_x, (size_t)n * sizeof(float));
        else
            vdt_traits->from_float(x + r * ld_x, d, n);
    }
}

#if defined(__x86_64__)
/* Tiles of (weight row, activation row) pairs, one 8-lane float accumulator per pair, so that each
 * pair gets exactly the operations of its vec_dot (specd_q4_1_vec_dot / specd_q8_0_vec_dot in
 * kernels/cpu/quant_32.c, which are llama.cpp's x86 order): per block, four-element integer
 * partial sums in eight lanes, lane += (d_w * d_x) * partial by one fused multiply-add, and for
 * Q4_1 min_w * s_x into a scalar by another; at the end the lanes are summed as
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) and the scalar added. A tile only shares loads and scale
 * conversions between its pairs, so the result is independent of the tile shape and batch. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* the first four bytes of a block (its fp16 scale fields), in the low lane */
static AVX2 inline __m128i head32(const void *block) {
    int32_t v;
    memcpy(&v, block, sizeof v);
    return _mm_cvtsi32_si128(v);
}

static AVX2 inline __m128 half4(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    return _mm_cvtph_ps(_mm_setr_epi16((short)a, (short)b, (short)c, (short)d, 0, 0, 0, 0));
}

static AVX2 inline __m256i nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    const __m128i m = _mm_set1_epi8(0x0f);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(q, m)),
                                   _mm_and_si128(_mm_srli_epi16(q, 4), m), 1);
}

/* four-element partial sums as floats: unsigned nibbles x signed int8 (Q4_1) */
static AVX2 inline __m256 partial_u4(__m256i x, __m256i y) {
    return _mm256_cvtepi32_ps(
        _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1)));
}

/* signed x signed (Q8_0), given |x| and y carrying x's sign */
static AVX2 inline __m256 partial_s8(__m256i abs_x, __m256i y_signed) {
    return _mm256_cvtepi32_ps(
        _mm256_madd_epi16(_mm256_maddubs_epi16(abs_x, y_signed), _mm256_set1_epi16(1)));
}

/* Two adjacent weight rows against one activation row (a decode). Rows are walked in memory
 * order, as llama.cpp's per-row vec_dot walks them, so the hardware prefetcher sees one stream
 * (tiles of eight interleaved rows ran 1.6x slower: short strided streams miss the cache). */
static AVX2 inline float half1(uint16_t h) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
}

static AVX2 void q4_1_2x1(int64_t nb, const specd_block_q4_1 *x0, const specd_block_q4_1 *x1,
                          const specd_block_q8_1 *y, float out[2]) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float mins0 = 0.0f, mins1 = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const __m128 ys = _mm_cvtph_ps(head32(&y[b])); /* d s */
        const __m128 xs = _mm_cvtph_ps(_mm_unpacklo_epi32(head32(&x0[b]), head32(&x1[b])));
        float f[4], g[4];
        _mm_storeu_ps(f, xs);
        _mm_storeu_ps(g, ys);
        mins0 = fmaf(f[1], g[1], mins0);
        mins1 = fmaf(f[3], g[1], mins1);
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f[0] * g[0]), partial_u4(nibbles(x0[b].qs), yq), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f[2] * g[0]), partial_u4(nibbles(x1[b].qs), yq), acc1);
    }
    out[0] = specd_lanes_sum_avx2(acc0) + mins0;
    out[1] = specd_lanes_sum_avx2(acc1) + mins1;
}

static AVX2 void q8_0_2x1(int64_t nb, const specd_block_q8_0 *x0, const specd_block_q8_0 *x1,
                          const specd_block_q8_0 *y, float out[2]) {
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const float yd = half1(y[b].d);
        const __m256i yq = _mm256_loadu_si256((const __m256i *)y[b].qs);
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)x0[b].qs);
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)x1[b].qs);
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(half1(x0[b].d) * yd),
                               partial_s8(_mm256_sign_epi8(w0, w0), _mm256_sign_epi8(yq, w0)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(half1(x1[b].d) * yd),
                               partial_s8(_mm256_sign_epi8(w1, w1), _mm256_sign_epi8(yq, w1)), acc1);
    }
    out[0] = specd_lanes_sum_avx2(acc0);
    out[1] = specd_lanes_sum_avx2(acc1);
}

/* two weight rows against four activation rows (an extend); the eight accumulators are named
 * so that they stay in registers */
static AVX2 void q4_1_2x4(int64_t nb, const specd_block_q4_1 *x0, const specd_block_q4_1 *x1,
                          const specd_block_q8_1 *const y[4], float out0[4], float out1[4]) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    __m256 mins = a00; /* lanes: row 0 x act 0..3, row 1 x act 0..3 */
    const specd_block_q8_1 *y0 = y[0], *y1 = y[1], *y2 = y[2], *y3 = y[3];
    for (int64_t b = 0; b < nb; b++) {
        /* the scales: d and m (or s) are the first four bytes of each block */
        const __m128i y01 = _mm_unpacklo_epi32(head32(&y0[b]), head32(&y1[b]));
        const __m128i y23 = _mm_unpacklo_epi32(head32(&y2[b]), head32(&y3[b]));
        const __m256 yds = _mm256_cvtph_ps(_mm_unpacklo_epi64(y01, y23)); /* d0 s0 d1 s1 .. */
        const __m256 xdm = _mm256_castps128_ps256(
            _mm_cvtph_ps(_mm_unpacklo_epi32(head32(&x0[b]), head32(&x1[b])))); /* d0 m0 d1 m1 */
        const __m256 dd = _mm256_mul_ps(
            _mm256_permutevar8x32_ps(xdm, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2)),
            _mm256_permutevar8x32_ps(yds, _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
        mins = _mm256_fmadd_ps(
            _mm256_permutevar8x32_ps(xdm, _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3)),
            _mm256_permutevar8x32_ps(yds, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7)), mins);
        const __m256i w0 = nibbles(x0[b].qs), w1 = nibbles(x1[b].qs);
#define Q41_STEP(yv, i, acc0, acc1)                                                                \
    do {                                                                                           \
        const __m256i yq = _mm256_loadu_si256((const __m256i *)(yv)[b].qs);                        \
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(i)),                \
                               partial_u4(w0, yq), acc0);                                          \
        acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(4 + (i))),          \
                               partial_u4(w1, yq), acc1);                                          \
    } while (0)
        Q41_STEP(y0, 0, a00, a10);
        Q41_STEP(y1, 1, a01, a11);
        Q41_STEP(y2, 2, a02, a12);
        Q41_STEP(y3, 3, a03, a13);
#undef Q41_STEP
    }
    float m[8];
    _mm256_storeu_ps(m, mins);
    out0[0] = specd_lanes_sum_avx2(a00) + m[0];
    out0[1] = specd_lanes_sum_avx2(a01) + m[1];
    out0[2] = specd_lanes_sum_avx2(a02) + m[2];
    out0[3] = specd_lanes_sum_avx2(a03) + m[3];
    out1[0] = specd_lanes_sum_avx2(a10) + m[4];
    out1[1] = specd_lanes_sum_avx2(a11) + m[5];
    out1[2] = specd_lanes_sum_avx2(a12) + m[6];
    out1[3] = specd_lanes_sum_avx2(a13) + m[7];
}

static AVX2 void q8_0_2x4(int64_t nb, const specd_block_q8_0 *x0, const specd_block_q8_0 *x1,
                          const specd_block_q8_0 *const y[4], float out0[4], float out1[4]) {
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a03 = a00;
    __m256 a10 = a00, a11 = a00, a12 = a00, a13 = a00;
    const specd_block_q8_0 *y0 = y[0], *y1 = y[1], *y2 = y[2], *y3 = y[3];
    for (int64_t b = 0; b < nb; b++) {
        const __m128 yd = half4(y0[b].d, y1[b].d, y2[b].d, y3[b].d);
        const __m128 xd = half4(x0[b].d, x1[b].d, 0, 0);
        const __m256 dd = _mm256_set_m128(_mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x55), yd),
                                          _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x00), yd));
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)x0[b].qs);
        const __m256i w1 = _mm256_loadu_si256((const __m256i *)x1[b].qs);
        const __m256i abs0 = _mm256_sign_epi8(w0, w0), abs1 = _mm256_sign_epi8(w1, w1);
#define Q80_STEP(yv, i, acc0, acc1)                                                                \
    do {                                                                                           \
        const __m256i yq = _mm256_loadu_si256((const __m256i *)(yv)[b].qs);                        \
        acc0 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(i)),                \
                               partial_s8(abs0, _mm256_sign_epi8(yq, w0)), acc0);                  \
        acc1 = _mm256_fmadd_ps(_mm256_permutevar8x32_ps(dd, _mm256_set1_epi32(4 + (i))),          \
                               partial_s8(abs1, _mm256_sign_epi8(yq, w1)), acc1);                  \
    } while (0)
        Q80_STEP(y0, 0, a00, a10);
        Q80_STEP(y1, 1, a01, a11);
        Q80_STEP(y2, 2, a02, a12);
        Q80_STEP(y3, 3, a03, a13);
#undef Q80_STEP
    }
    out0[0] = specd_lanes_sum_avx2(a00);
    out0[1] = specd_lanes_sum_avx2(a01);
    out0[2] = specd_lanes_sum_avx2(a02);
    out0[3] = specd_lanes_sum_avx2(a03);
    out1[0] = specd_lanes_sum_avx2(a10);
    out1[1] = specd_lanes_sum_avx2(a11);
    out1[2] = specd_lanes_sum_avx2(a12);
    out1[3] = specd_lanes_sum_avx2(a13);
}

/* Weight rows [t0, t1) against one activation row xr, into yr[t0..t1). */
static void rows_for_one(const specd_dtype_traits *w_traits, int q41, const void *w, int64_t n_in,
                         size_t wrb, int64_t t0, int64_t t1, const void *xr, float *yr) {
    const int64_t nb = n_in / SPECD_QK;
    int64_t o = t0;
    for (; o + 2 <= t1; o += 2) {
        const char *w0 = (const char *)w + (size_t)o * wrb, *w1 = w0 + wrb;
        if (q41)
            q4_1_2x1(nb, (const specd_block_q4_1 *)w0, (const specd_block_q4_1 *)w1, xr, yr + o);
        else
            q8_0_2x1(nb, (const specd_block_q8_0 *)w0, (const specd_block_q8_0 *)w1, xr, yr + o);
    }
    for (; o < t1; o++)
        w_traits->vec_dot(n_in, &yr[o], (const char *)w + (size_t)o * wrb, xr);
}

/* The block [t0, t1) x [0, n_rows) through the tiles above; pairs outside the tiles go through
 * the traits' vec_dot, which computes the same bits. */
static void matmul_tiled(const specd_dtype_traits *w_traits, uint32_t w_type, const void *w,
                         int64_t n_in, int64_t t0, int64_t t1, const void *xq,
                         size_t xq_row_bytes, int64_t n_rows, float *y, int64_t ld_y) {
    const int q41 = w_type == SPECD_DTYPE_Q4_1;
    const int64_t nb = n_in / SPECD_QK;
    const size_t wrb = (size_t)nb * (q41 ? sizeof(specd_block_q4_1) : sizeof(specd_block_q8_0));
    for (int64_t r0 = 0; r0 < n_rows; r0 += 4) {
        const int64_t live = n_rows - r0 < 4 ? n_rows - r0 : 4;
        if (live <= 2) { /* one or two rows left: row by row, as a decode (cheaper than padding) */
            for (int64_t r = r0; r < n_rows; r++)
                rows_for_one(w_traits, q41, w, n_in, wrb, t0, t1,
                             (const char *)xq + (size_t)r * xq_row_bytes, y + r * ld_y);
            break;
        }
        /* three rows left: a group of four whose last row repeats (the copy is not stored) */
        const void *yg[4];
        for (int i = 0; i < 4; i++)
            yg[i] = (const char *)xq + (size_t)(r0 + (i < live ? i : live - 1)) * xq_row_bytes;
        int64_t o = t0;
        for (; o + 2 <= t1; o += 2) {
            float a[4], b[4];
            const char *w0 = (const char *)w + (size_t)o * wrb, *w1 = w0 + wrb;
            if (q41)
                q4_1_2x4(nb, (const specd_block_q4_1 *)w0, (const specd_block_q4_1 *)w1,
                         (const specd_block_q8_1 *const *)yg, a, b);
            else
                q8_0_2x4(nb, (const specd_block_q8_0 *)w0, (const specd_block_q8_0 *)w1,
                         (const specd_block_q8_0 *const *)yg, a, b);
            for (int i = 0; i < live; i++) {
                y[(r0 + i) * ld_y + o] = a[i];
                y[(r0 + i) * ld_y + o + 1] = b[i];
            }
        }
        for (; o < t1; o++)
            for (int i = 0; i < live; i++)
                w_traits->vec_dot(n_in, &y[(r0 + i) * ld_y + o], (const char *)w + (size_t)o * wrb,
                                  yg[i]);
    }
}
#endif

void specd_matmul_rows(const specd_dtype_traits *w_traits, uint32_t w_type, const void *w,
                       int64_t n_in, int64_t o_begin, int64_t o_end, const void *xq,
                       size_t xq_row_bytes, int64_t n_rows, float *y, int64_t ld_y, int simd) {
    const size_t wrb = specd_dtype_row_bytes(w_type, n_in);
    if (specd_matmul_rows_kquant(simd, w_type, w, n_in, o_begin, o_end, xq, xq_row_bytes, n_rows,
                                 y, ld_y))
        return;
    if (simd >= SPECD_CPU_AVX512 && specd_matmul_rows_avx512(w_type, w, n_in, o_begin, o_end, xq,
                                                             xq_row_bytes, n_rows, y, ld_y))
        return;
#if defined(__x86_64__)
    const int tiled = simd && (w_type == SPECD_DTYPE_Q4_1 || w_type == SPECD_DTYPE_Q8_0) &&
                      n_in % SPECD_QK == 0;
#else
    const int tiled = 0;
    (void)simd;
#endif
    for (int64_t t0 = o_begin; t0 < o_end; t0 += TILE_ROWS) {
        const int64_t t1 = t0 + TILE_ROWS < o_end ? t0 + TILE_ROWS : o_end;
#if defined(__x86_64__)
        if (tiled) {
            matmul_tiled(w_traits, w_type, w, n_in, t0, t1, xq, xq_row_bytes, n_rows, y, ld_y);
            continue;
        }
#endif
        for (int64_t r = 0; r < n_rows; r++) {
            const void *xr = (const char *)xq + (size_t)r * xq_row_bytes;
            float *yr = y + r * ld_y;
            for (int64_t o = t0; o < t1; o++)
                w_traits->vec_dot(n_in, &yr[o], (const char *)w + (size_t)o * wrb, xr);
        }
    }
}
