#include "kernels/cpu/ops.h"

#include "kernels/cpu/quant_blocks.h"

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
/* Four dot products at once, one per SSE lane: lane i is weight row x[i] against activation row
 * y[i]. Lanes can share rows: 4 weight rows x 1 activation row for a decode, 1 x 4 in an extend.
 *
 * Batch invariance and agreement with the library's vec_dot: each lane performs exactly the float
 * operations of specd_q4_1_vec_dot / specd_q8_0_vec_dot (kernels/cpu/quant_32.c) in the same
 * order: the block's integer sum is exact whatever instructions produce it, the fp16 scales convert
 * exactly, and per block  sum = sum + ((d_x*d_y) * sumi + m_x*s_y)  (Q4_1) or
 * sum = sum + sumi * (d_x*d_y)  (Q8_0) in IEEE single precision without contraction. So a lane's
 * result is bitwise the scalar vec_dot's, independent of its neighbours and of the tile shape. */
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* [hsum(p0), hsum(p1), hsum(p2), hsum(p3)], exact int32 sums. */
static AVX2 inline __m128i hsum4_i32(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
    const __m256i a = _mm256_hadd_epi32(p0, p1), b = _mm256_hadd_epi32(p2, p3);
    const __m256i c = _mm256_hadd_epi32(a, b);
    return _mm_add_epi32(_mm256_castsi256_si128(c), _mm256_extracti128_si256(c, 1));
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

static AVX2 inline __m256i dot_u4_s8(__m256i x, const int8_t *yq) {
    const __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

static AVX2 inline __m256i dot_s8_s8(const int8_t *xq, const int8_t *yq) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    const __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    const __m256i ax = _mm256_sign_epi8(x, x), sy = _mm256_sign_epi8(y, x);
    return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
}

static AVX2 void q4_1_x4(int64_t nb, const specd_block_q4_1 *const x[4],
                         const specd_block_q8_1 *const y[4], float out[4]) {
    __m128 sum = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i p[4];
        for (int i = 0; i < 4; i++)
            p[i] = dot_u4_s8(nibbles(x[i][b].qs), y[i][b].qs);
        const __m128 sumi = _mm_cvtepi32_ps(hsum4_i32(p[0], p[1], p[2], p[3]));
        const __m128 dd = _mm_mul_ps(half4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                     half4(y[0][b].d, y[1][b].d, y[2][b].d, y[3][b].d));
        const __m128 ms = _mm_mul_ps(half4(x[0][b].m, x[1][b].m, x[2][b].m, x[3][b].m),
                                     half4(y[0][b].s, y[1][b].s, y[2][b].s, y[3][b].s));
        sum = _mm_add_ps(sum, _mm_add_ps(_mm_mul_ps(dd, sumi), ms));
    }
    _mm_storeu_ps(out, sum);
}

static AVX2 void q8_0_x4(int64_t nb, const specd_block_q8_0 *const x[4],
                         const specd_block_q8_0 *const y[4], float out[4]) {
    __m128 sum = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i p[4];
        for (int i = 0; i < 4; i++)
            p[i] = dot_s8_s8(x[i][b].qs, y[i][b].qs);
        const __m128 sumi = _mm_cvtepi32_ps(hsum4_i32(p[0], p[1], p[2], p[3]));
        const __m128 dd = _mm_mul_ps(half4(x[0][b].d, x[1][b].d, x[2][b].d, x[3][b].d),
                                     half4(y[0][b].d, y[1][b].d, y[2][b].d, y[3][b].d));
        sum = _mm_add_ps(sum, _mm_mul_ps(sumi, dd));
    }
    _mm_storeu_ps(out, sum);
}

/* Two weight rows against four activation rows (8 lanes in two SSE sums): each weight block is
 * unpacked once and each activation block loaded once for all its uses. Per lane the float
 * operations are those of q4_1_x4 (and so of the scalar vec_dot). */
