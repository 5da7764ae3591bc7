/* Q4_K and Q6_K weights against Q8_K activations, one weight super-block unpacked once for up to
 * 16 activation rows (a decode is the one-row case).
 *
 * Exactness: the per-row kernels (quant_k.c, dtype_avx2.c) keep ggml's reference arithmetic:
 * per super-block eight exact int32 lanes, lane l = sum over elements e with e % 8 == l of
 * scale(e) * w_e * y_e, then sums[l] = sums[l] + d * (float)lane[l] (d = d_w * d_y, no fused
 * multiply-add), for Q4_K sum = sum - (dmin_w * d_y) * (float)(sum_j bsums[j] * min(j / 2)), and
 * at the end sum (0 for Q6_K) plus lanes 0..7 in order. The tiles compute the same integer lanes
 * by other instructions (integer sums are exact whatever their order) and then the same float
 * operations in the same order, one lane per float lane, so every output is the per-row bits,
 * whatever the tile, batch or path.
 *
 * Lanes by dot instructions: each run of 32 elements (a Q4_K sub-block, two Q6_K sub-blocks) is
 * transposed as a 4x8 byte matrix, so dword k holds elements k, k+8, k+16, k+24, all in lane k:
 * maddubs then sums the pairs (k, k+8) and (k+16, k+24), each pair in one 16-element Q6_K
 * sub-block, and a 16-bit multiply-add with the pair's scales (vpdpwssd on AVX-512, vpmaddwd on
 * AVX2) gives the run's scaled lane sums. maddubs wants unsigned x signed bytes: activations go
 * in as y + 128 (bytes 0..255), weights as signed bytes (Q4_K 0..15, Q6_K q - 32), and the
 * 128 * sum(scale * w) this adds, which depends on the weight block only, is taken off once per
 * block for all rows. No 16-bit sum saturates: |pair| <= 255 * 32 * 2. Activations are
 * transposed once per call; weights once per block, shared by the rows.
 *
 * The file is compiled for x86-64 at large; the AVX-512 functions run only on
 * SPECD_CPU_AVX512 (cpu_dispatch.c checked the CPU and OS), the AVX2 ones on SPECD_CPU_AVX2. */
#include "kernels/cpu/matmul_kquant.h"

#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant_blocks.h"

#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define AVX512                                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE inline __attribute__((always_inline))

enum { GROUP = 16, QK = SPECD_QK_K, RUNS = QK / 32 };

/* A group of up to 16 activation rows, laid out for the tiles (padding rows: d and bs 0). */
typedef struct kq_acts {
    int rows;
    uint8_t *q;  /* [(b * GROUP + r) * QK]: quants + 128, each run of 32 transposed */
    float *d;    /* [b * GROUP + r] */
    int32_t *bs; /* [(b * 8 + j) * GROUP + r]: bsums 2j and 2j+1 as one dword */
} kq_acts;

/* The 4x8 byte transpose of a run of 32: out byte 4k + m = in byte 8m + k. The dword permute
 * brings elements 0-3, 8-11, 16-19, 24-27 into the low 128 bits (4-7, 12-15, ... into the high),
 * then a 4x4 byte transpose within each 128 bits. */
static AVX2 INLINE __m256i transpose_run(__m256i v) {
    const __m256i d = _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    return _mm256_shuffle_epi8(d, _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11,
                                                   15, 0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7,
                                                   11, 15));
}

static AVX2 void gather(const char *xq, size_t xrb, int64_t r0, int64_t nb, kq_acts *a) {
    const __m256i k128 = _mm256_set1_epi8((char)0x80);
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < GROUP; r++) {
            const size_t i = (size_t)b * GROUP + (size_t)r;
            if (r >= a->rows) {
                a->d[i] = 0.0f;
                for (int j = 0; j < 8; j++)
                    a->bs[((size_t)b * 8 + (size_t)j) * GROUP + (size_t)r] = 0;
                continue;
            }
            const specd_block_q8_k *y = (const specd_block_q8_k *)(xq + (size_t)(r0 + r) * xrb) + b;
            a->d[i] = y->d;
            uint8_t *q = a->q + i * QK;
            for (int k = 0; k < RUNS; k++)
                _mm256_storeu_si256((__m256i *)(q + 32 * k),
                                    _mm256_xor_si256(transpose_run(_mm256_loadu_si256(
                                                         (const __m256i *)(y->qs + 32 * k))),
                                                     k128));
            for (int j = 0; j < 8; j++)
                memcpy(&a->bs[((size_t)b * 8 + (size_t)j) * GROUP + (size_t)r], y->bsums + 2 * j,
                       sizeof(int32_t));
        }
}

