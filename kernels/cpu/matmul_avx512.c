/* AVX-512 VNNI tiles for Q4_0, Q4_1 and Q8_0 weights against Q8_0/Q8_1 activations: each weight
 * block is loaded and unpacked once for up to 16 activation rows.
 *
 * Exactness: every (weight row, activation row) pair gets the operations of its AVX2 vec_dot
 * (kernels/cpu/quant_32.c documents llama.cpp's x86 order): per block, eight exact int32 sums of
 * four products, lane += (d_w * d_x) * sum by one fused multiply-add, and for Q4_1 a scalar
 * min_w * s_x fused into a separate sum; at the end the lanes are summed as
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) and the scalar added. vpdpbusd computes the integer sums
 * exactly (no int16 saturation, unlike the AVX2 maddubs, which never saturates on these ranges
 * either), so the AVX-512 path gives the AVX2 path's bits.
 *
 * Layout: one zmm accumulator holds two pairs, (w0, x) in the low eight lanes and (w1, x) in the
 * high eight, so a weight-row pair's unpacked blocks sit in one register and an activation
 * block is broadcast to both halves. vpdpbusd wants unsigned x signed bytes: Q4_1 nibbles are
 * unsigned already; Q4_0 (nibble - 8) and Q8_0 (w = (w ^ 0x80) - 128) use the unsigned form and
 * take k * sum(x) off through the accumulator input, k * sum(x) precomputed once per activation
 * block.
 *
 * The file is compiled for x86-64 at large; only these functions carry the AVX-512 target, and
 * they run only when cpu_dispatch.c found the CPU and OS able to. */
#include "kernels/cpu/matmul_avx512.h"

#include "kernels/cpu/fp16.h"
#include "kernels/cpu/lanes_avx2.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512                                                                                     \
    __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))
#define INLINE inline __attribute__((always_inline))

enum { GROUP = 16, PREFETCH_AHEAD = 1024 };

/* What a group of up to 16 activation rows needs per block, gathered once so the tile loop
 * reads it with broadcasts at fixed offsets from one pointer per block (no per-row pointers to
 * keep in registers or reload): the 32 quants, scale d, Q8_1's s, and the int32 correction
 * -k * sum(4 quants). */
typedef struct act_group {
    int rows;
    const char *x[GROUP]; /* row r's block b: x[r] + b * xb */
    size_t xb;
    uint8_t *q;    /* [(b * GROUP + r) * 32]: the quants of row r's block b */
    float *d;      /* [b * GROUP + r] */
    float *s;      /* [b * GROUP + r], Q4_1 only */
    int32_t *corr; /* [(b * GROUP + r) * 8 + lane], Q4_0/Q8_0 only */
} act_group;

/* the first four bytes of a block (fp16 d, and m for Q4_1) in the low lane */
static AVX512 INLINE __m128i head32(const void *block) {
    int32_t v;
    memcpy(&v, block, sizeof v);
    return _mm_cvtsi32_si128(v);
}

static AVX512 void gather_group(uint32_t w_type, int64_t nb, act_group *g) {
    const __m256i k = _mm256_set1_epi8(w_type == SPECD_DTYPE_Q4_0 ? 8 : (char)0x80);
    for (int64_t b = 0; b < nb; b++) {
        for (int r = 0; r < GROUP; r++) {
            const size_t i = (size_t)b * GROUP + (size_t)r;
            if (r >= g->rows) { /* padding lanes of the mins vectors: never read back */
                g->d[i] = 0.0f;
                if (g->s) g->s[i] = 0.0f;
                continue;
            }
            const char *blk = g->x[r] + (size_t)b * g->xb;
            memcpy(g->q + i * 32, blk + (g->s ? 4 : 2), 32);
            uint16_t h[2];
            memcpy(h, blk, sizeof h);
            g->d[i] = specd_fp16_to_fp32(h[0]);
            if (g->s) g->s[i] = specd_fp16_to_fp32(h[1]);
            if (g->corr) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 2));
                const __m256i ks = _mm256_dpbusd_epi32(_mm256_setzero_si256(), k, q);
                _mm256_storeu_si256((__m256i *)(g->corr + i * 8),
                                    _mm256_sub_epi32(_mm256_setzero_si256(), ks));
            }
        }
    }
}

