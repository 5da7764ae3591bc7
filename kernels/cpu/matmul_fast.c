/* Fast numerics (matmul_fast.h): Q4_0, Q4_1 and Q8_0 weights against fast activation rows.
 *
 * The arithmetic of one (weight row, activation row) pair, the same on every path: blocks go in
 * groups of eight, block j of a group in float lane j (a last partial group padded with blocks
 * whose quants and scales are zero). Per group, lane j gets
 *   S_j   = the exact integer dot of block j's quants (Q4_0: nibble - 8, Q4_1: nibble, Q8_0: int8)
 *           with the activation's int8 quants,
 *   acc_j = fma(d_w * d_x, (float)S_j, acc_j)      (the weight's and the activation's scales)
 *   acc_j = fma(m_w, s_x, acc_j)                    (Q4_1 only: its min, s_x = d_x * sum(x))
 * The activation blocks are llama.cpp's Q8_0/Q8_1 blocks, scales rounded to fp16 included: that
 * rounding absorbs the last-bit differences the attention's sum order gives a row whose cache has
 * a masked hole (a sibling in a tree of drafts) against the same row decoded alone, in this mode
 * as in llama.cpp's (test_runtime_kv's siblings); with fp32 scales those differences reached the
 * logits.
 * and at the end the dot is ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). Against llama.cpp's order (one
 * fma per block in each of eight lanes of four-element partial sums) this keeps the integer work
 * in integers until a block is done and applies eight blocks' scales with one vector multiply and
 * one fma, and |S_j| < 2^24 makes (float)S_j exact, so the integer part may be summed in any
 * order: the AVX2 kernel sums Q4 products in 16-bit lanes (|sum| <= 8 * 2 * 15 * 128 < 2^15) and
 * needs one 16-bit add per 32 products. The weights of a group are transposed once (the 8x4
 * dword transpose below) and shared by every activation row of the call, which is what makes an
 * extend of k rows cost little more than one: the per-row work is eight maddubs, seven adds, one
 * madd, one convert, one multiply and one or two fmas per 256 weights.
 *
 * The scalar kernel is the reference: the AVX2 kernel performs the same float operations in the
 * same lanes, so every path (scalar, AVX2, AVX-512 machines, which run the AVX2 kernel) gives the
 * same bits, and no result depends on the batch, a row's place in it or the thread split (threads
 * split weight rows). */
#include "kernels/cpu/matmul_fast.h"

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/lanes_avx2.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* one group of a fast row: quants (8 slots x 8 lanes x 4 bytes), then d, s, sum of each block */
enum { G = 8, Q_BYTES = 256, D_OFF = 256, S_OFF = 288, SUM_OFF = 320, GROUP_BYTES = 352 };
/* rows of one pass over the weights: their accumulators stay in a stack array */
enum { ROWS = 64 };

static int64_t n_groups(int64_t n) {
    return (n / SPECD_QK + G - 1) / G;
}

/* Where the quants of block j's slot t (elements 4t..4t+3) lie in its group. A last group of at
 * most four blocks is a half group: slot t's four lanes sit beside slot t + 4's in one 32-byte
 * row, so that its kernel does half the work (a model of width 576 has 18 blocks: 8 + 8 + 2). */
static size_t q_offset(int half, int t, int j) {
    return half ? (size_t)(32 * (t % 4) + 16 * (t / 4) + 4 * j) : (size_t)(32 * t + 4 * j);
}

/* whether group g of a row of nb blocks is a half group */
static int half_group(int64_t nb, int64_t g) {
    return nb - g * G <= G / 2;
}

size_t specd_fast_row_bytes(uint32_t w_type, int64_t n) {
    if (w_type != SPECD_DTYPE_Q4_0 && w_type != SPECD_DTYPE_Q4_1 && w_type != SPECD_DTYPE_Q8_0)
        return 0;
    if (n <= 0 || n % SPECD_QK) return 0;
    return (size_t)n_groups(n) * GROUP_BYTES;
}

