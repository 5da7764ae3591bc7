/* The acceptance engine's fixed arithmetic on the device, bit for bit: Philox4x32-10
 * (common/philox.h), the uniform from a Philox word, and specd_fast_log / specd_fast_exp_neg /
 * specd_gumbel (common/fastmath.h). Every float operation is an explicit round-to-nearest
 * intrinsic, so no FMA contraction or fast-math flag can change a bit: the CPU builds these
 * functions with -ffp-contract=off from the same + - * / in the same order. */
#ifndef SPECD_KERNELS_CUDA_FIXED_MATH_CUH
#define SPECD_KERNELS_CUDA_FIXED_MATH_CUH

#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"

/* common/philox.h: key {seed lo, seed hi}, 10 rounds. */
static __device__ __forceinline__ void specd_dev_philox(uint32_t c[4], uint32_t k0, uint32_t k1) {
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint32_t hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const uint32_t hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
        c[0] = n0;
        c[1] = lo1;
        c[2] = n2;
        c[3] = lo0;
    }
}

/* specd_u32_to_uniform: ((w >> 9) + 0.5) * 2^-23, exact. */
static __device__ __forceinline__ float specd_dev_uniform(uint32_t w) {
    return __fmul_rn(__fadd_rn((float)(w >> 9), 0.5f), 0x1p-23f);
}

static __device__ __forceinline__ float specd_dev_fast_log(float x) {
    const uint32_t b = __float_as_uint(x);
    int32_t e = (int32_t)((b >> 23) & 0xffu) - 127;
    float m = __uint_as_float((b & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m = __fmul_rn(m, 0.5f);
        e = e + 1;
    }
    const float s = __fdiv_rn(__fsub_rn(m, 1.0f), __fadd_rn(m, 1.0f));
    const float s2 = __fmul_rn(s, s);
    float p = 0.22222222f;
    p = __fadd_rn(__fmul_rn(p, s2), 0.28571429f);
    p = __fadd_rn(__fmul_rn(p, s2), 0.4f);
    p = __fadd_rn(__fmul_rn(p, s2), 0.66666667f);
    p = __fadd_rn(__fmul_rn(p, s2), 2.0f);
    const float lm = __fmul_rn(s, p);
    const float ef = (float)e;
    return __fadd_rn(__fmul_rn(ef, 0.693145751953125f),
                     __fadd_rn(lm, __fmul_rn(ef, 1.42860682e-06f)));
}

static __device__ __forceinline__ float specd_dev_fast_exp_neg(float x) {
    const int keep = __fmul_rn(x, 1.44269504f) >= -125.0f;
    const float xc = keep ? x : 0.0f;
    const float n = __fsub_rn(__fadd_rn(__fmul_rn(xc, 1.44269504f), 12582912.0f), 12582912.0f);
    const float r =
        __fsub_rn(__fsub_rn(xc, __fmul_rn(n, 0.693145751953125f)), __fmul_rn(n, 1.42860682e-06f));
    float p = 1.98412698e-04f;
    p = __fadd_rn(__fmul_rn(p, r), 1.38888889e-03f);
    p = __fadd_rn(__fmul_rn(p, r), 8.33333333e-03f);
    p = __fadd_rn(__fmul_rn(p, r), 4.16666667e-02f);
    p = __fadd_rn(__fmul_rn(p, r), 1.66666667e-01f);
    p = __fadd_rn(__fmul_rn(p, r), 0.5f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    p = __fadd_rn(__fmul_rn(p, r), 1.0f);
    const int32_t ni = (int32_t)n;
    const float e = __uint_as_float(__float_as_uint(p) + ((uint32_t)ni << 23));
    return keep ? e : 0.0f;
}

/* -ln(-ln u) */
static __device__ __forceinline__ float specd_dev_gumbel(float u) {
    return -specd_dev_fast_log(-specd_dev_fast_log(u));
}

/* SPECD_GUMBEL_MAX: no Gumbel value specd_dev_gumbel produces exceeds it. */
#define SPECD_DEV_GUMBEL_MAX 16.75f

#endif