/* Final reduction of one row, as finish_lanes in dtype_avx2.c: start (Q4_K's mins term, else 0)
 * plus lanes 0..7 in order. */
static INLINE float finish(const float lanes[8], float start) {
    float sum = start;
    for (int l = 0; l < 8; l++)
        sum += lanes[l];
    return sum;
}

/* Q4_K's eight 6-bit scales and mins (specd_q4_k_scale_min) as (v, v) 16-bit pairs in eight
 * dwords each, unpacked in 32-bit words (ggml's way) so no byte goes through memory. */
static AVX2 INLINE void q4_k_scales(const uint8_t *q, __m256i *sc, __m256i *mn) {
    uint32_t u[3];
    memcpy(u, q, sizeof u);
    const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
    const uint64_t s = (uint64_t)(u[0] & m6) | (uint64_t)((u[2] & m4) | (((u[0] >> 6) & m2) << 4))
                                                   << 32;
    const uint64_t m =
        (uint64_t)(u[1] & m6) | (uint64_t)(((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4)) << 32;
    const __m256i sv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s));
    const __m256i mv = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m));
    *sc = _mm256_or_si256(sv, _mm256_slli_epi32(sv, 16));
    *mn = _mm256_or_si256(mv, _mm256_slli_epi32(mv, 16));
}

/* --- AVX2 ----------------------------------------------------------------------------------- */
/* One weight super-block as eight runs of signed bytes (transposed) with the 16-bit scale pair of
 * each run in every dword; Q4_K also the mins as (min, min) dwords. */
typedef struct kq_block2 {
    __m256i w[RUNS], s[RUNS];
    __m256i mn;
    float d, dmin;
} kq_block2;

static AVX2 INLINE void unpack_q4_k_avx2(const specd_block_q4_k *x, kq_block2 *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256i sc;
    q4_k_scales(x->scales, &sc, &k->mn);
    for (int j = 0; j < 8; j++)
        k->s[j] = _mm256_permutevar8x32_epi32(sc, _mm256_set1_epi32(j));
    for (int p = 0; p < 4; p++) { /* 32 bytes: run 2p in the low nibbles, 2p+1 in the high */
        const __m256i q = transpose_run(_mm256_loadu_si256((const __m256i *)(x->qs + 32 * p)));
        k->w[2 * p] = _mm256_and_si256(q, m4);
        k->w[2 * p + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    }
    k->d = specd_fp16_to_fp32(x->d);
    k->dmin = specd_fp16_to_fp32(x->dmin);
}

static AVX2 INLINE void unpack_q6_k_avx2(const specd_block_q6_k *x, kq_block2 *k) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
    const __m256i off = _mm256_set1_epi8(32);
    for (int g = 0; g < 2; g++) { /* q6_k_unpack's layout (quant_k.c), bytes transposed first */
        const __m256i l0 = transpose_run(_mm256_loadu_si256((const __m256i *)(x->ql + 64 * g)));
        const __m256i l1 =
            transpose_run(_mm256_loadu_si256((const __m256i *)(x->ql + 64 * g + 32)));
        const __m256i h = transpose_run(_mm256_loadu_si256((const __m256i *)(x->qh + 32 * g)));
#define Q6(lo, sh)                                                                                 \
    _mm256_sub_epi8(                                                                               \
        _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, sh), m2), 4)), \
        off)
        k->w[4 * g] = Q6(_mm256_and_si256(l0, m4), 0);
        k->w[4 * g + 1] = Q6(_mm256_and_si256(l1, m4), 2);
        k->w[4 * g + 2] = Q6(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), 4);
        k->w[4 * g + 3] = Q6(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), 6);
