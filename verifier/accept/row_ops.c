/* Row kernels: one always-inline body each, compiled for baseline x86-64 and for AVX2. */
#include "verifier/accept/row_ops.h"

#include <math.h>
#include <string.h>

#include "common/fastmath.h"
#include "common/philox.h"
#include "verifier/accept/simd.h"
#include "verifier/accept/xform.h"

/* ---- row kernels: one always-inline body, compiled for baseline x86-64 and for AVX2 ------- */

/* NaN/Inf flag, block maxima and the row's extremes. */
SPECD_INLINE int check_body(const float *l, int32_t n, float *bmax, float *gmax, float *gmin) {
    specd_v8i bad = {0};
    specd_v8f vmx = v8_splat(-INFINITY), vmn = v8_splat(INFINITY);
    int32_t b = 0;
    for (; b + SPECD_BLOCK <= n; b += SPECD_BLOCK) {
        specd_v8f m = v8_load(l + b), mn = m;
        bad |= (m - m) != v8_splat(0.0f); /* NaN and +-Inf give NaN */
        for (int32_t i = 8; i < SPECD_BLOCK; i += 8) {
            specd_v8f v = v8_load(l + b + i);
            bad |= (v - v) != v8_splat(0.0f);
            m = v8_max(v, m);
            mn = v8_min(v, mn);
        }
        bmax[b / SPECD_BLOCK] = v8_hmax(m);
        vmx = v8_max(m, vmx);
        vmn = v8_min(mn, vmn);
    }
    float mx = v8_hmax(vmx), mi = v8_hmin(vmn);
    int flag = 0;
    for (int i = 0; i < 8; i++) flag |= bad[i];
    if (b < n) {
        float m = l[b];
        for (int32_t x = b; x < n; x++) {
            float v = l[x];
            flag |= !(v - v == 0.0f);
            m = v > m ? v : m;
            mi = v < mi ? v : mi;
        }
        bmax[b / SPECD_BLOCK] = m;
        mx = m > mx ? m : mx;
    }
    *gmax = mx;
    *gmin = mi;
    return flag;
}

/* acc[j] += e of tokens j, j + 256, ... (unfiltered rows). */
SPECD_INLINE void sum_body(const float *l, int32_t n, float t, float zmax, float *acc) {
    const int unit = t == 1.0f; /* l / 1 == l exactly: skip the division */
    const specd_v8f vz = v8_splat(zmax), vt = v8_splat(t);
    int32_t i = 0;
    for (; i + SPECD_SUM_LANES <= n; i += SPECD_SUM_LANES) {
        for (int32_t g = 0; g < SPECD_SUM_LANES; g += 8) {
            specd_v8f z = v8_load(l + i + g);
            if (!unit) z = z / vt;
            v8_store(acc + g, v8_load(acc + g) + v8_exp_neg(z - vz));
        }
    }
    for (int32_t j = 0; i + j < n; j++) {
        float z = unit ? l[i + j] : l[i + j] / t;
        acc[j] += specd_fast_exp_neg(z - zmax);
    }
}

/* acc[j] += v[j], v[j + 256], ...; returns nonzero when some v is not in [0, 1]. */
SPECD_INLINE int lanesum_body(const float *v, int32_t n, float *acc) {
    specd_v8i bad = {0};
    int32_t i = 0;
    for (; i + SPECD_SUM_LANES <= n; i += SPECD_SUM_LANES) {
        for (int32_t g = 0; g < SPECD_SUM_LANES; g += 8) {
            specd_v8f x = v8_load(v + i + g);
            bad |= ~((x >= v8_splat(0.0f)) & (x <= v8_splat(1.0f)));
            v8_store(acc + g, v8_load(acc + g) + x);
        }
    }
    int flag = 0;
    for (int k = 0; k < 8; k++) flag |= bad[k];
    for (int32_t j = 0; i + j < n; j++) {
        float x = v[i + j];
        flag |= !(x >= 0.0f && x <= 1.0f);
        acc[j] += x;
    }
    return flag;
}

