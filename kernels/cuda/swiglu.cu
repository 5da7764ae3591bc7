/* SwiGLU (kernels/cuda/cuda_ops.h): y = g / (1 + exp(-g)) * u, elementwise. The CPU
 * (kernels/cpu/swiglu.c) takes ggml's vectorised exp for groups of eight; the device takes
 * CUDA's expf (within 2 ulp), so the two differ by rounding only. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void swiglu_kernel(const float *g, int64_t ld_g, const float *u, int64_t ld_u,
                                     float *y, int64_t ld_y, int32_t n) {
    const int64_t r = blockIdx.y;
    const int32_t i = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    const float gv = g[r * ld_g + i], uv = u[r * ld_u + i];
    const float s = __fdiv_rn(gv, __fadd_rn(1.0f, expf(-gv)));
    y[r * ld_y + i] = __fmul_rn(s, uv);
}

extern "C" int specd_cuda_swiglu(const float *g, int64_t ld_g, const float *u, int64_t ld_u,
                                 float *y, int64_t ld_y, int32_t n_rows, int32_t n,
                                 void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_rows(g, ld_g, y, ld_y, n_rows, n, why, why_size) != SPECD_CUDA_OK ||
        specd_cuda_check_rows(u, ld_u, y, ld_y, n_rows, n, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    if (n_rows > 65535) {
        snprintf(why, why_size, "swiglu: %d rows exceed the grid's 65535", n_rows);
        return SPECD_CUDA_E_ARGUMENT;
    }
    const dim3 grid(specd_cuda_grid_for(n, SPECD_CUDA_THREADS), (unsigned)n_rows);
    swiglu_kernel<<<grid, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(g, ld_g, u, ld_u, y,
                                                                            ld_y, n);
    return specd_cuda_launch_status();
}
