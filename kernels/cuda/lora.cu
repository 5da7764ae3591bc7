/* Gated LoRA (kernels/cuda/cuda_ops.h): y[r] += gate[r] * scale * B (A x[r]). As the CPU's forward
 * pass applies an adapter to one row (model/runtime/forward.c): each sum is a float accumulation
 * in index order with separate multiply and add roundings, then y + (gate * scale) * s; a row
 * whose gate is 0 is left untouched. One thread per sum, so no sum depends on the batch. */
#include "kernels/cuda/cuda_common.cuh"

/* t[r][k] = sum_i a[k][i] x[r][i], for rows with a gate */
static __global__ void lora_down_kernel(const float *__restrict__ a, int32_t n_in, int32_t rank,
                                        const float *__restrict__ x, int64_t ld_x,
                                        const float *__restrict__ gate, int32_t n_rows,
                                        float *__restrict__ t) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)n_rows * rank) return;
    const int64_t r = id / rank, k = id % rank;
    if (gate[r] == 0.0f) return;
    const float *ak = a + k * n_in, *xr = x + r * ld_x;
    float s = 0.0f;
    for (int32_t i = 0; i < n_in; i++)
        s = __fadd_rn(s, __fmul_rn(ak[i], xr[i]));
    t[id] = s;
}

/* y[r][o] += (gate[r] * scale) * sum_k b[o][k] t[r][k] */
static __global__ void lora_up_kernel(const float *__restrict__ b, int32_t n_out, int32_t rank,
                                      float scale, const float *__restrict__ gate,
                                      int32_t n_rows, const float *__restrict__ t, float *y,
                                      int64_t ld_y) {
    const int64_t id = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (id >= (int64_t)n_rows * n_out) return;
    const int64_t r = id / n_out, o = id % n_out;
    if (gate[r] == 0.0f) return;
    const float *bo = b + o * rank, *tr = t + r * rank;
    float s = 0.0f;
    for (int32_t k = 0; k < rank; k++)
        s = __fadd_rn(s, __fmul_rn(bo[k], tr[k]));
    float *yo = y + r * ld_y + o;
    *yo = __fadd_rn(*yo, __fmul_rn(__fmul_rn(gate[r], scale), s));
}

extern "C" int specd_cuda_lora(const float *a, const float *b, int32_t n_in, int32_t n_out,
                               int32_t rank, float scale, const float *x, int64_t ld_x,
                               const float *gate, int32_t n_rows, float *y, int64_t ld_y,
                               float *work, size_t work_floats, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_lora(a, b, n_in, n_out, rank, x, ld_x, gate, n_rows, y, ld_y, work,
                              work_floats, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    const cudaStream_t s = SPECD_CUDA_STREAM(stream);
    lora_down_kernel<<<specd_cuda_grid_for((int64_t)n_rows * rank, SPECD_CUDA_THREADS),
                       SPECD_CUDA_THREADS, 0, s>>>(a, n_in, rank, x, ld_x, gate, n_rows, work);
    const int rc = specd_cuda_launch_status();
    if (rc != SPECD_CUDA_OK) return rc;
    lora_up_kernel<<<specd_cuda_grid_for((int64_t)n_rows * n_out, SPECD_CUDA_THREADS),
                     SPECD_CUDA_THREADS, 0, s>>>(b, n_out, rank, scale, gate, n_rows, work, y,
                                                 ld_y);
    return specd_cuda_launch_status();
}