/* Scores z + G of the 64 tokens of block b0 (a full block), key words kk, counter words 1..3 in
 * ctr. Same operations as the scalar path, so the same bits. */
/* Folds the keyed scores z + G of tokens x0 .. x0 + 7 (Philox words w) into (*best, *best_i):
 * higher score, then lower index, wins. G(m) = -ln(-ln u) <= -ln(1 - u), and with
 * d = (1 - u) 2^24 = 2^24 - 2m - 1, an odd integer below 2^24 and so exact as a float,
 * -ln(1 - u) <= ln2 (24 - floor(log2 d)), read from d's exponent field. When no token's bound
 * plus a 1/64 margin (far above the rounding of z + G) reaches the best, none can win; otherwise
 * the exact Gumbel values decide. */
SPECD_INLINE void fold8(const float *l, int32_t x0, float t, const specd_v8u *wp, float *best,
                        int32_t *best_i) {
    specd_v8u w = *wp; /* by pointer: clang rejects 256-bit by-value calls across targets */
    specd_v8f a = v8_load(l + x0);
    if (t != 1.0f) a = a / v8_splat(t);
    specd_v8u dd = v8u_splat(0x00ffffffu) - ((w >> 9) << 1);
    specd_v8f df = __builtin_convertvector((specd_v8i)dd, specd_v8f);
    specd_v8i ex = (specd_v8i)(((specd_v8u)df >> 23) & v8u_splat(0xffu));
    specd_v8f ub =
        __builtin_convertvector((specd_v8i)v8u_splat(151) - ex, specd_v8f) * v8_splat(0.69314719f);
    specd_v8i live = a + ub + v8_splat(1.0f / 64.0f) >= v8_splat(*best);
    int any = 0;
    for (int j = 0; j < 8; j++) any |= live[j];
    if (!any) return;
    specd_v8f sc = a + v8_gumbel(w);
    for (int j = 0; j < 8; j++) {
        if (sc[j] > *best || (sc[j] == *best && x0 + j < *best_i)) {
            *best = sc[j];
            *best_i = x0 + j;
        }
    }
}

/* Keyed scores of the 64 tokens of block b0 (a full block) with 128-bit Philox lanes. */
SPECD_INLINE void scores_body(const float *l, int32_t b0, float t, const uint32_t kk[2],
                              const uint32_t ctr[4], float *best, int32_t *best_i) {
    for (int32_t h = 0; h < SPECD_BLOCK; h += 32) { /* 8 counters = 32 tokens per pass */
        uint32_t g0 = (uint32_t)(b0 + h) >> 2;
        specd_v4u c[4], d[4];
        c[0] = (specd_v4u){g0, g0 + 1, g0 + 2, g0 + 3};
        d[0] = (specd_v4u){g0 + 4, g0 + 5, g0 + 6, g0 + 7};
        c[1] = d[1] = v4u_splat(ctr[1]);
        c[2] = d[2] = v4u_splat(ctr[2]);
        c[3] = d[3] = v4u_splat(ctr[3]);
        v4_philox2(c, d, kk[0], kk[1]);
        specd_v8u w[4];
        v4_tokens(c, w);
        v4_tokens(d, w + 2);
        for (int i = 0; i < 4; i++) fold8(l, b0 + h + 8 * i, t, &w[i], best, best_i);
    }
}

/* w[x] = e[x] / z for an unfiltered row (z = 1 gives e itself, exactly). */
SPECD_INLINE void weights_body(const float *l, int32_t n, float t, float zmax, float z, float *w) {
    const int unit = t == 1.0f;
    int32_t i = 0;
    for (; i + 8 <= n; i += 8) {
        specd_v8f a = v8_load(l + i);
        if (!unit) a = a / v8_splat(t);
        v8_store(w + i, v8_exp_neg(a - v8_splat(zmax)) / v8_splat(z));
    }
    for (; i < n; i++) w[i] = specd_fast_exp_neg((unit ? l[i] : l[i] / t) - zmax) / z;
}

