#include "kernels/cpu/ops.h"

#include "kernels/cpu/fp16.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* llama.cpp's attention over an F16 cache without flash attention, as its x86 build evaluates a
 * one-token decode: scores = K q16 where q16 is q rounded to F16 and each dot is ggml_vec_dot_f16
 * (four 8-lane accumulators over steps of 32, reduced as below); softmax (softmax.c) over all
 * positions with masked ones at -inf; the probabilities rounded to F16; then each output dim is
 * again ggml_vec_dot_f16 of V^T's row for that dim with the probabilities. Every number depends
 * only on the row's own inputs, whatever the batch.
 *
 * A row whose mask hides positions inside its span (a tree node beside its uncle, a block row)
 * is computed over its visible positions packed together in cache order: the softmax's sums and
 * the mix's dots then group the same keys into the same lanes as a row of a cache that holds only
 * those keys. That is what a drafted token's row must equal: once the accepted path is committed,
 * plain decoding sees exactly those keys, contiguous, and a masked key left holding its lane would
 * change the sums' rounding (llama.cpp keeps the hole, so its tree rows can differ from its decode
 * in the last bits, and a greedy token can flip). A row without holes is unchanged. */

/* ggml_vec_dot_f16's reduction of four 8-lane accumulators (GGML_F32x8_REDUCE). */
static float reduce_4x8(float acc[4][8]) {
    float t[8], h[4];
    for (int l = 0; l < 8; l++)
        t[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
    for (int l = 0; l < 4; l++)
        h[l] = t[l] + t[l + 4];
    return (h[0] + h[1]) + (h[2] + h[3]);
}

/* dot of n F16 values with n floats (already F16-exact); element i goes to accumulator
 * (i / 8) % 4, lane i % 8; n need not be a multiple of 32: missing elements count as zero. */
static float dot_f16_scalar(const uint16_t *x, const float *y, int32_t n) {
    float acc[4][8] = {{0}};
    for (int32_t i = 0; i < n; i++)
        acc[(i >> 3) & 3][i & 7] = fmaf(specd_fp16_to_fp32(x[i]), y[i], acc[(i >> 3) & 3][i & 7]);
    return reduce_4x8(acc);
}

#if defined(__x86_64__)
#define AVX2 __attribute__((target("avx2,fma,f16c")))

static AVX2 inline float reduce_4x8_avx2(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
    const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

static AVX2 inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

/* ggml_vec_dot_f16 for any n, y readable and zero up to n rounded up to 32 (missing elements
 * count as zero, as llama.cpp's masked padding does). x is read only below n: a last partial group
 * goes through a zero-padded copy, since the cache beyond n may hold anything and 0 * inf is not 0. */
static AVX2 inline float dot_f16_avx2(const uint16_t *x, const float *y, int32_t n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    uint16_t xt[32];
    for (int32_t i = 0; i < n; i += 32) {
        const uint16_t *xs = x + i;
        if (n - i < 32) {
            memset(xt, 0, sizeof xt);
            memcpy(xt, xs, (size_t)(n - i) * sizeof *xt);
            xs = xt;
        }
        a0 = _mm256_fmadd_ps(load_f16x8(xs), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(xs + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(xs + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(xs + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    return reduce_4x8_avx2(a0, a1, a2, a3);
}

/* The KV cache is read from memory (the weights stream through the caches between layers), in
 * short strided runs the hardware prefetcher does not follow: K rows of one KV head are 128-byte
 * pieces of kv_dim-wide rows, and V^T rows are n_pos-long pieces of n_ctx-wide rows. Profiles
 * showed attention stalled on those loads, so each loop asks for the rows it reads a little later.
 * Hints only: they may point past the cache and change no result. */
enum { K_AHEAD = 16, V_AHEAD = 2 };

static inline void prefetch_span(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64)
        __builtin_prefetch((const void *)((uintptr_t)p + o), 0, 3);
}

/* the row's K data later in the loop: key j + K_AHEAD */
static inline void prefetch_key(const uint16_t *k, size_t k_stride, int32_t j, int32_t head_dim) {
    prefetch_span((const void *)((uintptr_t)k + (size_t)(j + K_AHEAD) * k_stride * 2),
                  (size_t)head_dim * 2);
}

/* V^T row d + V_AHEAD's first n_pos values */
static inline void prefetch_vrow(const uint16_t *vt, size_t vt_stride, int32_t d, int32_t n_pos) {
    prefetch_span((const void *)((uintptr_t)vt + (size_t)(d + V_AHEAD) * vt_stride * 2),
                  (size_t)n_pos * 2);
}

/* The row's scores in one AVX2 loop (no call per key): scores[j] = dot(K_j, qh) * scale, or -inf
 * where masked. */
static AVX2 void scores_avx2(const uint16_t *k, size_t k_stride, const float *qh,
                             const uint8_t *visible, int32_t n_pos, int32_t head_dim, float scale,
                             float *scores) {
    for (int32_t j = 0; j < n_pos; j++) {
        prefetch_key(k, k_stride, j, head_dim);
        if (visible && !visible[j]) {
            scores[j] = -INFINITY;
            continue;
        }
        scores[j] = dot_f16_avx2(k + (size_t)j * k_stride, qh, head_dim) * scale;
    }
}

/* x rounded to F16 and back, eight at a time */
static AVX2 void round_f16_avx2(const float *x, float *y, int32_t n) {
    int32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i),
                                                                _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++)
        y[i] = specd_fp16_to_fp32(specd_fp32_to_fp16(x[i]));
}

static AVX2 void mix_avx2(const uint16_t *vt, size_t vt_stride, const float *probs, int32_t n_pos,
                          int32_t head_dim, float *out) {
    for (int32_t d = 0; d < head_dim; d++) {
        if (d + V_AHEAD < head_dim) prefetch_vrow(vt, vt_stride, d, n_pos);
        out[d] = dot_f16_avx2(vt + (size_t)d * vt_stride, probs, n_pos);
    }
}

/* --- several query rows over one cache --------------------------------------------------------
 * The query rows of one sequence's new tokens and of the heads that share a KV head read the same
 * K rows and V^T rows: each is converted from F16 once for the whole tile, and every row then takes
 * exactly the operations of specd_attention_row (the same fused multiply-adds into the same
 * accumulators, the same reduction, its own n_pos, mask and zero padding), so every output keeps
 * its bits whatever the tile. */
#define INLINE inline __attribute__((always_inline))

/* Eight keys' (a0 + a2) + (a1 + a3) vectors reduced as reduce_4x8_avx2 reduces each one (the
 * 128-bit halves added, then two horizontal adds), the eight results in key order: the same
 * additions of the same operands, so the same bits, in 15 instructions instead of 56. */
static AVX2 INLINE __m256 reduce_8keys(const __m256 s[8]) {
    __m256 p[4]; /* [halves of key k added | of key k + 4] */
    for (int k = 0; k < 4; k++)
        p[k] = _mm256_add_ps(_mm256_permute2f128_ps(s[k], s[k + 4], 0x20),
                             _mm256_permute2f128_ps(s[k], s[k + 4], 0x31));
    return _mm256_hadd_ps(_mm256_hadd_ps(p[0], p[1]), _mm256_hadd_ps(p[2], p[3]));
}

/* Scores of R rows, eight keys at a time: the keys' K rows converted once (kf, zero-padded to
 * hdp), each row's dot as dot_f16_avx2 computes it. A masked key gets -inf, as in
 * specd_attention_row (its dot is computed and dropped). hdp: a constant where inlined for the
 * common head size, so that the row's q stays in registers. */
static AVX2 INLINE void tile_scores(const specd_attention_query *rows, int32_t R, const uint16_t *k,
                                    size_t k_stride, int32_t n_max, int32_t hd, const int32_t hdp,
                                    float scale, const float *qh, float *pr, size_t p_stride) {
    float kf[8 * 512];
    for (int32_t j0 = 0; j0 < n_max; j0 += 8) {
        for (int32_t kk = 0; kk < 8; kk++) {
            prefetch_key(k, k_stride, j0 + kk, hd);
            float *f = kf + kk * hdp;
            int32_t i = 0;
            if (j0 + kk < n_max) {
                const uint16_t *kr = k + (size_t)(j0 + kk) * k_stride;
                for (; i + 8 <= hd; i += 8)
                    _mm256_storeu_ps(f + i, load_f16x8(kr + i));
                for (; i < hd; i++)
                    f[i] = specd_fp16_to_fp32(kr[i]);
            }
            for (; i < hdp; i++)
                f[i] = 0.0f;
        }
        for (int32_t r = 0; r < R; r++) {
            const int32_t n = rows[r].n_pos - j0;
            if (n <= 0) continue;
            const float *y = qh + (size_t)r * (size_t)hdp;
            __m256 s[8];
#pragma GCC unroll 8
            for (int kk = 0; kk < 8; kk++) {
                const float *f = kf + kk * hdp;
                __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
                for (int32_t e = 0; e < hdp; e += 32) {
                    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(f + e), _mm256_loadu_ps(y + e), a0);
                    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(f + e + 8), _mm256_loadu_ps(y + e + 8), a1);
                    a2 = _mm256_fmadd_ps(_mm256_loadu_ps(f + e + 16), _mm256_loadu_ps(y + e + 16),
                                         a2);
                    a3 = _mm256_fmadd_ps(_mm256_loadu_ps(f + e + 24), _mm256_loadu_ps(y + e + 24),
                                         a3);
                }
                s[kk] = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
            }
            __m256 v = _mm256_mul_ps(reduce_8keys(s), _mm256_set1_ps(scale));
            float *sc = pr + (size_t)r * p_stride + j0;
            const uint8_t *vis = rows[r].visible ? rows[r].visible + j0 : NULL;
            if (n >= 8) {
                if (vis) {
                    int64_t b8;
                    memcpy(&b8, vis, sizeof b8);
                    const __m256i hidden = _mm256_cmpeq_epi32(
                        _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(b8)), _mm256_setzero_si256());
                    v = _mm256_blendv_ps(v, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(hidden));
                }
                _mm256_storeu_ps(sc, v);
            } else {
                float t[8];
                _mm256_storeu_ps(t, v);
                for (int32_t kk = 0; kk < n; kk++)
                    sc[kk] = vis && !vis[kk] ? -INFINITY : t[kk];
            }
        }
    }
}

/* out[d] of S rows (p: their probabilities, zero-padded to 32; np: their n_pos, 0 = no row) for one
 * V^T row: each 32-position chunk converted once; a row whose n_pos ends inside the chunk takes it
 * with the positions past its end zeroed, as dot_f16_avx2's padded copy does. */
static AVX2 INLINE void mix_rows(const uint16_t *vr, const float *const *p, const int32_t *np,
                                 const int S, float *res) {
    int32_t n_max = 0;
    for (int s = 0; s < S; s++)
        n_max = np[s] > n_max ? np[s] : n_max;
    __m256 acc[8][4];
#pragma GCC unroll 8
    for (int s = 0; s < S; s++)
        acc[s][0] = acc[s][1] = acc[s][2] = acc[s][3] = _mm256_setzero_ps();
    const __m256i iota0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    uint16_t xt[32];
    for (int32_t i = 0; i < n_max; i += 32) {
        const uint16_t *xs = vr + i;
        if (n_max - i < 32) {
            memset(xt, 0, sizeof xt);
            memcpy(xt, xs, (size_t)(n_max - i) * sizeof *xt);
            xs = xt;
        }
        const __m256 v0 = load_f16x8(xs), v1 = load_f16x8(xs + 8);
        const __m256 v2 = load_f16x8(xs + 16), v3 = load_f16x8(xs + 24);
#pragma GCC unroll 8
        for (int s = 0; s < S; s++) {
            const int32_t left = np[s] - i;
            if (left <= 0) continue;
            __m256 w0 = v0, w1 = v1, w2 = v2, w3 = v3;
            if (left < 32) {
                const __m256i n = _mm256_set1_epi32(left);
                w0 = _mm256_and_ps(w0, _mm256_castsi256_ps(_mm256_cmpgt_epi32(n, iota0)));
                w1 = _mm256_and_ps(w1, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                           n, _mm256_add_epi32(iota0, _mm256_set1_epi32(8)))));
                w2 = _mm256_and_ps(w2, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                           n, _mm256_add_epi32(iota0, _mm256_set1_epi32(16)))));
                w3 = _mm256_and_ps(w3, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                           n, _mm256_add_epi32(iota0, _mm256_set1_epi32(24)))));
            }
            const float *y = p[s] + i;
            acc[s][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(y), acc[s][0]);
            acc[s][1] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(y + 8), acc[s][1]);
            acc[s][2] = _mm256_fmadd_ps(w2, _mm256_loadu_ps(y + 16), acc[s][2]);
            acc[s][3] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(y + 24), acc[s][3]);
        }
    }
