/* Multi-row tiles for Q4_K and Q6_K weights against Q8_K activations (matmul_kquant.c): each
 * weight super-block is loaded and unpacked once for up to 16 activation rows, on the AVX2 path
 * and (VNNI vpdpwssd) on the AVX-512 path. Same contract as specd_matmul_rows (ops.h) with n_in a
 * multiple of 256, and every output the bits of the AVX2 (and scalar) vec_dot of its pair.
 * Returns 0, having written nothing, for other types, for simd below SPECD_CPU_AVX2, off x86-64,
 * or when its scratch cannot be allocated: the caller then takes the per-row vec_dot. */
#ifndef SPECD_KERNELS_CPU_MATMUL_KQUANT_H
#define SPECD_KERNELS_CPU_MATMUL_KQUANT_H

#include <stddef.h>
#include <stdint.h>

int specd_matmul_rows_kquant(int simd, uint32_t w_type, const void *w, int64_t n_in,
                             int64_t o_begin, int64_t o_end, const void *xq, size_t xq_row_bytes,
                             int64_t n_rows, float *y, int64_t ld_y);

#endif