void specd_fast_quantize_row(const float *x, int64_t n, void *dst, int simd) {
    const int64_t nb = n / SPECD_QK;
    uint8_t *out = dst;
    memset(out, 0, (size_t)n_groups(n) * GROUP_BYTES);
    for (int64_t b = 0; b < nb; b++, x += SPECD_QK) {
        uint8_t *grp = out + (size_t)(b / G) * GROUP_BYTES;
        const int j = (int)(b % G), half = half_group(nb, b / G);
        int8_t qs[SPECD_QK];
        int32_t sum;
        const float amax = simd ? specd_q8_block_avx2(x, qs, &sum) : specd_q8_block(x, qs, &sum);
        for (int t = 0; t < 8; t++)
            memcpy(grp + q_offset(half, t, j), qs + 4 * t, 4);
        const float d32 = amax / 127.0f;
        const float d = specd_fp16_to_fp32(specd_fp32_to_fp16(d32));
        const float s = specd_fp16_to_fp32(specd_fp32_to_fp16(d32 * (float)sum));
        memcpy(grp + D_OFF + 4 * j, &d, 4);
        memcpy(grp + S_OFF + 4 * j, &s, 4);
        memcpy(grp + SUM_OFF + 4 * j, &sum, 4);
    }
}

static size_t block_bytes(uint32_t t) {
    return t == SPECD_DTYPE_Q8_0   ? sizeof(specd_block_q8_0)
           : t == SPECD_DTYPE_Q4_1 ? sizeof(specd_block_q4_1)
                                   : sizeof(specd_block_q4_0);
}

static float lanes_sum(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* --- scalar reference ----------------------------------------------------------------------- */
/* weight element e of a block (the quant as the dot uses it) */
static int weight_q(uint32_t t, const char *blk, int e) {
    if (t == SPECD_DTYPE_Q8_0) return ((const specd_block_q8_0 *)blk)->qs[e];
    const uint8_t *qs = t == SPECD_DTYPE_Q4_1 ? ((const specd_block_q4_1 *)blk)->qs
                                              : ((const specd_block_q4_0 *)blk)->qs;
    const int nib = e < SPECD_QK / 2 ? qs[e] & 0xf : qs[e - SPECD_QK / 2] >> 4;
    return t == SPECD_DTYPE_Q4_0 ? nib - 8 : nib;
}

static float dot_scalar(uint32_t t, const char *w, int64_t nb, const uint8_t *x) {
    const size_t wb = block_bytes(t);
    float acc[8] = {0};
    for (int64_t g = 0; g < (nb + G - 1) / G; g++, x += GROUP_BYTES) {
        const int half = half_group(nb, g);
        for (int j = 0; j < G; j++) {
            const int64_t b = g * G + j;
            float dx, sx;
            memcpy(&dx, x + D_OFF + 4 * j, 4);
            memcpy(&sx, x + S_OFF + 4 * j, 4);
            int32_t s = 0;
            float dw = 0.0f, mw = 0.0f;
            if (b < nb) {
                const char *blk = w + (size_t)b * wb;
                uint16_t h[2];
                memcpy(h, blk, sizeof h);
                dw = specd_fp16_to_fp32(h[0]);
                if (t == SPECD_DTYPE_Q4_1) mw = specd_fp16_to_fp32(h[1]);
                for (int e = 0; e < SPECD_QK; e++)
                    s +=
                        weight_q(t, blk, e) * (int8_t)x[q_offset(half, e / 4, j) + (size_t)(e % 4)];
            }
            acc[j] = fmaf(dw * dx, (float)s, acc[j]);
            if (t == SPECD_DTYPE_Q4_1) acc[j] = fmaf(mw, sx, acc[j]);
        }
    }
    return lanes_sum(acc);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma,f16c")))
#define INLINE inline __attribute__((always_inline))

/* A group's weights, unpacked once for every activation row: w[t] dword j = block j's quants of
 * slot t (unsigned nibbles for Q4, int8 for Q8_0; absw = |w| for Q8_0), d and m in lane j. */
typedef struct wgroup {
    __m256i w[8], absw[8];
    __m256 d, m;
} wgroup;

/* 4x4 dword transposes of x[0..3] within each 128-bit half: out[t] dword j = x[j] dword t. */
static AVX2 INLINE void transpose4(const __m256i x[4], __m256i out[4]) {
    const __m256i a = _mm256_unpacklo_epi32(x[0], x[1]), b = _mm256_unpackhi_epi32(x[0], x[1]);
    const __m256i c = _mm256_unpacklo_epi32(x[2], x[3]), e = _mm256_unpackhi_epi32(x[2], x[3]);
    out[0] = _mm256_unpacklo_epi64(a, c);
    out[1] = _mm256_unpackhi_epi64(a, c);
    out[2] = _mm256_unpacklo_epi64(b, e);
    out[3] = _mm256_unpackhi_epi64(b, e);
}

/* 16 bytes at offset off of block j, zeros for blocks past the group's rem */
static AVX2 INLINE __m128i blk16(const char *blk, size_t wb, int j, size_t off, int rem) {
    return j < rem ? _mm_loadu_si128((const __m128i *)(blk + (size_t)j * wb + off))
                   : _mm_setzero_si128();
}

/* the same of blocks j (low half) and j + 4 (high half) */
static AVX2 INLINE __m256i pair16(const char *blk, size_t wb, int j, size_t off, int rem) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(blk16(blk, wb, j, off, rem)),
                                   blk16(blk, wb, j + 4, off, rem), 1);
}

