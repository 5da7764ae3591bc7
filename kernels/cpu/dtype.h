/* Tensor element types (ggml's type ids, as stored in GGUF) and their CPU kernels.
 *
 * Matrix-vector work follows ggml's scheme so that our logits track llama.cpp's: a weight row of
 * type T is dotted with an activation row first quantized to T's vec_dot_type (Q8_0 for Q4_0 and
 * Q8_0, Q8_1 for Q4_1, Q8_K for the K-quants, F32/F16/BF16 as they are).
 *
 * Batch invariance: every kernel here computes one dot product with a fixed reduction order that
 * depends only on n, never on how many rows or threads the caller uses. For the quantized types
 * the AVX2 kernels give the same bits as the scalar references (same integer sums, same float
 * operations in the same order: ggml's reference order); F32/F16/BF16 dots differ between the two
 * tables by float rounding only.
 *
 * Activation quantization (Q8_0/Q8_1 from_float) follows what llama.cpp runs on x86: scale
 * amax/127, multiplier 127/amax, round half to even; finite input gives quants in [-127, 127],
 * which the AVX2 dot kernels rely on. Q8_K follows ggml's reference quantizer.
 *
 * Block pointers must be 2-byte aligned (4 for Q8_K): GGUF tensor data and specd_alloc buffers
 * are. Block layouts: kernels/cpu/quant_blocks.h.
 */
#ifndef SPECD_KERNELS_CPU_DTYPE_H
#define SPECD_KERNELS_CPU_DTYPE_H

#include <stddef.h>
#include <stdint.h>

typedef enum specd_dtype {
    SPECD_DTYPE_F32 = 0,
    SPECD_DTYPE_F16 = 1,
    SPECD_DTYPE_Q4_0 = 2,
    SPECD_DTYPE_Q4_1 = 3,
    SPECD_DTYPE_Q8_0 = 8,
    SPECD_DTYPE_Q8_1 = 9,
    SPECD_DTYPE_Q4_K = 12,
    SPECD_DTYPE_Q6_K = 14,
    SPECD_DTYPE_Q8_K = 15,
    SPECD_DTYPE_BF16 = 30
} specd_dtype;

typedef struct specd_dtype_traits {
    const char *name;
    int64_t block_size; /* elements per block (1 for F32/F16/BF16) */
    size_t block_bytes; /* bytes per block */
    /* Dequantizes n elements (n a multiple of block_size). */
    void (*to_float)(const void *src, float *dst, int64_t n);
    /* Quantizes n floats into this type; NULL for types only read from files. */
    void (*from_float)(const float *src, void *dst, int64_t n);
    /* *s = dot(x, y) over n elements; x is this type, y is vec_dot_type. NULL for Q8_K, which
     * is only ever the y side. */
    void (*vec_dot)(int64_t n, float *s, const void *x, const void *y);
    specd_dtype vec_dot_type;
} specd_dtype_traits;

/* Traits for a type id from a file; NULL when the type is unknown or unsupported. The returned
 * table holds the fastest kernels this CPU supports (AVX2/FMA chosen at run time). */
const specd_dtype_traits *specd_dtype_traits_get(uint32_t type);

/* Scalar reference kernels, which the vector ones are tested against. */
const specd_dtype_traits *specd_dtype_traits_scalar(uint32_t type);

/* Bytes of a row of n elements; 0 when n is not a multiple of the block size or overflows. */
size_t specd_dtype_row_bytes(uint32_t type, int64_t n);

#endif
