/* The matmuls of the fast numerics mode (SPECD_NUMERICS_FAST, include/specd/runtime.h) for the
 * 32-wide block types Q4_0, Q4_1 and Q8_0 (kernels/cpu/matmul_fast.c says the arithmetic).
 *
 * Activations go in as "fast rows": each group of eight 32-element blocks is 352 bytes, the
 * blocks' int8 quants transposed so that dword lane j of slot t holds elements 4t..4t+3 of block j
 * (slot t = bytes 32t..32t+31), then the eight scales d, the eight d * sum(quants) (both fp16
 * values held as fp32) and the eight sum(quants) (int32). A last partial group is zero-padded.
 *
 * Every output is one (weight row, activation row) dot product whose bits depend on those two rows
 * only: the same for any batch, any place in it, any thread split, and on every vector path. */
#ifndef SPECD_KERNELS_CPU_MATMUL_FAST_H
#define SPECD_KERNELS_CPU_MATMUL_FAST_H

#include <stddef.h>
#include <stdint.h>

/* Bytes of one fast row of n elements for weights of w_type, or 0 when w_type has no fast kernel
 * (not Q4_0, Q4_1 or Q8_0, or n not a multiple of 32): such weights keep llama.cpp's order. */
size_t specd_fast_row_bytes(uint32_t w_type, int64_t n);

/* One activation row x[n] into a fast row (dst: specd_fast_row_bytes bytes). The quants are those
 * and scales of llama.cpp's Q8_0/Q8_1 (round(x * 127 / amax), d and s rounded to fp16). simd: the
 * specd_cpu_path in use (the same bytes on every path). */
void specd_fast_quantize_row(const float *x, int64_t n, void *dst, int simd);

/* y[r * ld_y + o] = dot(W row o, fast row r) for o in [o_begin, o_end), r in [0, n_rows), with
 * specd_fast_row_bytes(w_type, n_in) != 0. simd: the specd_cpu_path in use (the bits do not
 * depend on it). */
void specd_matmul_rows_fast(uint32_t w_type, const void *w, int64_t n_in, int64_t o_begin,
                            int64_t o_end, const void *xq, size_t xq_row_bytes, int64_t n_rows,
                            float *y, int64_t ld_y, int simd);

#endif
