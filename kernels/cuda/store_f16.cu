/* Float rows to F16 rows at scattered destinations (kernels/cuda/cuda_ops.h): the runtime's new
 * K and V rows into the KV cache. Rounds as kernels/cpu/fp16.h's specd_fp32_to_fp16 (nearest
 * even, overflow to infinity, NaN to the quiet NaN 0x7e00 with its sign), the CPU cache's bits. */
#include "kernels/cuda/cuda_common.cuh"

static __device__ __forceinline__ uint16_t to_f16_as_cpu(float f) {
    if (isnan(f)) return (uint16_t)((__float_as_uint(f) >> 16) & 0x8000u) | 0x7e00u;
    return specd_dev_f2h(f);
}

static __global__ void store_f16_kernel(const float *__restrict__ x, int64_t ld_x,
                                        const int32_t *__restrict__ dst_rows, uint16_t *dst,
                                        int64_t ld_dst, int32_t n) {
    const int64_t r = blockIdx.y;
    const int32_t i = blockIdx.x * SPECD_CUDA_THREADS + threadIdx.x;
    if (i < n) dst[(int64_t)dst_rows[r] * ld_dst + i] = to_f16_as_cpu(x[r * ld_x + i]);
}

extern "C" int specd_cuda_store_f16(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                                    const int32_t *dst_rows, uint16_t *dst, int64_t ld_dst,
                                    void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (!x || !dst_rows || !dst || n_rows < 0 || n < 1 || ld_x < n || ld_dst < n ||
        ((uintptr_t)x & 3) || ((uintptr_t)dst_rows & 3) || ((uintptr_t)dst & 1)) {
        snprintf(why, why_size,
                 "store_f16: needs x, dst_rows, dst (aligned), n_rows >= 0, n >= 1, ld_x and "
                 "ld_dst >= n (n_rows %d, n %d)",
                 n_rows, n);
        return SPECD_CUDA_E_ARGUMENT;
    }
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (n_rows > 65535) {
        snprintf(why, why_size, "store_f16: %d rows exceed the grid's 65535", n_rows);
        return SPECD_CUDA_E_ARGUMENT;
    }
    const dim3 grid(specd_cuda_grid_for(n, SPECD_CUDA_THREADS), (unsigned)n_rows);
    store_f16_kernel<<<grid, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(x, ld_x, dst_rows,
                                                                                 dst, ld_dst, n);
    return specd_cuda_launch_status();
}