/* the 4x4 dword transpose of x[0..3] in 128 bits (transpose4's low halves), in 128-bit
 * operations: widening the inputs to 256 bits made the compiler store them as 16 bytes and load
 * 32, which misses store forwarding */
static AVX2 INLINE void transpose4_128(const __m128i x[4], __m128i out[4]) {
    const __m128i a = _mm_unpacklo_epi32(x[0], x[1]), b = _mm_unpackhi_epi32(x[0], x[1]);
    const __m128i c = _mm_unpacklo_epi32(x[2], x[3]), e = _mm_unpackhi_epi32(x[2], x[3]);
    out[0] = _mm_unpacklo_epi64(a, c);
    out[1] = _mm_unpackhi_epi64(a, c);
    out[2] = _mm_unpacklo_epi64(b, e);
    out[3] = _mm_unpackhi_epi64(b, e);
}

/* The scales of the group's blocks: d (and Q4_1's m) in lane j, zero past rem. Each block's
 * first dword (d, and m or two quant bytes) is gathered with vector loads and unpacks: building
 * the vector from scalar loads went through the stack, and the wide load after narrow stores
 * missed store forwarding (tens of cycles a group). */
static AVX2 INLINE void unpack_scales(const uint32_t t, const char *blk, int rem, wgroup *wg) {
    const size_t wb = block_bytes(t);
    __m256i x[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        x[j] = pair16(blk, wb, j, 0, rem);
    /* dword 0 of blocks 0..3 in the low half, 4..7 in the high half */
    const __m256i a = _mm256_unpacklo_epi32(x[0], x[1]), c = _mm256_unpacklo_epi32(x[2], x[3]);
    const __m256i hv = _mm256_unpacklo_epi64(a, c);
    const __m256i dh = _mm256_and_si256(hv, _mm256_set1_epi32(0xffff));
    const __m256i mh = _mm256_srli_epi32(hv, 16);
    /* [d0..d3 m0..m3 | d4..d7 m4..m7] as 16-bit, then the 64-bit quarters as d0..d7 | m0..m7 */
    const __m256i dm = _mm256_permute4x64_epi64(_mm256_packus_epi32(dh, mh), 0xd8);
    wg->d = _mm256_cvtph_ps(_mm256_castsi256_si128(dm));
    wg->m = t == SPECD_DTYPE_Q4_1 ? _mm256_cvtph_ps(_mm256_extracti128_si256(dm, 1))
                                  : _mm256_setzero_ps();
}

/* A group of rem (5..8) blocks, the missing ones zero. */
static AVX2 INLINE void unpack_group(const uint32_t t, const char *blk, int rem, wgroup *wg) {
    const size_t wb = block_bytes(t);
    __m256i x[4], p[4];
    if (t == SPECD_DTYPE_Q8_0) {
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = pair16(blk, wb, j, 2, rem);
        transpose4(x, wg->w); /* bytes 0..15: slots 0..3 */
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = pair16(blk, wb, j, 18, rem);
        transpose4(x, wg->w + 4);
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            wg->absw[s] = _mm256_sign_epi8(wg->w[s], wg->w[s]);
    } else {
        const size_t off = t == SPECD_DTYPE_Q4_1 ? 4 : 2;
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = pair16(blk, wb, j, off, rem);
        transpose4(x, p); /* p[s] dword j = block j's qs bytes 4s..4s+3 */
        const __m256i m4 = _mm256_set1_epi8(0x0f);
#pragma GCC unroll 8
        for (int s = 0; s < 4; s++) {
            wg->w[s] = _mm256_and_si256(p[s], m4);                           /* elements 4s.. */
            wg->w[s + 4] = _mm256_and_si256(_mm256_srli_epi16(p[s], 4), m4); /* 16 + 4s.. */
        }
    }
    unpack_scales(t, blk, rem, wg);
}

/* A half group of rem (1..4) blocks: w[s] = [slot s | slot s + 4] of blocks 0..3. */
static AVX2 INLINE void unpack_half(const uint32_t t, const char *blk, int rem, wgroup *wg) {
    const size_t wb = block_bytes(t);
    __m128i x[4], lo[4], hi[4];
    if (t == SPECD_DTYPE_Q8_0) {
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = blk16(blk, wb, j, 2, rem);
        transpose4_128(x, lo);
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = blk16(blk, wb, j, 18, rem);
        transpose4_128(x, hi);
#pragma GCC unroll 8
        for (int s = 0; s < 4; s++) {
            wg->w[s] = _mm256_inserti128_si256(_mm256_castsi128_si256(lo[s]), hi[s], 1);
            wg->absw[s] = _mm256_sign_epi8(wg->w[s], wg->w[s]);
        }
    } else {
#pragma GCC unroll 8
        for (int j = 0; j < 4; j++)
            x[j] = blk16(blk, wb, j, t == SPECD_DTYPE_Q4_1 ? 4 : 2, rem);
        transpose4_128(x, lo);
        const __m128i m4 = _mm_set1_epi8(0x0f);
#pragma GCC unroll 8
        for (int s = 0; s < 4; s++)
            wg->w[s] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(lo[s], m4)),
                                               _mm_and_si128(_mm_srli_epi16(lo[s], 4), m4), 1);
    }
    unpack_scales(t, blk, rem, wg);
}

