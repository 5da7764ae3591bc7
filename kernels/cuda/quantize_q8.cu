/* Activation rows quantized per 32 values (kernels/cuda/cuda_ops.h): one warp per block, lane i
 * holding element i. Every step is exact or one IEEE-rounded operation in the CPU's order
 * (kernels/cpu/quant_32.c's quantize_block_8 and specd_q8_1_from_float), so the blocks are the
 * CPU's byte for byte: the max of |x| and the integer sum do not depend on the reduction order. */
#include "kernels/cuda/cuda_common.cuh"

/* rintf(v) clamped to [-128, 127], NaN to -128, as the CPU's to_int_clamped(rintf(v)). */
static __device__ __forceinline__ int quant_clamped(float v) {
    const float r = rintf(v);
    if (!(r >= -128.0f)) return -128;
    if (r > 127.0f) return 127;
    return (int)r;
}

static __global__ void quantize_q8_kernel(const float *__restrict__ x, int64_t ld_x,
                                          int32_t blocks_per_row, int64_t n_blocks,
                                          uint8_t *__restrict__ xq) {
    const int lane = threadIdx.x & 31;
    const int64_t b = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (b >= n_blocks) return; /* whole warps leave together: b is the same for all 32 lanes */
    const int64_t r = b / blocks_per_row, c = b % blocks_per_row;
    const float v = x[r * ld_x + c * 32 + lane];
    float amax = fabsf(v);
    for (int o = 16; o > 0; o >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    const float d = __fdiv_rn(amax, 127.0f);
    const float id = amax != 0.0f ? __fdiv_rn(127.0f, amax) : 0.0f;
    const int q = quant_clamped(__fmul_rn(v, id));
    int sum = q;
    for (int o = 16; o > 0; o >>= 1)
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    uint8_t *blk = xq + b * SPECD_CUDA_Q8_BLOCK_BYTES;
    blk[4 + lane] = (uint8_t)(int8_t)q;
    if (lane == 0) {
        uint16_t *h = (uint16_t *)blk;
        h[0] = specd_dev_f2h(d);
        h[1] = specd_dev_f2h(__fmul_rn(d, (float)sum));
    }
}

extern "C" int specd_cuda_quantize_q8(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                                      void *xq, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_quantize(x, ld_x, n_rows, n, xq, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    const int32_t per_row = n / 32;
    const int64_t n_blocks = (int64_t)n_rows * per_row;
    const int warps = SPECD_CUDA_THREADS / 32;
    quantize_q8_kernel<<<specd_cuda_grid_for(n_blocks, warps), SPECD_CUDA_THREADS, 0,
                         SPECD_CUDA_STREAM(stream)>>>(x, ld_x, per_row, n_blocks,
                                                      (uint8_t *)xq);
    return specd_cuda_launch_status();
}
