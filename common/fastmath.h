/* Fixed-operation exp and log for the acceptance engine and keyed sampling.
 *
 * Why not libm: glibc's logf/expf and CUDA's differ in the last bits, and a keyed sample must be
 * the same token on CPU and GPU. These functions use only IEEE binary32 + - * /, exact
 * float<->int conversions of small integers and bit manipulation, in a fixed order, so a CUDA port
 * written with __fadd_rn/__fmul_rn/__fdiv_rn (no FMA contraction: compile without fmad or use the
 * intrinsics) gives identical bits. Files including this header are compiled with
 * -ffp-contract=off (see verifier/accept/CMakeLists.txt) so no compiler fuses a*b+c either.
 *
 * Accuracy (checked by tests/accept/test_fastmath.c against double precision):
 *   specd_fast_log: |error| <= 2^-21 * max(1, |ln x|) for every positive normal float.
 *   specd_fast_exp_neg: relative error <= 2^-21 for x in [-86, 0]; exact 1 at x = 0.
 */
#ifndef SPECD_COMMON_FASTMATH_H
#define SPECD_COMMON_FASTMATH_H

#include "common/float_bits.h"

#include <stdint.h>

/* ln(x) for positive normal finite x (callers guarantee it; sub-normals and 0 are not handled).
 * x = 2^e * m with m in [sqrt(1/2), sqrt(2)); ln m = 2 atanh(s), s = (m-1)/(m+1), |s| < 0.1716,
 * series to s^9 (truncation < 3e-10 relative); e*ln2 is split in a 15-bit head (exact product) and
 * a tail, as in fdlibm. */
static inline float specd_fast_log(float x) {
    uint32_t b = specd_f32_bits(x);
    int32_t e = (int32_t)((b >> 23) & 0xffu) - 127;
    float m = specd_f32_from_bits((b & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m = m * 0.5f;
        e = e + 1;
    }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float p = 0.22222222f;
    p = p * s2 + 0.28571429f;
    p = p * s2 + 0.4f;
    p = p * s2 + 0.66666667f;
    p = p * s2 + 2.0f;
    float lm = s * p;
    float ef = (float)e;
    return ef * 0.693145751953125f + (lm + ef * 1.42860682e-06f);
}

/* e^x for x <= 0 (x = -inf allowed). Cody-Waite: n = round-to-nearest-even(x * log2 e) by the
 * 1.5*2^23 trick, r = (x - n*ln2_hi) - n*ln2_lo with the 15-bit head of ln 2 (n*ln2_hi exact),
 * |r| <= 0.347, e^r by its Taylor polynomial of degree 7 (truncation < 6e-9), 2^n added to the
 * exponent field. Results below 2^-125 (x < about -86.6) are flushed to 0, which keeps every
 * nonzero result normal. Branch-free so loops over rows vectorise. */
static inline float specd_fast_exp_neg(float x) {
    int keep = x * 1.44269504f >= -125.0f;
    float xc = keep ? x : 0.0f;
    float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;
    float r = (xc - n * 0.693145751953125f) - n * 1.42860682e-06f;
    float p = 1.98412698e-04f;
    p = p * r + 1.38888889e-03f;
    p = p * r + 8.33333333e-03f;
    p = p * r + 4.16666667e-02f;
    p = p * r + 1.66666667e-01f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t ni = (int32_t)n;
    float e = specd_f32_from_bits(specd_f32_bits(p) + ((uint32_t)ni << 23));
    return keep ? e : 0.0f;
}

/* Upper bound on specd_gumbel over every uniform specd_u32_to_uniform can produce (the largest is
 * about 16.64 at u = 1 - 2^-24; test_fastmath checks all 2^23 values). Keyed sampling uses it to
 * skip tokens that cannot win: fl(z + G) <= fl(z + bound) by monotone rounding. */
#define SPECD_GUMBEL_MAX 16.75f

/* Standard Gumbel noise from a uniform u in (0,1): -ln(-ln u). */
static inline float specd_gumbel(float u) {
    return -specd_fast_log(-specd_fast_log(u));
}

#endif