/* The integer dots of the first n_slots slot registers of w against those of x, summed per dword
 * lane (Q4_0 without its -8 sum(x) term). */
static AVX2 INLINE __m256i slot_sums(const uint32_t t, const wgroup *wg, const uint8_t *x,
                                     const int n_slots) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (t == SPECD_DTYPE_Q8_0) {
        __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int k = 0; k < n_slots; k++) {
            const __m256i xq = _mm256_loadu_si256((const __m256i *)(x + 32 * k));
            const __m256i p = _mm256_maddubs_epi16(wg->absw[k], _mm256_sign_epi8(xq, wg->w[k]));
            s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
        }
        return s;
    }
    __m256i s16 = _mm256_maddubs_epi16(wg->w[0], _mm256_loadu_si256((const __m256i *)x));
#pragma GCC unroll 7
    for (int k = 1; k < n_slots; k++)
        s16 = _mm256_add_epi16(
            s16, _mm256_maddubs_epi16(wg->w[k], _mm256_loadu_si256((const __m256i *)(x + 32 * k))));
    return _mm256_madd_epi16(s16, ones);
}

/* lane j += block j's terms for one activation group x */
static AVX2 INLINE __m256 group_dot(const uint32_t t, const wgroup *wg, const uint8_t *x,
                                    __m256 acc) {
    __m256i s = slot_sums(t, wg, x, 8);
    if (t == SPECD_DTYPE_Q4_0) /* (nibble - 8) . x = nibble . x - 8 sum(x) */
        s = _mm256_sub_epi32(
            s, _mm256_slli_epi32(_mm256_loadu_si256((const __m256i *)(x + SUM_OFF)), 3));
    const __m256 dd = _mm256_mul_ps(wg->d, _mm256_loadu_ps((const float *)(x + D_OFF)));
    acc = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(s), acc);
    if (t == SPECD_DTYPE_Q4_1)
        acc = _mm256_fmadd_ps(wg->m, _mm256_loadu_ps((const float *)(x + S_OFF)), acc);
    return acc;
}