static AVX2 void q4_1_2x4(int64_t nb, const specd_block_q4_1 *x0, const specd_block_q4_1 *x1,
                          const specd_block_q8_1 *const y[4], float out0[4], float out1[4]) {
    __m128 sum0 = _mm_setzero_ps(), sum1 = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i a0 = nibbles(x0[b].qs), a1 = nibbles(x1[b].qs);
        __m256i p0[4], p1[4];
        for (int i = 0; i < 4; i++) {
            const __m256i yq = _mm256_loadu_si256((const __m256i *)y[i][b].qs);
            p0[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, yq), _mm256_set1_epi16(1));
            p1[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, yq), _mm256_set1_epi16(1));
        }
        const __m128 yd = half4(y[0][b].d, y[1][b].d, y[2][b].d, y[3][b].d);
        const __m128 ys = half4(y[0][b].s, y[1][b].s, y[2][b].s, y[3][b].s);
        const __m128 xd = half4(x0[b].d, x0[b].m, x1[b].d, x1[b].m);
        const __m128 s0 = _mm_cvtepi32_ps(hsum4_i32(p0[0], p0[1], p0[2], p0[3]));
        const __m128 s1 = _mm_cvtepi32_ps(hsum4_i32(p1[0], p1[1], p1[2], p1[3]));
        const __m128 dd0 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x00), yd);
        const __m128 ms0 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x55), ys);
        const __m128 dd1 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0xaa), yd);
        const __m128 ms1 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0xff), ys);
        sum0 = _mm_add_ps(sum0, _mm_add_ps(_mm_mul_ps(dd0, s0), ms0));
        sum1 = _mm_add_ps(sum1, _mm_add_ps(_mm_mul_ps(dd1, s1), ms1));
    }
    _mm_storeu_ps(out0, sum0);
    _mm_storeu_ps(out1, sum1);
}

/* The same two-by-four shape for Q8_0 weights (the tied output head). Per lane the float
 * operations are those of q8_0_x4. */
static AVX2 void q8_0_2x4(int64_t nb, const specd_block_q8_0 *x0, const specd_block_q8_0 *x1,
                          const specd_block_q8_0 *const y[4], float out0[4], float out1[4]) {
    __m128 sum0 = _mm_setzero_ps(), sum1 = _mm_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i a0 = _mm256_loadu_si256((const __m256i *)x0[b].qs);
        const __m256i a1 = _mm256_loadu_si256((const __m256i *)x1[b].qs);
        const __m256i abs0 = _mm256_sign_epi8(a0, a0), abs1 = _mm256_sign_epi8(a1, a1);
        __m256i p0[4], p1[4];
        for (int i = 0; i < 4; i++) {
            const __m256i yq = _mm256_loadu_si256((const __m256i *)y[i][b].qs);
            p0[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(abs0, _mm256_sign_epi8(yq, a0)),
                                      _mm256_set1_epi16(1));
            p1[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(abs1, _mm256_sign_epi8(yq, a1)),
                                      _mm256_set1_epi16(1));
        }
        const __m128 yd = half4(y[0][b].d, y[1][b].d, y[2][b].d, y[3][b].d);
        const __m128 xd = half4(x0[b].d, x1[b].d, 0, 0);
        const __m128 dd0 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x00), yd);
        const __m128 dd1 = _mm_mul_ps(_mm_shuffle_ps(xd, xd, 0x55), yd);
        sum0 = _mm_add_ps(sum0,
                          _mm_mul_ps(_mm_cvtepi32_ps(hsum4_i32(p0[0], p0[1], p0[2], p0[3])), dd0));
        sum1 = _mm_add_ps(sum1,
                          _mm_mul_ps(_mm_cvtepi32_ps(hsum4_i32(p1[0], p1[1], p1[2], p1[3])), dd1));
    }
    _mm_storeu_ps(out0, sum0);
    _mm_storeu_ps(out1, sum1);
}

