/* y = a + b over rows (kernels/cuda/cuda_ops.h): the runtime's residual adds and, with ld_b 0
 * (one row of b for every row), its Q/K/V bias adds. One IEEE single addition per element, as
 * the CPU forward pass (model/runtime/forward.c) adds, so the same bits. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void add_kernel(const float *a, int64_t ld_a, const float *b, int64_t ld_b,
                                  float *y, int64_t ld_y, int32_t n) {
    const int64_t r = blockIdx.y;
    const int32_t i = blockIdx.x * SPECD_CUDA_THREADS + threadIdx.x;
    if (i < n) y[r * ld_y + i] = __fadd_rn(a[r * ld_a + i], b[r * ld_b + i]);
}

extern "C" int specd_cuda_add(const float *a, int64_t ld_a, const float *b, int64_t ld_b, float *y,
                              int64_t ld_y, int32_t n_rows, int32_t n, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_rows(a, ld_a, y, ld_y, n_rows, n, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (!b || ld_b < 0 || (ld_b > 0 && ld_b < n) || ((uintptr_t)b & 3)) {
        snprintf(why, why_size, "add: b must be 4-byte aligned with ld_b 0 or >= %d", n);
        return SPECD_CUDA_E_ARGUMENT;
    }
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (n_rows > 65535) {
        snprintf(why, why_size, "add: %d rows exceed the grid's 65535", n_rows);
        return SPECD_CUDA_E_ARGUMENT;
    }
    const dim3 grid(specd_cuda_grid_for(n, SPECD_CUDA_THREADS), (unsigned)n_rows);
    add_kernel<<<grid, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(a, ld_a, b, ld_b, y,
                                                                           ld_y, n);
    return specd_cuda_launch_status();
}
