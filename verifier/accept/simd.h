/* Eight-float vectors (GCC/clang vector extensions) for the row kernels. Each lane performs the
 * same IEEE operations in the same order as the scalar code in common/fastmath.h, so vector and
 * scalar paths give identical bits; only the number of lanes in flight differs. The kernels are
 * written once as always-inline bodies and compiled twice (baseline SSE2 and AVX2, picked at
 * handle creation), never with FMA. */
#ifndef SPECD_VERIFIER_ACCEPT_SIMD_H
#define SPECD_VERIFIER_ACCEPT_SIMD_H

#include <stdint.h>
#include <string.h>

typedef float specd_v8f __attribute__((vector_size(32)));
typedef int32_t specd_v8i __attribute__((vector_size(32)));
typedef uint32_t specd_v8u __attribute__((vector_size(32)));

#define SPECD_INLINE static inline __attribute__((always_inline))

SPECD_INLINE specd_v8f v8_load(const float *p) {
    specd_v8f v;
    memcpy(&v, p, sizeof v);
    return v;
}
SPECD_INLINE void v8_store(float *p, specd_v8f v) { memcpy(p, &v, sizeof v); }
SPECD_INLINE specd_v8f v8_splat(float x) { return (specd_v8f){x, x, x, x, x, x, x, x}; }
/* mask ? a : b, mask lanes all-ones or zero */
SPECD_INLINE specd_v8f v8_select(specd_v8i mask, specd_v8f a, specd_v8f b) {
    return (specd_v8f)((mask & (specd_v8i)a) | (~mask & (specd_v8i)b));
}
SPECD_INLINE specd_v8f v8_max(specd_v8f a, specd_v8f b) { return v8_select(a > b, a, b); }
SPECD_INLINE specd_v8f v8_min(specd_v8f a, specd_v8f b) { return v8_select(a < b, a, b); }
SPECD_INLINE float v8_hmax(specd_v8f v) {
    float m = v[0];
    for (int i = 1; i < 8; i++) m = v[i] > m ? v[i] : m;
    return m;
}
SPECD_INLINE float v8_hmin(specd_v8f v) {
    float m = v[0];
    for (int i = 1; i < 8; i++) m = v[i] < m ? v[i] : m;
    return m;
}

/* specd_fast_exp_neg, lane by lane. */
SPECD_INLINE specd_v8f v8_exp_neg(specd_v8f x) {
    specd_v8i keep = x * v8_splat(1.44269504f) >= v8_splat(-125.0f);
    specd_v8f xc = v8_select(keep, x, v8_splat(0.0f));
    specd_v8f n = (xc * v8_splat(1.44269504f) + v8_splat(12582912.0f)) - v8_splat(12582912.0f);
    specd_v8f r = (xc - n * v8_splat(0.693145751953125f)) - n * v8_splat(1.42860682e-06f);
    specd_v8f p = v8_splat(1.98412698e-04f);
    p = p * r + v8_splat(1.38888889e-03f);
    p = p * r + v8_splat(8.33333333e-03f);
    p = p * r + v8_splat(4.16666667e-02f);
    p = p * r + v8_splat(1.66666667e-01f);
    p = p * r + v8_splat(0.5f);
    p = p * r + v8_splat(1.0f);
    p = p * r + v8_splat(1.0f);
    specd_v8i ni = __builtin_convertvector(n, specd_v8i);
    specd_v8f e = (specd_v8f)((specd_v8u)p + ((specd_v8u)ni << 23));
    return v8_select(keep, e, v8_splat(0.0f));
}

#endif

/* ---- keyed sampling: Philox4x32-10 for eight counters at once, and the Gumbel transform ---- */
#ifndef SPECD_VERIFIER_ACCEPT_SIMD_KEYED_H
#define SPECD_VERIFIER_ACCEPT_SIMD_KEYED_H

#include "common/philox.h"

typedef uint32_t specd_v4u __attribute__((vector_size(16)));
typedef uint64_t specd_v2q __attribute__((vector_size(16)));
typedef uint64_t specd_v4q __attribute__((vector_size(32)));

SPECD_INLINE specd_v4u v4u_splat(uint32_t x) { return (specd_v4u){x, x, x, x}; }
SPECD_INLINE specd_v8u v8u_splat(uint32_t x) { return (specd_v8u){x, x, x, x, x, x, x, x}; }

/* 32x32 -> 64 products of four lanes with m, split in high and low words. Through pmuludq on
 * x86-64 (SSE2: present in both builds; a generic 64-bit vector multiply costs three). Kept at
 * 128 bits so nothing crosses halves through memory. */
