/* Kernels behind the tables in dtype.c. Names: specd_<type>_<op>[_avx2]. Every function follows
 * the contracts of specd_dtype_traits (n a multiple of the block size). */
#ifndef SPECD_KERNELS_CPU_DTYPE_INTERNAL_H
#define SPECD_KERNELS_CPU_DTYPE_INTERNAL_H

#include <stdint.h>

#define SPECD_KERNEL_DECL(t)                                                                       \
    void specd_##t##_to_float(const void *src, float *dst, int64_t n);                             \
    void specd_##t##_from_float(const float *src, void *dst, int64_t n);                           \
    void specd_##t##_vec_dot(int64_t n, float *s, const void *x, const void *y);

/* scalar references (dtype_float.c, quant_32.c, quant_k.c) */
SPECD_KERNEL_DECL(f32)
SPECD_KERNEL_DECL(f16)
SPECD_KERNEL_DECL(bf16)
SPECD_KERNEL_DECL(q4_0)
SPECD_KERNEL_DECL(q4_1)
SPECD_KERNEL_DECL(q8_0)
SPECD_KERNEL_DECL(q8_1)
SPECD_KERNEL_DECL(q4_k)
SPECD_KERNEL_DECL(q6_k)
SPECD_KERNEL_DECL(q8_k)

/* AVX2/FMA versions (dtype_avx2.c); only call them when specd_cpu_has_avx2(): the CPU path in
 * use (cpu_dispatch.h) is AVX2 or better */
void specd_f32_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_f16_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_bf16_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q4_0_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q4_1_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q8_0_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q4_k_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q6_k_vec_dot_avx2(int64_t n, float *s, const void *x, const void *y);
void specd_q8_0_from_float_avx2(const float *src, void *dst, int64_t n);
/* One block of 32 floats to int8 as llama.cpp's Q8_0/Q8_1 quantize it, q = round(x * 127 / amax)
 * (half to even; NaN -> -128): returns amax, and *sum (may be NULL) = the quants' sum. The AVX2
 * version (AVX2 CPUs only) writes the same bytes. */
float specd_q8_block(const float *src, int8_t *qs, int32_t *sum);
float specd_q8_block_avx2(const float *src, int8_t *qs, int32_t *sum);
void specd_q8_1_from_float_avx2(const float *src, void *dst, int64_t n);
void specd_q4_0_to_float_avx2(const void *src, float *dst, int64_t n);
void specd_q4_1_to_float_avx2(const void *src, float *dst, int64_t n);
void specd_q8_0_to_float_avx2(const void *src, float *dst, int64_t n);

int specd_cpu_has_avx2(void);

#endif