#undef Q6
    }
    for (int j = 0; j < RUNS; j++) /* run j: sub-blocks 2j (words 2k) and 2j+1 (words 2k+1) */
        k->s[j] = _mm256_set1_epi32((int32_t)(uint16_t)x->scales[2 * j] |
                                    (int32_t)((uint32_t)(uint16_t)x->scales[2 * j + 1] << 16));
    k->d = specd_fp16_to_fp32(x->d);
}

static AVX2 void tile_avx2(int q6, int R, int64_t nb, const kq_acts *a, const char *wrow,
                           float *out) {
    __m256 fs[GROUP];
    for (int r = 0; r < R; r++)
        fs[r] = _mm256_setzero_ps();
    __m256 ms0 = _mm256_setzero_ps(), ms1 = ms0; /* Q4_K mins terms of rows 0-7, 8-15 */
    const __m256i k128 = _mm256_set1_epi8((char)0x80);
    kq_block2 k;
    for (int64_t b = 0; b < nb; b++) {
        if (q6)
            unpack_q6_k_avx2((const specd_block_q6_k *)wrow + b, &k);
        else
            unpack_q4_k_avx2((const specd_block_q4_k *)wrow + b, &k);
        __m256i corr = _mm256_setzero_si256();
        for (int j = 0; j < RUNS; j++)
            corr = _mm256_add_epi32(corr,
                                    _mm256_madd_epi16(_mm256_maddubs_epi16(k128, k.w[j]), k.s[j]));
        const __m256i nc = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
        const float *dr = a->d + (size_t)b * GROUP;
        if (!q6) {
            __m256i s0 = _mm256_setzero_si256(), s1 = s0;
            for (int j = 0; j < 8; j++) {
                const int32_t *bs = a->bs + ((size_t)b * 8 + (size_t)j) * GROUP;
                const __m256i mn = _mm256_permutevar8x32_epi32(k.mn, _mm256_set1_epi32(j));
                s0 = _mm256_add_epi32(
                    s0, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), mn));
                if (R > 8)
                    s1 = _mm256_add_epi32(
                        s1, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(bs + 8)), mn));
            }
            const __m256 dm = _mm256_set1_ps(k.dmin);
            ms0 = _mm256_sub_ps(
                ms0, _mm256_mul_ps(_mm256_mul_ps(dm, _mm256_loadu_ps(dr)), _mm256_cvtepi32_ps(s0)));
            if (R > 8)
                ms1 = _mm256_sub_ps(ms1, _mm256_mul_ps(_mm256_mul_ps(dm, _mm256_loadu_ps(dr + 8)),
                                                       _mm256_cvtepi32_ps(s1)));
        }
        const uint8_t *yq = a->q + (size_t)b * GROUP * QK;
        for (int r0 = 0; r0 < R; r0 += 4) { /* four rows per pass; a short last pass repeats its
                                             * last row (not stored) */
            const uint8_t *y[4];
            for (int i = 0; i < 4; i++)
                y[i] = yq + (size_t)(r0 + i < R ? r0 + i : R - 1) * QK;
            __m256i c0 = nc, c1 = nc, c2 = nc, c3 = nc;
            for (int j = 0; j < RUNS; j++) {
                const __m256i w = k.w[j], s = k.s[j];
#define ROW(c, i)                                                                                  \
    c = _mm256_add_epi32(                                                                          \
        c, _mm256_madd_epi16(                                                                      \
               _mm256_maddubs_epi16(_mm256_loadu_si256((const __m256i *)(y[i] + 32 * j)), w), s))
                ROW(c0, 0);
                ROW(c1, 1);
                ROW(c2, 2);
                ROW(c3, 3);
#undef ROW
            }
            const __m256i c[4] = {c0, c1, c2, c3};
            for (int i = 0; i < 4 && r0 + i < R; i++)
                fs[r0 + i] =
                    _mm256_add_ps(fs[r0 + i], _mm256_mul_ps(_mm256_set1_ps(k.d * dr[r0 + i]),
                                                            _mm256_cvtepi32_ps(c[i])));
        }
    }
    float m[16], lanes[8];
    _mm256_storeu_ps(m, ms0);
    _mm256_storeu_ps(m + 8, ms1);
    for (int r = 0; r < R; r++) {
        _mm256_storeu_ps(lanes, fs[r]);
        out[r] = finish(lanes, q6 ? 0.0f : m[r]);
    }
}