SPECD_INLINE void v4_mulhilo(specd_v4u a, uint32_t m, specd_v4u *hi, specd_v4u *lo) {
    const specd_v2q mask = {0xffffffffu, 0xffffffffu};
    specd_v2q pe, po;
#if defined(__x86_64__)
    typedef int32_t v4si __attribute__((vector_size(16)));
    typedef long long v2di __attribute__((vector_size(16)));
    const v4si mv = {(int32_t)m, (int32_t)m, (int32_t)m, (int32_t)m};
    pe = (specd_v2q)__builtin_ia32_pmuludq128((v4si)a, mv);
    po = (specd_v2q)__builtin_ia32_pmuludq128((v4si)((specd_v2q)a >> 32), mv);
    (void)sizeof(v2di);
#else
    const specd_v2q mv = {m, m};
    pe = ((specd_v2q)a & mask) * mv;
    po = ((specd_v2q)a >> 32) * mv;
#endif
    *lo = (specd_v4u)((pe & mask) | (po << 32));
    *hi = (specd_v4u)((pe >> 32) | (po & ~mask));
}

/* specd_philox4x32_10 on two sets of four counters (lane i of c[0..3] and of d[0..3]); two
 * independent chains keep the multiplier busy. */
SPECD_INLINE void v4_philox2(specd_v4u c[4], specd_v4u d[4], uint32_t key0, uint32_t key1) {
    specd_v4u k0 = v4u_splat(key0), k1 = v4u_splat(key1);
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += v4u_splat(SPECD_PHILOX_W0);
            k1 += v4u_splat(SPECD_PHILOX_W1);
        }
        specd_v4u h0, l0, h1, l1, g0, m0, g1, m1;
        v4_mulhilo(c[0], SPECD_PHILOX_M0, &h0, &l0);
        v4_mulhilo(c[2], SPECD_PHILOX_M1, &h1, &l1);
        v4_mulhilo(d[0], SPECD_PHILOX_M0, &g0, &m0);
        v4_mulhilo(d[2], SPECD_PHILOX_M1, &g1, &m1);
        c[0] = h1 ^ c[1] ^ k0;
        c[1] = l1;
        c[2] = h0 ^ c[3] ^ k1;
        c[3] = l0;
        d[0] = g1 ^ d[1] ^ k0;
        d[1] = m1;
        d[2] = g0 ^ d[3] ^ k1;
        d[3] = m0;
    }
}

/* Words of four counters (c[j] lane g = word j of counter g) in token order: out[0] holds the
 * words of tokens 4g .. 4g + 7 for g = 0, 1 and out[1] those of g = 2, 3. */
SPECD_INLINE void v4_tokens(const specd_v4u c[4], specd_v8u out[2]) {
    specd_v4u u0 = __builtin_shufflevector(c[0], c[1], 0, 4, 1, 5);
    specd_v4u u1 = __builtin_shufflevector(c[0], c[1], 2, 6, 3, 7);
    specd_v4u u2 = __builtin_shufflevector(c[2], c[3], 0, 4, 1, 5);
    specd_v4u u3 = __builtin_shufflevector(c[2], c[3], 2, 6, 3, 7);
    specd_v4u t0 = __builtin_shufflevector(u0, u2, 0, 1, 4, 5);
    specd_v4u t1 = __builtin_shufflevector(u0, u2, 2, 3, 6, 7);
    specd_v4u t2 = __builtin_shufflevector(u1, u3, 0, 1, 4, 5);
    specd_v4u t3 = __builtin_shufflevector(u1, u3, 2, 3, 6, 7);
    out[0] = __builtin_shufflevector(t0, t1, 0, 1, 2, 3, 4, 5, 6, 7);
    out[1] = __builtin_shufflevector(t2, t3, 0, 1, 2, 3, 4, 5, 6, 7);
}

/* specd_fast_log, lane by lane. */
SPECD_INLINE specd_v8f v8_log(specd_v8f x) {
    specd_v8u b = (specd_v8u)x;
    specd_v8i e = (specd_v8i)((b >> 23) & v8u_splat(0xffu)) - (specd_v8i)v8u_splat(127);
    specd_v8f m = (specd_v8f)((b & v8u_splat(0x007fffffu)) | v8u_splat(0x3f800000u));
    specd_v8i big = m > v8_splat(1.41421356f);
    m = v8_select(big, m * v8_splat(0.5f), m);
    e = e - big; /* big lanes are -1 */
    specd_v8f s = (m - v8_splat(1.0f)) / (m + v8_splat(1.0f));
    specd_v8f s2 = s * s;
    specd_v8f p = v8_splat(0.22222222f);
    p = p * s2 + v8_splat(0.28571429f);
    p = p * s2 + v8_splat(0.4f);
    p = p * s2 + v8_splat(0.66666667f);
    p = p * s2 + v8_splat(2.0f);
    specd_v8f lm = s * p;
    specd_v8f ef = __builtin_convertvector(e, specd_v8f);
    return ef * v8_splat(0.693145751953125f) + (lm + ef * v8_splat(1.42860682e-06f));
}

/* Gumbel noise of Philox words: -ln(-ln u), u = ((w >> 9) + 0.5) * 2^-23. */
SPECD_INLINE specd_v8f v8_gumbel(specd_v8u w) {
    specd_v8f u = (__builtin_convertvector((specd_v8i)(w >> 9), specd_v8f) + v8_splat(0.5f)) *
                  v8_splat(0x1p-23f);
    return -v8_log(-v8_log(u));
}

#endif
