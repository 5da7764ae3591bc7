/* Which vector instructions this CPU has, read once with cpuid (clang 14's
 * __builtin_cpu_supports does not know "f16c", so every kernel asks here). */
#ifndef SPECD_KERNELS_CPU_FEATURES_H
#define SPECD_KERNELS_CPU_FEATURES_H

#include <cpuid.h>

/* 1 when AVX2, FMA and F16C are all present and the OS saves the YMM registers. */
static inline int specd_cpu_has_avx2_fma_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c)) return 0;
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 6u) != 6u) return 0; /* XMM and YMM state enabled */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b & (1u << 5)) != 0; /* AVX2 */
}

#endif