/* The same for a half group: lanes 0..3 only. Lanes 4..7 are left as they are, which is what
 * the reference's zero-padded blocks do to them: an accumulator that starts at +0 never holds
 * -0 (a sum that rounds to zero is +0), so adding fma(0, 0, +-0) = +0 changes no bit. */
static AVX2 INLINE __m256 half_dot(const uint32_t t, const wgroup *wg, const uint8_t *x,
                                   __m256 acc) {
    const __m256i s = slot_sums(t, wg, x, 4);
    /* slots 0..3 in the low half, 4..7 in the high half: block j's sum is lane j + lane 4 + j */
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    if (t == SPECD_DTYPE_Q4_0)
        s4 = _mm_sub_epi32(s4, _mm_slli_epi32(_mm_loadu_si128((const __m128i *)(x + SUM_OFF)), 3));
    const __m128 dd =
        _mm_mul_ps(_mm256_castps256_ps128(wg->d), _mm_loadu_ps((const float *)(x + D_OFF)));
    __m128 lo = _mm_fmadd_ps(dd, _mm_cvtepi32_ps(s4), _mm256_castps256_ps128(acc));
    if (t == SPECD_DTYPE_Q4_1)
        lo = _mm_fmadd_ps(_mm256_castps256_ps128(wg->m), _mm_loadu_ps((const float *)(x + S_OFF)),
                          lo);
    return _mm256_insertf128_ps(acc, lo, 0);
}

/* Weight rows [o_begin, o_end) against up to ROWS activation rows. Each weight group is
 * unpacked once and every row's accumulator (a stack array) takes its terms. */
