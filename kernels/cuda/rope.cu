/* RoPE at explicit positions (kernels/cuda/cuda_ops.h), one thread per (head, pair). As the CPU
 * (kernels/cpu/rope.c): theta_scale = powf(base, -2 / n_rot) (computed here on the host, by the
 * same libm), pair i's angle is pos * theta_scale^i by repeated float multiplication, and
 *   x0' = fma(x0, cos, -(x1 sin)),   x1' = fma(x0, sin, x1 cos).
 * Only cosf and sinf differ: CUDA's are within 2 ulp of glibc's. */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

static __global__ void rope_kernel(float *x, int64_t ld_x, const int32_t *__restrict__ pos,
                                   int32_t n_heads, int32_t head_dim, int32_t n_pairs,
                                   float theta_scale, int neox) {
    const int32_t t = (int32_t)(blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= n_heads * n_pairs) return;
    const int32_t h = t / n_pairs, i = t % n_pairs;
    float theta = (float)pos[blockIdx.y];
    for (int32_t k = 0; k < i; k++)
        theta = __fmul_rn(theta, theta_scale);
    const float c = cosf(theta), s = sinf(theta);
    float *p = x + (int64_t)blockIdx.y * ld_x + (int64_t)h * head_dim;
    const int32_t a = neox ? i : 2 * i;
    const int32_t b = neox ? i + n_pairs : 2 * i + 1;
    const float x0 = p[a], x1 = p[b];
    p[a] = __fmaf_rn(x0, c, -__fmul_rn(x1, s));
    p[b] = __fmaf_rn(x0, s, __fmul_rn(x1, c));
}

extern "C" int specd_cuda_rope(float *x, int64_t ld_x, int32_t n_rows, const int32_t *pos,
                               int32_t n_heads, int32_t head_dim, int32_t n_rot,
                               float freq_base, int neox, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_rope(x, ld_x, n_rows, pos, n_heads, head_dim, n_rot, freq_base, why,
                              why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows == 0) return SPECD_CUDA_OK;
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    const int32_t n_pairs = n_rot / 2;
    const dim3 grid(specd_cuda_grid_for((int64_t)n_heads * n_pairs, SPECD_CUDA_THREADS),
                    (unsigned)n_rows);
    rope_kernel<<<grid, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(
        x, ld_x, pos, n_heads, head_dim, n_pairs, theta_scale, neox);
    return specd_cuda_launch_status();
}