/* weights_body with z = 1 and bsum_body fused: one pass writes e and its block sums (the same
 * additions in the same order as bsum_body, so the same bits). */
SPECD_INLINE void weights_bsum_body(const float *l, int32_t n, float t, float zmax, float *w,
                                    float *bsum) {
    const int unit = t == 1.0f;
    int32_t b = 0;
    for (; b + SPECD_BLOCK <= n; b += SPECD_BLOCK) {
        specd_v8f acc = v8_splat(0.0f);
        for (int32_t i = 0; i < SPECD_BLOCK; i += 8) {
            specd_v8f a = v8_load(l + b + i);
            if (!unit) a = a / v8_splat(t);
            specd_v8f e = v8_exp_neg(a - v8_splat(zmax));
            v8_store(w + b + i, e);
            acc = i == 0 ? e : acc + e;
        }
        float l4[4];
        for (int j = 0; j < 4; j++) l4[j] = acc[j] + acc[j + 4];
        l4[0] = l4[0] + l4[2];
        l4[1] = l4[1] + l4[3];
        bsum[b / SPECD_BLOCK] = l4[0] + l4[1];
    }
    if (b < n) {
        for (int32_t x = b; x < n; x++) w[x] = specd_fast_exp_neg((unit ? l[x] : l[x] / t) - zmax);
        float acc[8] = {0};
        for (int32_t x = b; x < n; x++) acc[(x - b) % 8] += w[x];
        for (int j = 0; j < 4; j++) acc[j] = acc[j] + acc[j + 4];
        acc[0] = acc[0] + acc[2];
        acc[1] = acc[1] + acc[3];
        bsum[b / SPECD_BLOCK] = acc[0] + acc[1];
    }
}

/* Block sums of the inverse-CDF draw: block b holds tokens 64b .. 64b + 63; lane j adds tokens
 * 64b + j, 64b + j + 8, ... in order, then lanes combine as j += j + 4, j += j + 2, j += j + 1. */
SPECD_INLINE void bsum_body(const float *w, int32_t n, float *bsum) {
    int32_t b = 0;
    for (; b + SPECD_BLOCK <= n; b += SPECD_BLOCK) {
        specd_v8f acc = v8_load(w + b);
        for (int32_t i = 8; i < SPECD_BLOCK; i += 8) acc = acc + v8_load(w + b + i);
        float l4[4];
        for (int j = 0; j < 4; j++) l4[j] = acc[j] + acc[j + 4];
        l4[0] = l4[0] + l4[2];
        l4[1] = l4[1] + l4[3];
        bsum[b / SPECD_BLOCK] = l4[0] + l4[1];
    }
    if (b < n) {
        float acc[8] = {0};
        for (int32_t x = b; x < n; x++) acc[(x - b) % 8] += w[x];
        for (int j = 0; j < 4; j++) acc[j] = acc[j] + acc[j + 4];
        acc[0] = acc[0] + acc[2];
        acc[1] = acc[1] + acc[3];
        bsum[b / SPECD_BLOCK] = acc[0] + acc[1];
    }
}

static int check_base(const float *l, int32_t n, float *bmax, float *gmax, float *gmin) {
    return check_body(l, n, bmax, gmax, gmin);
}
static void sum_base(const float *l, int32_t n, float t, float zmax, float *acc) {
    sum_body(l, n, t, zmax, acc);
}
static int lanesum_base(const float *v, int32_t n, float *acc) { return lanesum_body(v, n, acc); }
static void weights_base(const float *l, int32_t n, float t, float zmax, float z, float *w) {
    weights_body(l, n, t, zmax, z, w);
}
static void bsum_base(const float *w, int32_t n, float *bsum) { bsum_body(w, n, bsum); }
static void weights_bsum_base(const float *l, int32_t n, float t, float zmax, float *w,
                              float *bsum) {
    weights_bsum_body(l, n, t, zmax, w, bsum);
}
static void scores_base(const float *l, int32_t b0, float t, const uint32_t kk[2],
                        const uint32_t ctr[4], float *best, int32_t *best_i) {
    scores_body(l, b0, t, kk, ctr, best, best_i);
}
#if defined(__x86_64__) && !defined(SPECD_FORCE_BASELINE) /* the latter: tests of the SSE2 path */
#define SPECD_HAVE_AVX2_PATH 1
__attribute__((target("avx2"))) static int check_avx2(const float *l, int32_t n, float *bmax,
                                                      float *gmax, float *gmin) {
    return check_body(l, n, bmax, gmax, gmin);
}
__attribute__((target("avx2"))) static void sum_avx2(const float *l, int32_t n, float t,
                                                     float zmax, float *acc) {
    sum_body(l, n, t, zmax, acc);
}
__attribute__((target("avx2"))) static int lanesum_avx2(const float *v, int32_t n, float *acc) {
    return lanesum_body(v, n, acc);
}
/* The same scores with 256-bit Philox lanes: vpmuludq on eight counters at once. Integer
 * arithmetic, so the words are those of the 128-bit path bit for bit. */