/* Blocks b of weight rows w0 and w1 as unsigned bytes, w0's in the low half. */
static AVX512 INLINE __m512i unpack_pair(uint32_t t, const char *b0, const char *b1) {
    if (t == SPECD_DTYPE_Q8_0) {
        const __m512i w = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b0 + 2))),
            _mm256_loadu_si256((const __m256i *)(b1 + 2)), 1);
        return _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80));
    }
    const size_t off = t == SPECD_DTYPE_Q4_1 ? 4 : 2;
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(b0 + off));
    const __m128i q1 = _mm_loadu_si128((const __m128i *)(b1 + off));
    /* [q0 q0 q1 q1], then the odd 128-bit lanes shifted by 4: low nibbles, high nibbles */
    const __m512i q = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(q0, q0)), _mm256_set_m128i(q1, q1), 1);
    const __m512i sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    return _mm512_and_si512(_mm512_srlv_epi64(q, sh), _mm512_set1_epi8(0x0f));
}

/* Weight rows x0, x1 against the group's R rows: out0[r], out1[r]. */
static AVX512 INLINE void tile(uint32_t t, const int R, int64_t nb, const act_group *g,
                               const char *x0, const char *x1, float *out0, float *out1) {
    const size_t wb = t == SPECD_DTYPE_Q8_0   ? sizeof(specd_block_q8_0)
                      : t == SPECD_DTYPE_Q4_1 ? sizeof(specd_block_q4_1)
                                              : sizeof(specd_block_q4_0);
    const size_t qoff = t == SPECD_DTYPE_Q4_1 ? 4 : 2; /* activation quants: Q8_1 or Q8_0 */
    const int q41 = t == SPECD_DTYPE_Q4_1;
    __m512 acc[GROUP];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
        acc[r] = _mm512_setzero_ps();
    __m512 mins_lo = _mm512_setzero_ps(), mins_hi = _mm512_setzero_ps();
    const __m512i lo_m = _mm512_setr_epi32(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m512i lo_d = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
    (void)qoff;
    for (int64_t b = 0; b < nb; b++) {
        const char *b0 = x0 + (size_t)b * wb, *b1 = x1 + (size_t)b * wb;
        /* as in one_row below */
        _mm_prefetch((const char *)((uintptr_t)b1 + PREFETCH_AHEAD), _MM_HINT_T0);
        const __m512i w = unpack_pair(t, b0, b1);
        /* d0 m0 d1 m1 (for Q4_0/Q8_0 the m slots hold quant bytes, never used) */
        const __m512 h = _mm512_castps128_ps512(
            _mm_cvtph_ps(_mm_unpacklo_epi32(head32(b0), head32(b1))));
        /* each row's scale products [d_w0 * d_xr x8 | d_w1 * d_xr x8]: one multiply by a
         * broadcast from memory (padding rows are never read) */
        const __m512 wd = _mm512_permutexvar_ps(lo_d, h);
        const float *xd = g->d + (size_t)b * GROUP;
        const uint8_t *xqb = g->q + (size_t)b * GROUP * 32;
        const int32_t *cb = q41 ? NULL : g->corr + (size_t)b * GROUP * 8;
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            const __m512i xq =
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(xqb + r * 32)));
            const __m512i c0 = q41 ? _mm512_setzero_si512()
                                   : _mm512_broadcast_i64x4(
                                         _mm256_loadu_si256((const __m256i *)(cb + r * 8)));
            const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c0, w, xq));
            const __m512 dd = _mm512_mul_ps(wd, _mm512_set1_ps(xd[r]));
            acc[r] = _mm512_fmadd_ps(dd, sum, acc[r]);
        }
        if (q41) { /* lanes: (w0, x0..7) then (w1, x0..7); rows 8..15 in mins_hi */
            const __m512 mw = _mm512_permutexvar_ps(lo_m, h);
            const float *gs = g->s + (size_t)b * GROUP;
            mins_lo = _mm512_fmadd_ps(mw, _mm512_broadcast_f32x8(_mm256_loadu_ps(gs)), mins_lo);
            if (R > 8)
                mins_hi =
                    _mm512_fmadd_ps(mw, _mm512_broadcast_f32x8(_mm256_loadu_ps(gs + 8)), mins_hi);
        }
    }
    float m[32];
    _mm512_storeu_ps(m, mins_lo);
    _mm512_storeu_ps(m + 16, mins_hi);