static AVX2 INLINE void rows_avx2(const uint32_t t, const char *w, int64_t n_in, int64_t o_begin,
                                  int64_t o_end, const uint8_t *xq, size_t xrb, int64_t R, float *y,
                                  int64_t ld_y) {
    const size_t wb = block_bytes(t);
    const int64_t nb = n_in / SPECD_QK, full = nb / G;
    const int rem = (int)(nb - full * G);
    const size_t wrb = (size_t)nb * wb;
    __m256 acc[ROWS];
    for (int64_t o = o_begin; o < o_end; o++) {
        const char *wr = w + (size_t)o * wrb;
        /* the first group starts every accumulator at +0 (a zeroing loop here became a memset
         * per weight row) */
        for (int64_t g = 0; g < full; g++) {
            const char *blk = wr + (size_t)g * G * wb;
            /* the rows lie one after another: ask for a later group (a hint only) */
#pragma GCC unroll 3
            for (int k = 0; k < 3; k++)
                _mm_prefetch((const char *)((uintptr_t)blk + 1024 + 64 * (uintptr_t)k),
                             _MM_HINT_T0);
            wgroup wg;
            unpack_group(t, blk, G, &wg);
            const uint8_t *x = xq + (size_t)g * GROUP_BYTES;
            if (g == 0)
                for (int64_t r = 0; r < R; r++)
                    acc[r] = group_dot(t, &wg, x + (size_t)r * xrb, _mm256_setzero_ps());
            else
                for (int64_t r = 0; r < R; r++)
                    acc[r] = group_dot(t, &wg, x + (size_t)r * xrb, acc[r]);
        }
        if (rem) {
            const char *blk = wr + (size_t)full * G * wb;
            const uint8_t *x = xq + (size_t)full * GROUP_BYTES;
            wgroup wg;
            if (!full)
                for (int64_t r = 0; r < R; r++)
                    acc[r] = _mm256_setzero_ps();
            if (rem <= G / 2) {
                unpack_half(t, blk, rem, &wg);
                for (int64_t r = 0; r < R; r++)
                    acc[r] = half_dot(t, &wg, x + (size_t)r * xrb, acc[r]);
            } else {
                unpack_group(t, blk, rem, &wg);
                for (int64_t r = 0; r < R; r++)
                    acc[r] = group_dot(t, &wg, x + (size_t)r * xrb, acc[r]);
            }
        }
        for (int64_t r = 0; r < R; r++)
            y[r * ld_y + o] = specd_lanes_sum_avx2(acc[r]);
    }
}

static AVX2 void rows_q4_0(const char *w, int64_t n_in, int64_t o0, int64_t o1, const uint8_t *xq,
                           size_t xrb, int64_t R, float *y, int64_t ld_y) {
    rows_avx2(SPECD_DTYPE_Q4_0, w, n_in, o0, o1, xq, xrb, R, y, ld_y);
}
static AVX2 void rows_q4_1(const char *w, int64_t n_in, int64_t o0, int64_t o1, const uint8_t *xq,
                           size_t xrb, int64_t R, float *y, int64_t ld_y) {
    rows_avx2(SPECD_DTYPE_Q4_1, w, n_in, o0, o1, xq, xrb, R, y, ld_y);
}
static AVX2 void rows_q8_0(const char *w, int64_t n_in, int64_t o0, int64_t o1, const uint8_t *xq,
                           size_t xrb, int64_t R, float *y, int64_t ld_y) {
    rows_avx2(SPECD_DTYPE_Q8_0, w, n_in, o0, o1, xq, xrb, R, y, ld_y);
}
#endif

void specd_matmul_rows_fast(uint32_t w_type, const void *w, int64_t n_in, int64_t o_begin,
                            int64_t o_end, const void *xq, size_t xq_row_bytes, int64_t n_rows,
                            float *y, int64_t ld_y, int simd) {
    const int64_t nb = n_in / SPECD_QK;
    const size_t wrb = (size_t)nb * block_bytes(w_type);
    for (int64_t r0 = 0; r0 < n_rows; r0 += ROWS) {
        const int64_t R = n_rows - r0 < ROWS ? n_rows - r0 : ROWS;
        const uint8_t *x = (const uint8_t *)xq + (size_t)r0 * xq_row_bytes;
        float *yr = y + r0 * ld_y;
#if defined(__x86_64__)
        if (simd) {
            if (w_type == SPECD_DTYPE_Q4_1)
                rows_q4_1(w, n_in, o_begin, o_end, x, xq_row_bytes, R, yr, ld_y);
            else if (w_type == SPECD_DTYPE_Q4_0)
                rows_q4_0(w, n_in, o_begin, o_end, x, xq_row_bytes, R, yr, ld_y);
            else
                rows_q8_0(w, n_in, o_begin, o_end, x, xq_row_bytes, R, yr, ld_y);
            continue;
        }
#else
        (void)simd;
#endif
        for (int64_t o = o_begin; o < o_end; o++)
            for (int64_t r = 0; r < R; r++)
                yr[r * ld_y + o] = dot_scalar(w_type, (const char *)w + (size_t)o * wrb, nb,
                                              x + (size_t)r * xq_row_bytes);
    }
}