__attribute__((target("avx2"))) static void mulhilo_avx2(specd_v8u a, uint32_t m, specd_v8u *hi,
                                                         specd_v8u *lo) {
    typedef int32_t v8si __attribute__((vector_size(32)));
    const specd_v4q mask = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu};
    const v8si mv = {(int32_t)m, (int32_t)m, (int32_t)m, (int32_t)m,
                     (int32_t)m, (int32_t)m, (int32_t)m, (int32_t)m};
    specd_v4q pe = (specd_v4q)__builtin_ia32_pmuludq256((v8si)a, mv);
    specd_v4q po = (specd_v4q)__builtin_ia32_pmuludq256((v8si)((specd_v4q)a >> 32), mv);
    *lo = (specd_v8u)((pe & mask) | (po << 32));
    *hi = (specd_v8u)((pe >> 32) | (po & ~mask));
}

__attribute__((target("avx2"))) static void scores_avx2(const float *l, int32_t b0, float t,
                                                        const uint32_t kk[2], const uint32_t ctr[4],
                                                        float *best, int32_t *best_i) {
    for (int32_t h = 0; h < SPECD_BLOCK; h += 32) {
        uint32_t g0 = (uint32_t)(b0 + h) >> 2;
        specd_v8u c[4];
        c[0] = (specd_v8u){g0, g0 + 1, g0 + 2, g0 + 3, g0 + 4, g0 + 5, g0 + 6, g0 + 7};
        /* vector literals rather than v8u_splat: no 256-bit values cross into baseline code */
        for (int j = 1; j < 4; j++)
            c[j] = (specd_v8u){ctr[j], ctr[j], ctr[j], ctr[j], ctr[j], ctr[j], ctr[j], ctr[j]};
        specd_v8u k0 = {kk[0], kk[0], kk[0], kk[0], kk[0], kk[0], kk[0], kk[0]};
        specd_v8u k1 = {kk[1], kk[1], kk[1], kk[1], kk[1], kk[1], kk[1], kk[1]};
        const specd_v8u w0 = {SPECD_PHILOX_W0, SPECD_PHILOX_W0, SPECD_PHILOX_W0, SPECD_PHILOX_W0,
                              SPECD_PHILOX_W0, SPECD_PHILOX_W0, SPECD_PHILOX_W0, SPECD_PHILOX_W0};
        const specd_v8u w1 = {SPECD_PHILOX_W1, SPECD_PHILOX_W1, SPECD_PHILOX_W1, SPECD_PHILOX_W1,
                              SPECD_PHILOX_W1, SPECD_PHILOX_W1, SPECD_PHILOX_W1, SPECD_PHILOX_W1};
        for (int r = 0; r < 10; r++) {
            if (r > 0) { /* vector adds: rebuilding a splat each round costs inserts */
                k0 += w0;
                k1 += w1;
            }
            specd_v8u h0, l0, h1, l1;
            mulhilo_avx2(c[0], SPECD_PHILOX_M0, &h0, &l0);
            mulhilo_avx2(c[2], SPECD_PHILOX_M1, &h1, &l1);
            c[0] = h1 ^ c[1] ^ k0;
            c[1] = l1;
            c[2] = h0 ^ c[3] ^ k1;
            c[3] = l0;
        }
        /* lane g of c[j] is word j of counter g0 + g: regroup in token order */
        specd_v8u u0 = __builtin_shufflevector(c[0], c[1], 0, 8, 1, 9, 2, 10, 3, 11);
        specd_v8u u1 = __builtin_shufflevector(c[0], c[1], 4, 12, 5, 13, 6, 14, 7, 15);
        specd_v8u u2 = __builtin_shufflevector(c[2], c[3], 0, 8, 1, 9, 2, 10, 3, 11);
        specd_v8u u3 = __builtin_shufflevector(c[2], c[3], 4, 12, 5, 13, 6, 14, 7, 15);
        specd_v8u w[4];
        w[0] = __builtin_shufflevector(u0, u2, 0, 1, 8, 9, 2, 3, 10, 11);
        w[1] = __builtin_shufflevector(u0, u2, 4, 5, 12, 13, 6, 7, 14, 15);
        w[2] = __builtin_shufflevector(u1, u3, 0, 1, 8, 9, 2, 3, 10, 11);
        w[3] = __builtin_shufflevector(u1, u3, 4, 5, 12, 13, 6, 7, 14, 15);
        for (int i = 0; i < 4; i++) fold8(l, b0 + h + 8 * i, t, &w[i], best, best_i);
    }
}
__attribute__((target("avx2"))) static void weights_avx2(const float *l, int32_t n, float t,
                                                         float zmax, float z, float *w) {
    weights_body(l, n, t, zmax, z, w);
}
__attribute__((target("avx2"))) static void bsum_avx2(const float *w, int32_t n, float *bsum) {
    bsum_body(w, n, bsum);
}
__attribute__((target("avx2"))) static void weights_bsum_avx2(const float *l, int32_t n, float t,
                                                              float zmax, float *w, float *bsum) {
    weights_bsum_body(l, n, t, zmax, w, bsum);
}
static int have_avx2(void) { return __builtin_cpu_supports("avx2"); }
#endif

