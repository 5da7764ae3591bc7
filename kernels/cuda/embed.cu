/* Input rows (kernels/cuda/cuda_ops.h): token embeddings gathered from a table and dequantized
 * element by element as the CPU's to_float does (kernels/cpu/quant_32.c, dtype_float.c: x = q * d,
 * Q4_0's q less 8, Q4_1's x = q * d + m with two roundings), or float vectors copied in. One
 * block per row. */
#include "kernels/cuda/cuda_common.cuh"

#include "kernels/cpu/dtype.h"

#include <math.h>

/* Element e of a row of 32-blocks: quant index j = e % 32 (Q4: j < 16 the low nibble of qs[j],
 * else the high nibble of qs[j - 16]). */
static __device__ float dequant(uint32_t type, const uint8_t *row, int32_t e) {
    const int32_t b = e / 32, j = e % 32;
    switch (type) {
    case SPECD_DTYPE_F32:
        return ((const float *)row)[e];
    case SPECD_DTYPE_F16:
        return specd_dev_h2f(((const uint16_t *)row)[e]);
    case SPECD_DTYPE_Q4_0: {
        const uint8_t *blk = row + (int64_t)b * 18;
        const int q = j < 16 ? blk[2 + j] & 0xf : blk[2 + j - 16] >> 4;
        return __fmul_rn((float)(q - 8), specd_dev_h2f(*(const uint16_t *)blk));
    }
    case SPECD_DTYPE_Q4_1: {
        const uint8_t *blk = row + (int64_t)b * 20;
        const uint16_t *h = (const uint16_t *)blk;
        const int q = j < 16 ? blk[4 + j] & 0xf : blk[4 + j - 16] >> 4;
        return __fadd_rn(__fmul_rn((float)q, specd_dev_h2f(h[0])), specd_dev_h2f(h[1]));
    }
    default: { /* Q8_0 */
        const uint8_t *blk = row + (int64_t)b * 34;
        return __fmul_rn((float)(int8_t)blk[2 + j], specd_dev_h2f(*(const uint16_t *)blk));
    }
    }
}

static __global__ void embed_kernel(uint32_t type, const uint8_t *__restrict__ table,
                                    int64_t row_bytes, int32_t n_vocab, int32_t n_embd,
                                    const int32_t *__restrict__ ids,
                                    const float *__restrict__ vectors, int64_t ld_vectors,
                                    float *__restrict__ y, int64_t ld_y) {
    const int64_t r = blockIdx.x;
    const int32_t id = ids[r];
    float *yr = y + r * ld_y;
    for (int32_t e = threadIdx.x; e < n_embd; e += SPECD_CUDA_THREADS) {
        float v;
        if (id >= n_vocab || (id < 0 && !vectors))
            v = __int_as_float(0x7fc00000); /* NaN: a bad id is visible downstream */
        else if (id < 0)
            v = vectors[r * ld_vectors + e];
        else
            v = dequant(type, table + (int64_t)id * row_bytes, e);
        yr[e] = v;
    }
}

extern "C" int specd_cuda_embed(uint32_t type, const void *table, int32_t n_vocab,
                                int32_t n_embd, const int32_t *ids, const float *vectors,
                                int64_t ld_vectors, float *y, int64_t ld_y, int32_t n_rows,
                                void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_embed(type, table, n_vocab, n_embd, ids, y, ld_y, n_rows, why,
                               why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (vectors && (ld_vectors < n_embd || ((uintptr_t)vectors & 3))) {
        snprintf(why, why_size, "embed: vectors need ld_vectors >= %d and 4-byte alignment",
                 n_embd);
        return SPECD_CUDA_E_ARGUMENT;
    }
    if (n_rows == 0) return SPECD_CUDA_OK;
    int64_t row_bytes;
    switch (type) {
    case SPECD_DTYPE_F32: row_bytes = (int64_t)n_embd * 4; break;
    case SPECD_DTYPE_F16: row_bytes = (int64_t)n_embd * 2; break;
    case SPECD_DTYPE_Q4_0: row_bytes = (int64_t)n_embd / 32 * 18; break;
    case SPECD_DTYPE_Q4_1: row_bytes = (int64_t)n_embd / 32 * 20; break;
    default: row_bytes = (int64_t)n_embd / 32 * 34; break;
    }
    embed_kernel<<<(unsigned)n_rows, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(
        type, (const uint8_t *)table, row_bytes, n_vocab, n_embd, ids, vectors, ld_vectors, y,
        ld_y);
    return specd_cuda_launch_status();
}