/* --- AVX-512 -------------------------------------------------------------------------------- */
/* transpose_run on both 256-bit halves */
static AVX512 INLINE __m512i transpose_run2(__m512i v) {
    const __m512i d = _mm512_permutexvar_epi32(
        _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15), v);
    return _mm512_shuffle_epi8(d, _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2,
                                                                       6, 10, 14, 3, 7, 11, 15)));
}

/* Block in four registers of two runs each: w[k] holds runs 2k, 2k+1 (elements 64k..64k+63, the
 * activation's k-th 64 bytes), s[k] their scale pairs. */
typedef struct kq_block5 {
    __m512i w[4], s[4];
    __m512i mn; /* Q4_K: the mins' dwords in the low eight */
    float d, dmin;
} kq_block5;

/* s[k] = [dword 2k x8 | dword 2k+1 x8] of the eight run scale dwords in sv */
static AVX512 INLINE void spread_scales(__m512i sv, __m512i s[4]) {
    for (int k = 0; k < 4; k++)
        s[k] = _mm512_permutexvar_epi32(_mm512_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                                          2 * k, 2 * k, 2 * k + 1, 2 * k + 1,
                                                          2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                          2 * k + 1, 2 * k + 1, 2 * k + 1),
                                        sv);
}

static AVX512 INLINE void unpack_q4_k_512(const specd_block_q4_k *x, kq_block5 *k) {
    __m256i sc, mn;
    q4_k_scales(x->scales, &sc, &mn);
    spread_scales(_mm512_castsi256_si512(sc), k->s);
    k->mn = _mm512_castsi256_si512(mn);
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int h = 0; h < 2; h++) { /* lo = runs 4h, 4h+2; hi = runs 4h+1, 4h+3 */
        const __m512i q = transpose_run2(_mm512_loadu_si512(x->qs + 64 * h));
        const __m512i lo = _mm512_and_si512(q, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        k->w[2 * h] = _mm512_shuffle_i64x2(lo, hi, 0x44);
        k->w[2 * h + 1] = _mm512_shuffle_i64x2(lo, hi, 0xee);
    }
    k->d = specd_fp16_to_fp32(x->d);
    k->dmin = specd_fp16_to_fp32(x->dmin);
}

static AVX512 INLINE void unpack_q6_k_512(const specd_block_q6_k *x, kq_block5 *k) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    const __m512i off = _mm512_set1_epi8(32);
    const __m512i h = transpose_run2(_mm512_loadu_si512(x->qh)); /* [group 0 | group 1] */
    /* a group's qh in both halves, the high half shifted by 2: runs 4g+1 and 4g+3 take bits
     * 2-3 and 6-7 where runs 4g and 4g+2 take 0-1 and 4-5 (bits that cross into a neighbouring
     * byte are masked off below) */
    const __m512i sh = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
    for (int g = 0; g < 2; g++) {
        const __m512i l = transpose_run2(_mm512_loadu_si512(x->ql + 64 * g));
        /* the shuffle's selector must be a literal (clang refuses a computed one) */
        const __m512i hq = g ? _mm512_shuffle_i64x2(h, h, 0xee) : _mm512_shuffle_i64x2(h, h, 0x44);
        const __m512i hg = _mm512_srlv_epi64(hq, sh);
#define Q6(lo, s)                                                                                  \
    _mm512_sub_epi8(                                                                               \
        _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(hg, s), m2), 4)), \
        off)
        k->w[2 * g] = Q6(_mm512_and_si512(l, m4), 0);
        k->w[2 * g + 1] = Q6(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), 4);
#undef Q6
    }
    spread_scales(
        _mm512_castsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales))),
        k->s);
    k->d = specd_fp16_to_fp32(x->d);
}