int specd_check_kernel(const float *l, int32_t n, float *bmax, float *gmax, float *gmin) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) return check_avx2(l, n, bmax, gmax, gmin);
#endif
    return check_base(l, n, bmax, gmax, gmin);
}
void specd_sum_kernel(const float *l, int32_t n, float t, float zmax, float *acc) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) {
        sum_avx2(l, n, t, zmax, acc);
        return;
    }
#endif
    sum_base(l, n, t, zmax, acc);
}
int specd_lanesum_kernel(const float *v, int32_t n, float *acc) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) return lanesum_avx2(v, n, acc);
#endif
    return lanesum_base(v, n, acc);
}

void specd_scores_kernel(const float *l, int32_t b0, float t, const uint32_t kk[2],
                          const uint32_t ctr[4], float *best, int32_t *best_i) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) {
        scores_avx2(l, b0, t, kk, ctr, best, best_i);
        return;
    }
#endif
    scores_base(l, b0, t, kk, ctr, best, best_i);
}

void specd_weights_kernel(const float *l, int32_t n, float t, float zmax, float z, float *w) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) {
        weights_avx2(l, n, t, zmax, z, w);
        return;
    }
#endif
    weights_base(l, n, t, zmax, z, w);
}
void specd_bsum_kernel(const float *w, int32_t n, float *bsum) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) {
        bsum_avx2(w, n, bsum);
        return;
    }
#endif
    bsum_base(w, n, bsum);
}

void specd_weights_bsum_kernel(const float *l, int32_t n, float t, float zmax, float *w,
                                float *bsum) {
#if defined(SPECD_HAVE_AVX2_PATH)
    if (have_avx2()) {
        weights_bsum_avx2(l, n, t, zmax, w, bsum);
        return;
    }
#endif
    weights_bsum_base(l, n, t, zmax, w, bsum);
}