#pragma GCC unroll 8
    for (int s = 0; s < S; s++)
        res[s] = reduce_4x8_avx2(acc[s][0], acc[s][1], acc[s][2], acc[s][3]);
}

/* The whole tile; S rows per mix pass (as many as the vector registers hold). */
static AVX2 INLINE void tile_rows(const specd_attention_query *rows, int32_t R, const uint16_t *k,
                                  size_t k_stride, const uint16_t *vt, size_t vt_stride,
                                  int32_t hd, float scale, float *qh, float *pr, size_t p_stride,
                                  const int S) {
    const int32_t hdp = (hd + 31) & ~31;
    int32_t n_max = 0;
    for (int32_t r = 0; r < R; r++) {
        float *y = qh + (size_t)r * (size_t)hdp;
        round_f16_avx2(rows[r].q, y, hd);
        for (int32_t d = hd; d < hdp; d++)
            y[d] = 0.0f;
        n_max = rows[r].n_pos > n_max ? rows[r].n_pos : n_max;
    }
    if (hdp == 64)
        tile_scores(rows, R, k, k_stride, n_max, hd, 64, scale, qh, pr, p_stride);
    else
        tile_scores(rows, R, k, k_stride, n_max, hd, hdp, scale, qh, pr, p_stride);
    for (int32_t r = 0; r < R; r++) {
        float *sc = pr + (size_t)r * p_stride;
        const int32_t n = rows[r].n_pos;
        specd_softmax_f32(sc, n, 1);
        round_f16_avx2(sc, sc, n);
        for (int32_t j = n; j % 32; j++)
            sc[j] = 0.0f;
    }
    for (int32_t r0 = 0; r0 < R; r0 += S) {
        const float *p[8];
        int32_t np[8];
        float res[8];
        for (int s = 0; s < S; s++) {
            const int live = r0 + s < R;
            p[s] = pr + (size_t)(live ? r0 + s : r0) * p_stride;
            np[s] = live ? rows[r0 + s].n_pos : 0;
        }
        for (int32_t d = 0; d < hd; d++) {
            if (d + V_AHEAD < hd) prefetch_vrow(vt, vt_stride, d, n_max);
            mix_rows(vt + (size_t)d * vt_stride, p, np, S, res);
            for (int s = 0; s < S && r0 + s < R; s++)
                rows[r0 + s].out[d] = res[s];
        }
    }
}

