/* The AVX-512 VNNI matmul tiles (matmul_avx512.c); only call on SPECD_CPU_AVX512 (cpu_dispatch.h).
 * Same contract as specd_matmul_rows (ops.h) for Q4_0, Q4_1 and Q8_0 weights with n_in a multiple
 * of 32, and the same bits as its AVX2 path. Returns 0, having written nothing, for other types or
 * when its scratch cannot be allocated: the caller then takes the AVX2 path. */
#ifndef SPECD_KERNELS_CPU_MATMUL_AVX512_H
#define SPECD_KERNELS_CPU_MATMUL_AVX512_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cpu/dtype.h"

int specd_matmul_rows_avx512(uint32_t w_type, const void *w, int64_t n_in, int64_t o_begin,
                             int64_t o_end, const void *xq, size_t xq_row_bytes, int64_t n_rows,
                             float *y, int64_t ld_y);

#endif
