/* Run-time CPU feature checks for the runtime's vector kernels. F16C is read from CPUID directly:
 * clang's __builtin_cpu_supports does not know "f16c". */
#ifndef SPECD_KERNELS_CPU_CPU_FEATURES_H
#define SPECD_KERNELS_CPU_CPU_FEATURES_H

#if defined(__x86_64__)
#include <cpuid.h>

static inline int specd_cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c >> 29) & 1;
}

/* AVX2 + FMA + F16C: what the runtime's attention and matmul tiles use. */
static inline int specd_cpu_has_avx2_f16c(void) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && specd_cpu_has_f16c();
}
#endif

#endif
