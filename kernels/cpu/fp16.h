/* IEEE half and bfloat16 conversions, bit-exact and independent of the CPU's F16C support, so
 * every build and every kernel table converts the same way (round to nearest, ties to even). */
#ifndef SPECD_KERNELS_CPU_FP16_H
#define SPECD_KERNELS_CPU_FP16_H

#include "common/float_bits.h"

#include <stdint.h>

static inline float specd_fp16_to_fp32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24 is exact in float */
        float v = (float)mant * 0x1p-24f;
        return specd_f32_from_bits(sign | specd_f32_bits(v));
    }
    if (exp == 31) return specd_f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return specd_f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

static inline uint16_t specd_fp32_to_fp16(float f) {
    uint32_t x = specd_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return sign | 0x7e00u;  /* NaN stays a (quiet) NaN */
    if (ax >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to infinity */
    if (ax >= 0x38800000u) {                      /* normal half */
        uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
        return sign | (uint16_t)((r >> 13) - 0x1c000u);
    }
    uint32_t e = ax >> 23;
    if (e < 102) return sign; /* below half the smallest subnormal */
    /* subnormal half: value / 2^-24 = m >> (126 - e), rounded to nearest even */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e;
    uint32_t q = m >> shift;
    uint32_t rem = m & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return sign | (uint16_t)q;
}

static inline float specd_bf16_to_fp32(uint16_t h) {
    return specd_f32_from_bits((uint32_t)h << 16);
}

static inline uint16_t specd_fp32_to_bf16(float f) {
    uint32_t x = specd_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64u); /* quiet NaN */
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

#endif
