/* Activation rows quantized to Q8_K super-blocks of 256 for the K-quant matmuls
 * (kernels/cuda/cuda_ops.h), one warp per super-block, lane l holding elements 8l..8l+7. As the
 * CPU's specd_q8_k_from_float (kernels/cpu/quant_k.c): the scale comes from the element of
 * largest magnitude, the first such in index order (its sign matters), iscale = -127 / max, quants
 * round half to even and clamp to [-128, 127], sums per group of 16, d = 1 / iscale; an all-zero
 * block is all zeros. Every step is exact or one IEEE-rounded operation, so the blocks are the
 * CPU's byte for byte. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void quantize_q8_k_kernel(const float *__restrict__ x, int64_t ld_x,
                                            int32_t blocks_per_row, int64_t n_blocks,
                                            uint8_t *__restrict__ xq) {
    const int lane = threadIdx.x & 31;
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return; /* the whole warp */
    const int64_t r = b / blocks_per_row, c = b % blocks_per_row;
    const float *src = x + r * ld_x + c * 256 + lane * 8;
    float v[8], amax = 0.0f, mx = 0.0f;
    int at = 256; /* index of the lane's first largest magnitude; 256: none above 0 */
    for (int e = 0; e < 8; e++) {
        v[e] = src[e];
        if (fabsf(v[e]) > amax) {
            amax = fabsf(v[e]);
            mx = v[e];
            at = lane * 8 + e;
        }
    }
    for (int o = 16; o > 0; o >>= 1) { /* larger magnitude wins; on a tie, the lower index */
        const float a2 = __shfl_xor_sync(0xffffffffu, amax, o);
        const float m2 = __shfl_xor_sync(0xffffffffu, mx, o);
        const int at2 = __shfl_xor_sync(0xffffffffu, at, o);
        if (a2 > amax || (a2 == amax && at2 < at)) {
            amax = a2;
            mx = m2;
            at = at2;
        }
    }
    uint8_t *blk = xq + b * SPECD_CUDA_Q8_K_BLOCK_BYTES;
    int8_t *qs = (int8_t *)(blk + 4);
    int16_t *bsums = (int16_t *)(blk + 260);
    if (amax == 0.0f) {
        for (int e = 0; e < 8; e++)
            qs[lane * 8 + e] = 0;
        if (lane < 16) bsums[lane] = 0;
        if (lane == 0) *(float *)blk = 0.0f;
        return;
    }
    const float iscale = __fdiv_rn(-127.0f, mx);
    int sum = 0;
    for (int e = 0; e < 8; e++) {
        int q = __float2int_rn(__fmul_rn(iscale, v[e]));
        q = q > 127 ? 127 : q < -128 ? -128 : q;
        qs[lane * 8 + e] = (int8_t)q;
        sum += q;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1); /* lanes 2g and 2g + 1 hold group g of 16 */
    if ((lane & 1) == 0) bsums[lane / 2] = (int16_t)sum;
    if (lane == 0) *(float *)blk = __fdiv_rn(1.0f, iscale);
}

extern "C" int specd_cuda_quantize_q8_k(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                                        void *xq, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_quantize_k(x, ld_x, n_rows, n, xq, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    const int32_t per_row = n / 256;
    const int64_t n_blocks = (int64_t)n_rows * per_row;
    quantize_q8_k_kernel<<<specd_cuda_grid_for(n_blocks, SPECD_CUDA_THREADS / 32),
                           SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(
        x, ld_x, per_row, n_blocks, (uint8_t *)xq);
    return specd_cuda_launch_status();
}