/* R rows (a constant after inlining) of the group against one weight row. */
static AVX512 INLINE void tile512(int q6, const int R, int64_t nb, const kq_acts *a,
                                  const char *wrow, float *out) {
    __m512 fs[GROUP / 2]; /* rows 2i (low half) and 2i+1 (high half) */
#pragma GCC unroll 8
    for (int i = 0; i < (R + 1) / 2; i++)
        fs[i] = _mm512_setzero_ps();
    __m512 ms = _mm512_setzero_ps(); /* Q4_K mins term of row r in lane r */
    const __m512i k128 = _mm512_set1_epi8((char)0x80);
    kq_block5 k;
    for (int64_t b = 0; b < nb; b++) {
        if (q6)
            unpack_q6_k_512((const specd_block_q6_k *)wrow + b, &k);
        else
            unpack_q4_k_512((const specd_block_q4_k *)wrow + b, &k);
        __m512i corr = _mm512_setzero_si512();
        for (int j = 0; j < 4; j++)
            corr = _mm512_dpwssd_epi32(corr, _mm512_maddubs_epi16(k128, k.w[j]), k.s[j]);
        const __m512i nc = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
        const __m512 yd = _mm512_loadu_ps(a->d + (size_t)b * GROUP);
        const __m512 dd = _mm512_mul_ps(_mm512_set1_ps(k.d), yd);
        if (!q6) {
            __m512i sm = _mm512_setzero_si512();
            for (int j = 0; j < 8; j++)
                sm = _mm512_dpwssd_epi32(
                    sm, _mm512_loadu_si512(a->bs + ((size_t)b * 8 + (size_t)j) * GROUP),
                    _mm512_permutexvar_epi32(_mm512_set1_epi32(j), k.mn));
            ms = _mm512_sub_ps(ms, _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(k.dmin), yd),
                                                 _mm512_cvtepi32_ps(sm)));
        }
        const uint8_t *yq = a->q + (size_t)b * GROUP * QK;
#pragma GCC unroll 8
        for (int r = 0; r < R; r += 2) {
            const uint8_t *y0 = yq + (size_t)r * QK, *y1 = y0 + QK;
            __m512i c0 = nc, c1 = nc;
            for (int j = 0; j < 4; j++) {
                c0 = _mm512_dpwssd_epi32(
                    c0, _mm512_maddubs_epi16(_mm512_loadu_si512(y0 + 64 * j), k.w[j]), k.s[j]);
                if (r + 1 < R)
                    c1 = _mm512_dpwssd_epi32(
                        c1, _mm512_maddubs_epi16(_mm512_loadu_si512(y1 + 64 * j), k.w[j]), k.s[j]);
            }
            /* [row r's lanes | row r+1's lanes]: each row's two runs per register folded */
            const __m512i lanes = _mm512_add_epi32(_mm512_shuffle_i64x2(c0, c1, 0x44),
                                                   _mm512_shuffle_i64x2(c0, c1, 0xee));
            const __m512 ddr =
                _mm512_permutexvar_ps(_mm512_setr_epi32(r, r, r, r, r, r, r, r, r + 1, r + 1, r + 1,
                                                        r + 1, r + 1, r + 1, r + 1, r + 1),
                                      dd);
            fs[r / 2] = _mm512_add_ps(fs[r / 2], _mm512_mul_ps(ddr, _mm512_cvtepi32_ps(lanes)));
        }
    }
    float m[16], lanes[16];
    _mm512_storeu_ps(m, ms);
#pragma GCC unroll 8
    for (int i = 0; i < (R + 1) / 2; i++) {
        _mm512_storeu_ps(lanes, fs[i]);
        out[2 * i] = finish(lanes, q6 ? 0.0f : m[2 * i]);
        if (2 * i + 1 < R) out[2 * i + 1] = finish(lanes + 8, q6 ? 0.0f : m[2 * i + 1]);
    }
}

