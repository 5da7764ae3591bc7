/* RMSNorm of rows (kernels/cuda/cuda_ops.h), one block per row. As the CPU
 * (kernels/cpu/rmsnorm.c): the float squares summed in double (per thread over columns t, t + 128,
 * ..., then a fixed tree over the block), mean = (float)(sum / n), scale = 1 / sqrtf(mean + eps)
 * in IEEE single precision, y = (x * scale) * w with two roundings. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void rmsnorm_kernel(const float *__restrict__ x, int64_t ld_x,
                                      const float *__restrict__ w, float *y, int64_t ld_y,
                                      int32_t n, float eps) {
    __shared__ double part[SPECD_CUDA_THREADS];
    const float *xr = x + (int64_t)blockIdx.x * ld_x;
    float *yr = y + (int64_t)blockIdx.x * ld_y;
    double sum = 0.0;
    for (int32_t i = threadIdx.x; i < n; i += SPECD_CUDA_THREADS)
        sum += (double)__fmul_rn(xr[i], xr[i]);
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int s = SPECD_CUDA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) part[threadIdx.x] = __dadd_rn(part[threadIdx.x], part[threadIdx.x + s]);
        __syncthreads();
    }
    const float mean = (float)(part[0] / (double)n);
    const float scale = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean, eps)));
    /* in place is safe: each thread rewrites only the columns it alone reads in this pass */
    for (int32_t i = threadIdx.x; i < n; i += SPECD_CUDA_THREADS) {
        const float t = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(t, w[i]) : t;
    }
}

extern "C" int specd_cuda_rmsnorm(const float *x, int64_t ld_x, const float *w, float *y,
                                  int64_t ld_y, int32_t n_rows, int32_t n, float eps,
                                  void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_rows(x, ld_x, y, ld_y, n_rows, n, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    rmsnorm_kernel<<<(unsigned)n_rows, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(
        x, ld_x, w, y, ld_y, n, eps);
    return specd_cuda_launch_status();
}