/* Eight weight rows against one activation row (a decode), in 256-bit lanes: the activation block
 * is loaded once, its scales broadcast, the eight integer sums reduced by one hadd tree. Per lane
 * the float operations are those of q4_1_x4 (and the scalar vec_dot). */
static AVX2 void q4_1_8x1(int64_t nb, const specd_block_q4_1 *const x[8],
                          const specd_block_q8_1 *yv, float out[8]) {
    __m256 sum = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const __m256i yq = _mm256_loadu_si256((const __m256i *)yv[b].qs);
        __m256i p[8];
        for (int i = 0; i < 8; i++)
            p[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(nibbles(x[i][b].qs), yq),
                                     _mm256_set1_epi16(1));
        /* lanes 0-3 and 4-7 of the hadd tree hold the halves of rows 0-3 / 4-7 */
        const __m256i h01 = _mm256_hadd_epi32(p[0], p[1]), h23 = _mm256_hadd_epi32(p[2], p[3]);
        const __m256i h45 = _mm256_hadd_epi32(p[4], p[5]), h67 = _mm256_hadd_epi32(p[6], p[7]);
        const __m256i a = _mm256_hadd_epi32(h01, h23), c = _mm256_hadd_epi32(h45, h67);
        const __m256i lo = _mm256_permute2x128_si256(a, c, 0x20),
                      hi = _mm256_permute2x128_si256(a, c, 0x31);
        const __m256 sumi = _mm256_cvtepi32_ps(_mm256_add_epi32(lo, hi));
        const __m256 xd = _mm256_cvtph_ps(
            _mm_setr_epi16((short)x[0][b].d, (short)x[1][b].d, (short)x[2][b].d, (short)x[3][b].d,
                           (short)x[4][b].d, (short)x[5][b].d, (short)x[6][b].d, (short)x[7][b].d));
        const __m256 xm = _mm256_cvtph_ps(
            _mm_setr_epi16((short)x[0][b].m, (short)x[1][b].m, (short)x[2][b].m, (short)x[3][b].m,
                           (short)x[4][b].m, (short)x[5][b].m, (short)x[6][b].m, (short)x[7][b].m));
        const __m128 yds =
            _mm_cvtph_ps(_mm_setr_epi16((short)yv[b].d, (short)yv[b].s, 0, 0, 0, 0, 0, 0));
        const __m256 yd = _mm256_set1_ps(_mm_cvtss_f32(yds));
        const __m256 ys = _mm256_set1_ps(_mm_cvtss_f32(_mm_shuffle_ps(yds, yds, 0x55)));
        sum = _mm256_add_ps(
            sum, _mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(xd, yd), sumi), _mm256_mul_ps(xm, ys)));
    }
    _mm256_storeu_ps(out, sum);
}

/* Tiles of 4 lanes over (weight row, activation row) pairs of the block [t0, t1) x [0, n_rows):
 * one activation row -> 4 weight rows per call; more -> 1 weight row x 4 activation rows. */