/* One specialisation per (type, rows) so that the accumulators stay in registers. */
#define TILE_FN(name, Q6)                                                                          \
    static AVX512 void name(int R, int64_t nb, const kq_acts *a, const char *w, float *o) {        \
        switch (R) {                                                                               \
        case 1: tile512(Q6, 1, nb, a, w, o); break;                                                \
        case 2: tile512(Q6, 2, nb, a, w, o); break;                                                \
        case 3: tile512(Q6, 3, nb, a, w, o); break;                                                \
        case 4: tile512(Q6, 4, nb, a, w, o); break;                                                \
        case 5: tile512(Q6, 5, nb, a, w, o); break;                                                \
        case 6: tile512(Q6, 6, nb, a, w, o); break;                                                \
        case 7: tile512(Q6, 7, nb, a, w, o); break;                                                \
        case 8: tile512(Q6, 8, nb, a, w, o); break;                                                \
        case 9: tile512(Q6, 9, nb, a, w, o); break;                                                \
        case 10: tile512(Q6, 10, nb, a, w, o); break;                                              \
        case 11: tile512(Q6, 11, nb, a, w, o); break;                                              \
        case 12: tile512(Q6, 12, nb, a, w, o); break;                                              \
        case 13: tile512(Q6, 13, nb, a, w, o); break;                                              \
        case 14: tile512(Q6, 14, nb, a, w, o); break;                                              \
        case 15: tile512(Q6, 15, nb, a, w, o); break;                                              \
        default: tile512(Q6, 16, nb, a, w, o); break;                                              \
        }                                                                                          \
    }
TILE_FN(tile512_q4_k, 0)
TILE_FN(tile512_q6_k, 1)
#undef TILE_FN

int specd_matmul_rows_kquant(int simd, uint32_t w_type, const void *w, int64_t n_in,
                             int64_t o_begin, int64_t o_end, const void *xq, size_t xq_row_bytes,
                             int64_t n_rows, float *y, int64_t ld_y) {
    const int q6 = w_type == SPECD_DTYPE_Q6_K;
    if (simd < SPECD_CPU_AVX2 || (!q6 && w_type != SPECD_DTYPE_Q4_K) || n_in % QK != 0 || n_in <= 0)
        return 0;
    const int64_t nb = n_in / QK;
    const size_t wrb = specd_dtype_row_bytes(w_type, n_in);
    /* per block: the group's transposed quants, d, bsum dwords */
    const size_t per_block = GROUP * (QK + sizeof(float) + 8 * sizeof(int32_t));
    char *scratch = malloc((size_t)nb * per_block);
    if (!scratch) return 0;
    kq_acts a = {.q = (uint8_t *)scratch};
    a.d = (float *)(scratch + (size_t)nb * GROUP * QK);
    a.bs = (int32_t *)(a.d + nb * GROUP);
    /* activation groups outside, weight rows inside: the weights stream once per 16 rows */
    for (int64_t r0 = 0; r0 < n_rows; r0 += GROUP) {
        a.rows = (int)(n_rows - r0 < GROUP ? n_rows - r0 : GROUP);
        gather((const char *)xq, xq_row_bytes, r0, nb, &a);
        float out[GROUP];
        for (int64_t o = o_begin; o < o_end; o++) {
            const char *wr = (const char *)w + (size_t)o * wrb;
            if (simd >= SPECD_CPU_AVX512)
                (q6 ? tile512_q6_k : tile512_q4_k)(a.rows, nb, &a, wr, out);
            else if (a.rows == 1) /* a decode: the per-row kernel is cheaper than one-row tiles */
                (q6 ? specd_q6_k_vec_dot_avx2 : specd_q4_k_vec_dot_avx2)(
                    n_in, out, wr, (const char *)xq + (size_t)r0 * xq_row_bytes);
            else
                tile_avx2(q6, a.rows, nb, &a, wr, out);
            for (int r = 0; r < a.rows; r++)
                y[(r0 + r) * ld_y + o] = out[r];
        }
    }
    free(scratch);
    return 1;
}

#else
int specd_matmul_rows_kquant(int simd, uint32_t w_type, const void *w, int64_t n_in,
                             int64_t o_begin, int64_t o_end, const void *xq, size_t xq_row_bytes,
                             int64_t n_rows, float *y, int64_t ld_y) {
    (void)simd, (void)w_type, (void)w, (void)n_in, (void)o_begin, (void)o_end, (void)xq;
    (void)xq_row_bytes, (void)n_rows, (void)y, (void)ld_y;
    return 0;
}
#endif
