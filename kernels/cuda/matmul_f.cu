/* F32 and F16 weights times float rows (kernels/cuda/cuda_ops.h). One warp per (output, row)
 * pair: lane l takes the float products of columns l, l + 32, ... and sums them in double, the 32
 * lane sums are combined by a fixed xor-shuffle tree and rounded to float once. The CPU
 * (kernels/cpu/dtype_float.c) sums the same float products in double in column order, so the two
 * agree unless a double-rounded sum straddles a float rounding boundary. For F16 weights the
 * activations are rounded to F16 first, as the CPU's vec_dot_type does. */
#include "kernels/cuda/cuda_common.cuh"

#include "kernels/cpu/dtype.h"

template <bool F16>
static __global__ void matmul_f_kernel(const void *__restrict__ w, int32_t n_in, int32_t n_out,
                                       const float *__restrict__ x, int64_t ld_x,
                                       int32_t n_rows, float *__restrict__ y, int64_t ld_y) {
    const int lane = threadIdx.x & 31;
    const int64_t p = (int64_t)blockIdx.x * SPECD_CUDA_FMM_PAIRS_PER_BLOCK + threadIdx.x / 32;
    if (p >= (int64_t)n_out * n_rows) return; /* the whole warp: p is the warp's */
    const int64_t o = p / n_rows, r = p % n_rows;
    const float *xr = x + r * ld_x;
    double sum = 0.0;
    for (int32_t c = lane; c < n_in; c += 32) {
        float wv, xv = xr[c];
        if (F16) {
            wv = specd_dev_h2f(((const uint16_t *)w)[o * n_in + c]);
            xv = __half2float(__float2half_rn(xv));
        } else {
            wv = ((const float *)w)[o * n_in + c];
        }
        sum += (double)__fmul_rn(wv, xv);
    }
    for (int s = 16; s > 0; s >>= 1)
        sum = __dadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, s));
    if (lane == 0) y[r * ld_y + o] = (float)sum;
}

extern "C" int specd_cuda_matmul_f(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                                   const float *x, int64_t ld_x, int32_t n_rows, float *y,
                                   int64_t ld_y, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_matmul_f(w_type, w, n_in, n_out, x, ld_x, n_rows, y, ld_y, why,
                                  why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    const uint32_t grid =
        specd_cuda_grid_for((int64_t)n_out * n_rows, SPECD_CUDA_FMM_PAIRS_PER_BLOCK);
    const cudaStream_t s = SPECD_CUDA_STREAM(stream);
    if (w_type == SPECD_DTYPE_F16)
        matmul_f_kernel<true><<<grid, SPECD_CUDA_THREADS, 0, s>>>(w, n_in, n_out, x, ld_x,
                                                                  n_rows, y, ld_y);
    else
        matmul_f_kernel<false><<<grid, SPECD_CUDA_THREADS, 0, s>>>(w, n_in, n_out, x, ld_x,
                                                                   n_rows, y, ld_y);
    return specd_cuda_launch_status();
}