#pragma GCC unroll 16
    for (int r = 0; r < R; r++) {
        const float m0 = r < 8 ? m[r] : m[16 + r - 8], m1 = r < 8 ? m[8 + r] : m[24 + r - 8];
        const float s0 = specd_lanes_sum_avx2(_mm512_castps512_ps256(acc[r]));
        const float s1 = specd_lanes_sum_avx2(_mm512_extractf32x8_ps(acc[r], 1));
        /* Q4_0/Q8_0 have no mins term: the AVX2 kernels return the lane sum as it is */
        out0[r] = q41 ? s0 + m0 : s0;
        out1[r] = q41 ? s1 + m1 : s1;
    }
}

/* A decode (one activation row): the 16-lane scale products above would be mostly padding, so
 * two weight rows go through 256-bit vpdpbusd with scalar scale products, the order of the AVX2
 * decode kernel (matmul.c, q4_1_2x1): per row lane += (d_w * d_x) * sum, mins = fma(m_w, s_x). */
static AVX512 INLINE void one_row(uint32_t t, int64_t nb, const act_group *g, const char *x0,
                                  const char *x1, float *out0, float *out1) {
    const size_t wb = t == SPECD_DTYPE_Q8_0   ? sizeof(specd_block_q8_0)
                      : t == SPECD_DTYPE_Q4_1 ? sizeof(specd_block_q4_1)
                                              : sizeof(specd_block_q4_0);
    const size_t qoff = t == SPECD_DTYPE_Q4_1 ? 4 : 2;
    const int q41 = t == SPECD_DTYPE_Q4_1;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0;
    float mins0 = 0.0f, mins1 = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const char *b0 = x0 + (size_t)b * wb, *b1 = x1 + (size_t)b * wb;
        /* the rows lie one after another, so PREFETCH_AHEAD bytes on is a later row's block: the
         * hardware prefetcher alone left a decode at a third of the stream bandwidth (a hint
         * only, it may point past the matrix) */
        _mm_prefetch((const char *)((uintptr_t)b1 + PREFETCH_AHEAD), _MM_HINT_T0);
        __m256i w0, w1;
        if (t == SPECD_DTYPE_Q8_0) {
            const __m256i k = _mm256_set1_epi8((char)0x80);
            w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b0 + 2)), k);
            w1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(b1 + 2)), k);
        } else {
            const __m256i q = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)(b1 + qoff)),
                                               _mm_loadu_si128((const __m128i *)(b0 + qoff)));
            const __m256i m = _mm256_set1_epi8(0x0f);
            const __m256i lo = _mm256_and_si256(q, m);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m);
            w0 = _mm256_permute2x128_si256(lo, hi, 0x20);
            w1 = _mm256_permute2x128_si256(lo, hi, 0x31);
        }
        float f[4];
        _mm_storeu_ps(f, _mm_cvtph_ps(_mm_unpacklo_epi32(head32(b0), head32(b1))));
        const float xd = g->d[(size_t)b * GROUP];
        const __m256i xq = _mm256_loadu_si256((const __m256i *)(g->x[0] + (size_t)b * g->xb + qoff));
        const __m256i c0 =
            q41 ? _mm256_setzero_si256()
                : _mm256_loadu_si256((const __m256i *)(g->corr + (size_t)b * GROUP * 8));
        if (q41) {
            const float xs = g->s[(size_t)b * GROUP];
            mins0 = fmaf(f[1], xs, mins0);
            mins1 = fmaf(f[3], xs, mins1);
        }
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(f[0] * xd),
                               _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c0, w0, xq)), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(f[2] * xd),
                               _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(c0, w1, xq)), acc1);
    }
    *out0 = q41 ? specd_lanes_sum_avx2(acc0) + mins0 : specd_lanes_sum_avx2(acc0);
    *out1 = q41 ? specd_lanes_sum_avx2(acc1) + mins1 : specd_lanes_sum_avx2(acc1);
}