static AVX2 void tile_rows_avx2(const specd_attention_query *rows, int32_t R, const uint16_t *k,
                                size_t k_stride, const uint16_t *vt, size_t vt_stride, int32_t hd,
                                float scale, float *qh, float *pr, size_t p_stride) {
    tile_rows(rows, R, k, k_stride, vt, vt_stride, hd, scale, qh, pr, p_stride, 2);
}

/* The same instructions with AVX-512VL's 32 ymm registers: six rows per mix pass. */
__attribute__((target("avx512f,avx512vl,avx2,fma,f16c"))) static void
tile_rows_avx512(const specd_attention_query *rows, int32_t R, const uint16_t *k, size_t k_stride,
                 const uint16_t *vt, size_t vt_stride, int32_t hd, float scale, float *qh,
                 float *pr, size_t p_stride) {
    tile_rows(rows, R, k, k_stride, vt, vt_stride, hd, scale, qh, pr, p_stride, 6);
}
#endif

/* 1 when the mask hides a position before n_pos */
static int has_hole(const uint8_t *visible, int32_t n_pos) {
    return visible && n_pos > 0 && memchr(visible, 0, (size_t)n_pos) != NULL;
}

#if defined(__x86_64__)
/* A tree row's holes are all near its end (its uncles among the step's tokens): the packed
 * sequence is positions [0, h) of the cache as they are, then a few visible positions past h.
 * Gathering whole V^T rows for it cost more than the row's matmuls at a long context. */
