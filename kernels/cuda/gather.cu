/* y[j] = x[rows[j]] over float rows (kernels/cuda/cuda_ops.h): the runtime's requested output
 * rows, gathered before the output norm and head. A copy: the bits of x. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void gather_kernel(const float *__restrict__ x, int64_t ld_x,
                                     const int32_t *__restrict__ rows, float *__restrict__ y,
                                     int64_t ld_y, int32_t n) {
    const int64_t j = blockIdx.y;
    const int32_t i = blockIdx.x * SPECD_CUDA_THREADS + threadIdx.x;
    if (i < n) y[j * ld_y + i] = x[(int64_t)rows[j] * ld_x + i];
}

extern "C" int specd_cuda_gather(const float *x, int64_t ld_x, const int32_t *rows, int32_t n_rows,
                                 int32_t n, float *y, int64_t ld_y, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_rows(x, ld_x, y, ld_y, n_rows, n, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (!rows || ((uintptr_t)rows & 3)) {
        snprintf(why, why_size, "gather: rows is NULL or misaligned");
        return SPECD_CUDA_E_ARGUMENT;
    }
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (n_rows > 65535) {
        snprintf(why, why_size, "gather: %d rows exceed the grid's 65535", n_rows);
        return SPECD_CUDA_E_ARGUMENT;
    }
    const dim3 grid(specd_cuda_grid_for(n, SPECD_CUDA_THREADS), (unsigned)n_rows);
    gather_kernel<<<grid, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(x, ld_x, rows, y,
                                                                              ld_y, n);
    return specd_cuda_launch_status();
}