static int matmul_tiled(uint32_t w_type, const void *w, int64_t n_in, int64_t t0, int64_t t1,
                        const void *xq, size_t xq_row_bytes, int64_t n_rows, float *y,
                        int64_t ld_y) {
    const int q41 = w_type == SPECD_DTYPE_Q4_1, q80 = w_type == SPECD_DTYPE_Q8_0;
    if (!(q41 || q80) || n_in % SPECD_QK) return 0;
    const int64_t nb = n_in / SPECD_QK;
    const size_t wrb = (size_t)nb * (q41 ? sizeof(specd_block_q4_1) : sizeof(specd_block_q8_0));
    const void *xs[4], *ys[4];
    int64_t oo[4], rr[4];
    int lanes = 0;
    float res[4];
#define FLUSH()                                                                                    \
    do {                                                                                           \
        for (int l_ = lanes; l_ < 4; l_++)                                                         \
            xs[l_] = xs[0], ys[l_] = ys[0];                                                        \
        if (q41)                                                                                   \
            q4_1_x4(nb, (const specd_block_q4_1 *const *)xs, (const specd_block_q8_1 *const *)ys,  \
                    res);                                                                          \
        else                                                                                       \
            q8_0_x4(nb, (const specd_block_q8_0 *const *)xs, (const specd_block_q8_0 *const *)ys,  \
                    res);                                                                          \
        for (int l_ = 0; l_ < lanes; l_++)                                                         \
            y[rr[l_] * ld_y + oo[l_]] = res[l_];                                                   \
        lanes = 0;                                                                                 \
    } while (0)
    if (n_rows == 1) {
        int64_t o = t0;
        if (q41)
            for (; o + 8 <= t1; o += 8) {
                const specd_block_q4_1 *xr[8];
                float r8[8];
                for (int i = 0; i < 8; i++)
                    xr[i] = (const specd_block_q4_1 *)((const char *)w + (size_t)(o + i) * wrb);
                q4_1_8x1(nb, xr, (const specd_block_q8_1 *)xq, r8);
                for (int i = 0; i < 8; i++)
                    y[o + i] = r8[i];
            }
        for (; o < t1; o++) {
            xs[lanes] = (const char *)w + (size_t)o * wrb;
            ys[lanes] = xq;
            oo[lanes] = o;
            rr[lanes++] = 0;
            if (lanes == 4) FLUSH();
        }
    } else {
        int64_t r0 = 0;
        /* full groups of 4 activation rows, two weight rows at a time */
        for (; r0 + 4 <= n_rows; r0 += 4) {
            const void *yg[4];
            for (int i = 0; i < 4; i++)
                yg[i] = (const char *)xq + (size_t)(r0 + i) * xq_row_bytes;
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
                for (int i = 0; i < 4; i++) {
                    y[(r0 + i) * ld_y + o] = a[i];
                    y[(r0 + i) * ld_y + o + 1] = b[i];
                }
            }
            for (; o < t1; o++)
                for (int i = 0; i < 4; i++) {
                    xs[lanes] = (const char *)w + (size_t)o * wrb;
                    ys[lanes] = yg[i];
                    oo[lanes] = o;
                    rr[lanes++] = r0 + i;
                    if (lanes == 4) FLUSH();
                }
        }
        for (int64_t o = t0; o < t1; o++)
            for (int64_t r = r0; r < n_rows; r++) {
                xs[lanes] = (const char *)w + (size_t)o * wrb;
                ys[lanes] = (const char *)xq + (size_t)r * xq_row_bytes;
                oo[lanes] = o;
                rr[lanes++] = r;
                if (lanes == 4) FLUSH();
            }
    }
    if (lanes) FLUSH();
#undef FLUSH
    return 1;
}
#endif

void specd_matmul_rows(const specd_dtype_traits *w_traits, uint32_t w_type, const void *w,
                       int64_t n_in, int64_t o_begin, int64_t o_end, const void *xq,
                       size_t xq_row_bytes, int64_t n_rows, float *y, int64_t ld_y, int simd) {
    const size_t wrb = specd_dtype_row_bytes(w_type, n_in);
    for (int64_t t0 = o_begin; t0 < o_end; t0 += TILE_ROWS) {
        const int64_t t1 = t0 + TILE_ROWS < o_end ? t0 + TILE_ROWS : o_end;
#if defined(__x86_64__)
        if (simd && matmul_tiled(w_type, w, n_in, t0, t1, xq, xq_row_bytes, n_rows, y, ld_y))
            continue;
#endif
        for (int64_t r = 0; r < n_rows; r++) {
            const void *xr = (const char *)xq + (size_t)r * xq_row_bytes;
            float *yr = y + r * ld_y;
            for (int64_t o = t0; o < t1; o++)
                w_traits->vec_dot(n_in, &yr[o], (const char *)w + (size_t)o * wrb, xr);
        }
    }
}