enum { TAIL_MOST = 256 }; /* tail positions (the step's visible ones past the first hole) */

/* dot_f16_avx2 of the packed sequence x[0..h) ++ x[tail[0..n_tail)] with y: the 32-position
 * chunks wholly below h read x in place, the rest goes through a zero-padded copy (the same
 * multiply-adds into the same accumulators, chunk by chunk, so the same bits). y is readable and
 * zero up to h + n_tail rounded up to 32. */
static AVX2 float dot_f16_split_avx2(const uint16_t *x, int32_t h, const int32_t *tail,
                                     int32_t n_tail, const float *y) {
    const int32_t base = h & ~31, n_rest = h - base + n_tail;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int32_t i = 0; i < base; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(x + i), _mm256_loadu_ps(y + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(x + i + 8), _mm256_loadu_ps(y + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(x + i + 16), _mm256_loadu_ps(y + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(x + i + 24), _mm256_loadu_ps(y + i + 24), a3);
    }
    uint16_t xt[TAIL_MOST + 64];
    int32_t t = 0;
    for (int32_t j = base; j < h; j++) xt[t++] = x[j];
    for (int32_t j = 0; j < n_tail; j++) xt[t++] = x[tail[j]];
    for (; t % 32; t++) xt[t] = 0;
    const float *yr = y + base;
    for (int32_t i = 0; i < n_rest; i += 32) {
        a0 = _mm256_fmadd_ps(load_f16x8(xt + i), _mm256_loadu_ps(yr + i), a0);
        a1 = _mm256_fmadd_ps(load_f16x8(xt + i + 8), _mm256_loadu_ps(yr + i + 8), a1);
        a2 = _mm256_fmadd_ps(load_f16x8(xt + i + 16), _mm256_loadu_ps(yr + i + 16), a2);
        a3 = _mm256_fmadd_ps(load_f16x8(xt + i + 24), _mm256_loadu_ps(yr + i + 24), a3);
    }
    return reduce_4x8_avx2(a0, a1, a2, a3);
}
#endif

/* specd_attention_row over the visible positions packed in cache order (see the top of the file).
 * The scores are computed per key as for any row, then packed; the probabilities go to probs
 * packed. Each V^T row's dot then reads the positions before the first hole in place and gathers
 * only the few visible ones after it (dot_f16_split_avx2); a mask with many of those (not a tree
 * row's) gathers each V^T row's visible values into scores' space (free by then: n_pos floats
 * hold 2 * n_pos halves) before the same dot. */
static void attention_row_packed(const float *q, const uint16_t *k, size_t k_stride,
                                 const uint16_t *vt, size_t vt_stride, const uint8_t *visible,
                                 int32_t n_pos, int32_t head_dim, float scale, float *scores,
                                 float *probs, float *out, int simd) {
    float qh[512]; /* head_dim <= 512, checked at model load */
    for (int32_t d = head_dim; d % 32; d++)
        qh[d] = 0.0f;
    int32_t m = 0;
#if defined(__x86_64__)
    if (simd) {
        round_f16_avx2(q, qh, head_dim);
        for (int32_t j = 0; j < n_pos; j++)
            if (visible[j]) scores[m++] = dot_f16_avx2(k + (size_t)j * k_stride, qh, head_dim) * scale;
    } else
#endif
    {
        for (int32_t d = 0; d < head_dim; d++)
            qh[d] = specd_fp16_to_fp32(specd_fp32_to_fp16(q[d]));
        for (int32_t j = 0; j < n_pos; j++)
            if (visible[j])
                scores[m++] = dot_f16_scalar(k + (size_t)j * k_stride, qh, head_dim) * scale;
    }
    specd_softmax_f32(scores, m, simd);
    for (int32_t j = 0; j < m; j++)
        probs[j] = specd_fp16_to_fp32(specd_fp32_to_fp16(scores[j]));
    for (int32_t j = m; j % 32; j++)
        probs[j] = 0.0f;
#if defined(__x86_64__)
    if (simd) {
        const int32_t h = (int32_t)((const uint8_t *)memchr(visible, 0, (size_t)n_pos) - visible);
        int32_t tail[TAIL_MOST], n_tail = 0;
        for (int32_t j = h; j < n_pos && n_tail <= TAIL_MOST - 32; j++)
            if (visible[j]) tail[n_tail++] = j;
        if (h + n_tail == m) { /* every visible position found: a tail that fits */
            for (int32_t d = 0; d < head_dim; d++) {
                if (d + V_AHEAD < head_dim) prefetch_vrow(vt, vt_stride, d, h);
                out[d] = dot_f16_split_avx2(vt + (size_t)d * vt_stride, h, tail, n_tail, probs);
            }
            return;
        }
    }
#endif
    uint16_t *vg = (uint16_t *)(void *)scores;
    for (int32_t d = 0; d < head_dim; d++) {
        const uint16_t *vr = vt + (size_t)d * vt_stride;
        int32_t t = 0;
        for (int32_t j = 0; j < n_pos; j++)
            if (visible[j]) vg[t++] = vr[j];
#if defined(__x86_64__)
        if (simd) {
            out[d] = dot_f16_avx2(vg, probs, m);
            continue;
        }
#endif
        out[d] = dot_f16_scalar(vg, probs, m);
    }
}

size_t specd_attention_rows_work(int32_t n_rows, int32_t n_pos_max, int32_t head_dim) {
    return (size_t)n_rows * ((((size_t)n_pos_max + 31) & ~(size_t)31) +
                             (((size_t)head_dim + 31) & ~(size_t)31));
}

void specd_attention_rows(const specd_attention_query *rows, int32_t n_rows, const uint16_t *k,
                          size_t k_stride, const uint16_t *vt, size_t vt_stride, int32_t head_dim,
                          float scale, float *work, size_t work_floats, float *scores,
                          float *probs, int simd) {
#if defined(__x86_64__)
    /* rows with holes go alone (packed); the rest share the tile */
    specd_attention_query plain[64];
    if (n_rows <= 64) {
        int32_t n_plain = 0;
        for (int32_t r = 0; r < n_rows; r++) {
            if (has_hole(rows[r].visible, rows[r].n_pos))
                attention_row_packed(rows[r].q, k, k_stride, vt, vt_stride, rows[r].visible,
                                     rows[r].n_pos, head_dim, scale, scores, probs, rows[r].out,
                                     simd);
            else
                plain[n_plain++] = rows[r];
        }
        rows = plain;
        n_rows = n_plain;
    }
    int32_t n_max = 0;
    for (int32_t r = 0; r < n_rows; r++)
        n_max = rows[r].n_pos > n_max ? rows[r].n_pos : n_max;
    if (simd && n_rows > 1 && rows == plain && work &&
        specd_attention_rows_work(n_rows, n_max, head_dim) <= work_floats) {
        const size_t p_stride = ((size_t)n_max + 31) & ~(size_t)31;
        float *qh = work + (size_t)n_rows * p_stride;
        if (simd >= 2)
            tile_rows_avx512(rows, n_rows, k, k_stride, vt, vt_stride, head_dim, scale, qh, work,
                             p_stride);
        else
            tile_rows_avx2(rows, n_rows, k, k_stride, vt, vt_stride, head_dim, scale, qh, work,
                           p_stride);
        return;
    }
#endif
    for (int32_t r = 0; r < n_rows; r++)
        specd_attention_row(rows[r].q, k, k_stride, vt, vt_stride, rows[r].visible, rows[r].n_pos,
                            head_dim, scale, scores, probs, rows[r].out, simd);
}

void specd_attention_row(const float *q, const uint16_t *k, size_t k_stride, const uint16_t *vt,
                         size_t vt_stride, const uint8_t *visible, int32_t n_pos, int32_t head_dim,
                         float scale, float *scores, float *probs, float *out, int simd) {
    if (has_hole(visible, n_pos)) {
        attention_row_packed(q, k, k_stride, vt, vt_stride, visible, n_pos, head_dim, scale, scores,
                             probs, out, simd);
        return;
    }
    float qh[512]; /* head_dim <= 512, checked at model load */
    /* the dots read q up to head_dim rounded up to 32: zeros there (the K side is zero-padded) */
    for (int32_t d = head_dim; d % 32; d++)
        qh[d] = 0.0f;
#if defined(__x86_64__)
    if (simd) {
        round_f16_avx2(q, qh, head_dim);
        scores_avx2(k, k_stride, qh, visible, n_pos, head_dim, scale, scores);
        specd_softmax_f32(scores, n_pos, simd);
        round_f16_avx2(scores, probs, n_pos);
        for (int32_t j = n_pos; j % 32; j++)
            probs[j] = 0.0f;
        mix_avx2(vt, vt_stride, probs, n_pos, head_dim, out);
        return;
    }
#endif
    for (int32_t d = 0; d < head_dim; d++)
        qh[d] = specd_fp16_to_fp32(specd_fp32_to_fp16(q[d]));
    for (int32_t j = 0; j < n_pos; j++)
        scores[j] = visible && !visible[j]
                        ? -INFINITY
                        : dot_f16_scalar(k + (size_t)j * k_stride, qh, head_dim) * scale;
    specd_softmax_f32(scores, n_pos, simd);
    for (int32_t j = 0; j < n_pos; j++)
        probs[j] = specd_fp16_to_fp32(specd_fp32_to_fp16(scores[j]));
    for (int32_t d = 0; d < head_dim; d++)
        out[d] = dot_f16_scalar(vt + (size_t)d * vt_stride, probs, n_pos);
}