/* One specialisation per (type, rows) so that the accumulators stay in registers. */
#define TILE_FN(name, T)                                                                           \
    static AVX512 void name(int R, int64_t nb, const act_group *g, const char *x0,                 \
                            const char *x1, float *o0, float *o1) {                                \
        switch (R) {                                                                               \
        case 1: one_row(T, nb, g, x0, x1, o0, o1); break;                                          \
        case 2: tile(T, 2, nb, g, x0, x1, o0, o1); break;                                          \
        case 3: tile(T, 3, nb, g, x0, x1, o0, o1); break;                                          \
        case 4: tile(T, 4, nb, g, x0, x1, o0, o1); break;                                          \
        case 5: tile(T, 5, nb, g, x0, x1, o0, o1); break;                                          \
        case 6: tile(T, 6, nb, g, x0, x1, o0, o1); break;                                          \
        case 7: tile(T, 7, nb, g, x0, x1, o0, o1); break;                                          \
        case 8: tile(T, 8, nb, g, x0, x1, o0, o1); break;                                          \
        case 9: tile(T, 9, nb, g, x0, x1, o0, o1); break;                                          \
        case 10: tile(T, 10, nb, g, x0, x1, o0, o1); break;                                        \
        case 11: tile(T, 11, nb, g, x0, x1, o0, o1); break;                                        \
        case 12: tile(T, 12, nb, g, x0, x1, o0, o1); break;                                        \
        case 13: tile(T, 13, nb, g, x0, x1, o0, o1); break;                                        \
        case 14: tile(T, 14, nb, g, x0, x1, o0, o1); break;                                        \
        case 15: tile(T, 15, nb, g, x0, x1, o0, o1); break;                                        \
        default: tile(T, 16, nb, g, x0, x1, o0, o1); break;                                        \
        }                                                                                          \
    }
TILE_FN(tile_q4_0, SPECD_DTYPE_Q4_0)
TILE_FN(tile_q4_1, SPECD_DTYPE_Q4_1)
TILE_FN(tile_q8_0, SPECD_DTYPE_Q8_0)
#undef TILE_FN

int specd_matmul_rows_avx512(uint32_t w_type, const void *w, int64_t n_in, int64_t o_begin,
                             int64_t o_end, const void *xq, size_t xq_row_bytes, int64_t n_rows,
                             float *y, int64_t ld_y) {
    if (n_in % SPECD_QK != 0) return 0;
    void (*fn)(int, int64_t, const act_group *, const char *, const char *, float *, float *);
    size_t xb;
    if (w_type == SPECD_DTYPE_Q4_0) {
        fn = tile_q4_0;
        xb = sizeof(specd_block_q8_0);
    } else if (w_type == SPECD_DTYPE_Q4_1) {
        fn = tile_q4_1;
        xb = sizeof(specd_block_q8_1);
    } else if (w_type == SPECD_DTYPE_Q8_0) {
        fn = tile_q8_0;
        xb = sizeof(specd_block_q8_0);
    } else {
        return 0;
    }
    const int64_t nb = n_in / SPECD_QK;
    const size_t wrb = specd_dtype_row_bytes(w_type, n_in);
    const int q41 = w_type == SPECD_DTYPE_Q4_1;
    /* per block: d, s (Q4_1) or the corrections (Q4_0/Q8_0) of the group's rows */
    const size_t per_block =
        GROUP * sizeof(float) * 2 + (q41 ? 0 : GROUP * 8 * sizeof(int32_t)) + GROUP * 32;
    char *scratch = malloc((size_t)nb * per_block);
    if (!scratch) return 0;
    act_group g = {.xb = xb, .d = (float *)scratch};
    g.s = q41 ? g.d + nb * GROUP : NULL;
    g.corr = q41 ? NULL : (int32_t *)(g.d + nb * GROUP * 2);
    g.q = (uint8_t *)(g.d + nb * GROUP * 2) + (q41 ? 0 : (size_t)nb * GROUP * 8 * sizeof(int32_t));
    /* Activation groups outside, weight rows inside: an extend of up to 16 rows streams the
     * weights once, in memory order (two rows at a time, as the decode path does). */
    for (int64_t r0 = 0; r0 < n_rows; r0 += GROUP) {
        g.rows = (int)(n_rows - r0 < GROUP ? n_rows - r0 : GROUP);
        for (int r = 0; r < g.rows; r++)
            g.x[r] = (const char *)xq + (size_t)(r0 + r) * xq_row_bytes;
        gather_group(w_type, nb, &g);
        float o0[GROUP], o1[GROUP];
        for (int64_t o = o_begin; o < o_end; o += 2) {
            const char *x0 = (const char *)w + (size_t)o * wrb;
            const int two = o + 1 < o_end;
            fn(g.rows, nb, &g, x0, two ? x0 + wrb : x0, o0, o1);
            for (int r = 0; r < g.rows; r++) {
                y[(r0 + r) * ld_y + o] = o0[r];
                if (two) y[(r0 + r) * ld_y + o + 1] = o1[r];
            }
        }
    }
    free(scratch);
    return 1;
}

#else
int specd_matmul_rows_avx512(uint32_t w_type, const void *w, int64_t n_in, int64_t o_begin,
                             int64_t o_end, const void *xq, size_t xq_row_bytes, int64_t n_rows,
                             float *y, int64_t ld_y) {
    return 0;
}
#endif
