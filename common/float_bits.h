/* A float's IEEE bits and back, without aliasing tricks: shared by the fixed-operation math of the
 * acceptance engine (common/fastmath.h) and the CPU kernels (kernels/cpu/fp16.h, vexp.h). */
#ifndef SPECD_COMMON_FLOAT_BITS_H
#define SPECD_COMMON_FLOAT_BITS_H

#include <stdint.h>
#include <string.h>

static inline uint32_t specd_f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float specd_f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
