/* Attention over an F16 KV cache with per-row visibility bits (kernels/cuda/cuda_ops.h).
 *
 * Pass 1, one block per (split, head, row): the split covers absolute positions
 * [s S, (s + 1) S) of the cache (S = SPECD_CUDA_ATTN_SPLIT, fixed). The query is rounded to F16 as
 * the CPU's F16 cache path does (kernels/cpu/attention.c); each visible position's score is
 * scale * (q . k_j), lane l summing dims l, l + 32, ... with fused multiply-adds and the lanes
 * combined by a fixed xor tree; the split's max m, its sum l of exp(score - m) (per thread, then a
 * fixed tree) and, per dim, sum_j exp(score_j - m) v_j in position order go to the work buffer.
 * Invisible positions are never read (the cache there may hold anything).
 * Pass 2, one block per (head, row): the splits merged in position order with the usual
 * log-sum-exp rescaling. Splits the row sees nothing of add exact zeros, so a row's result is
 * the same whatever n_kv beyond its last visible position and whatever the other rows.
 * The CPU rounds the normalised probabilities to F16 before mixing V; this does not, so the two
 * differ by rounding (the test's threshold allows for it). */
#include "kernels/cuda/cuda_common.cuh"

#include <math.h>

enum { WARPS = SPECD_CUDA_THREADS / 32 };

/* Fixed-order block sum of one float per thread (a tree over shared memory). */
static __device__ float block_sum(float v, float *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = SPECD_CUDA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = __fadd_rn(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    const float total = red[0];
    __syncthreads(); /* red is reused by the caller's next reduction */
    return total;
}

static __device__ float block_max(float v, float *red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int s = SPECD_CUDA_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    const float m = red[0];
    __syncthreads();
    return m;
}

static __global__ void attention_split_kernel(specd_cuda_attention_args a, int32_t n_splits) {
    __shared__ float qh[SPECD_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[SPECD_CUDA_ATTN_SPLIT];
    __shared__ float red[SPECD_CUDA_THREADS];
    const int32_t split = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
    const int32_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const float *q = a.q + (int64_t)r * a.ld_q + (int64_t)h * hd;
    for (int32_t d = threadIdx.x; d < hd; d += SPECD_CUDA_THREADS)
        qh[d] = __half2float(__float2half_rn(q[d]));
    __syncthreads();

    const int32_t j0 = split * SPECD_CUDA_ATTN_SPLIT;
    const int32_t len = min((int32_t)SPECD_CUDA_ATTN_SPLIT, a.n_kv - j0);
    const uint32_t *mask = a.visible + (int64_t)r * a.mask_words;
    const uint16_t *kg = a.k + (int64_t)g * a.k_head_stride;
    /* scores: one warp per position; the visibility bit is the same for the whole warp */
    for (int32_t jj = warp; jj < len; jj += WARPS) {
        const int32_t j = j0 + jj;
        if (!((mask[j / 32] >> (j % 32)) & 1u)) {
            if (lane == 0) sc[jj] = -INFINITY;
            continue;
        }
        const uint16_t *kj = kg + (int64_t)j * a.k_pos_stride;
        float dot = 0.0f;
        for (int32_t d = lane; d < hd; d += 32)
            dot = __fmaf_rn(specd_dev_h2f(kj[d]), qh[d], dot);
        for (int o = 16; o > 0; o >>= 1)
            dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, o));
        if (lane == 0) sc[jj] = __fmul_rn(dot, a.scale);
    }
    __syncthreads();

    float m = -INFINITY;
    for (int32_t jj = threadIdx.x; jj < len; jj += SPECD_CUDA_THREADS)
        m = fmaxf(m, sc[jj]);
    m = block_max(m, red);
    float l = 0.0f;
    if (m != -INFINITY) {
        for (int32_t jj = threadIdx.x; jj < len; jj += SPECD_CUDA_THREADS) {
            const float p = expf(__fsub_rn(sc[jj], m)); /* exp(-inf) = 0 where invisible */
            sc[jj] = p;
            l = __fadd_rn(l, p);
        }
    }
    l = block_sum(l, red); /* ends with a barrier: every sc[jj] now holds its p */

    float *out = a.work + (((int64_t)r * a.n_heads + h) * n_splits + split) * (hd + 2);
    if (threadIdx.x == 0) {
        out[0] = m;
        out[1] = l;
    }
    const uint16_t *vg = a.v + (int64_t)g * a.v_head_stride;
    for (int32_t d = threadIdx.x; d < hd; d += SPECD_CUDA_THREADS) {
        float acc = 0.0f;
        if (m != -INFINITY)
            for (int32_t jj = 0; jj < len; jj++) {
                const float p = sc[jj];
                if (p == 0.0f) continue; /* invisible (or underflowed): adds nothing; not read */
                const int64_t at = (int64_t)(j0 + jj) * a.v_pos_stride + (int64_t)d * a.v_dim_stride;
                acc = __fmaf_rn(p, specd_dev_h2f(vg[at]), acc);
            }
        out[2 + d] = acc;
    }
}

static __global__ void attention_merge_kernel(specd_cuda_attention_args a, int32_t n_splits) {
    const int32_t h = blockIdx.x, r = blockIdx.y, hd = a.head_dim;
    const float *part = a.work + ((int64_t)r * a.n_heads + h) * n_splits * (hd + 2);
    float mx = -INFINITY;
    for (int32_t s = 0; s < n_splits; s++)
        mx = fmaxf(mx, part[(int64_t)s * (hd + 2)]);
    float total = 0.0f;
    if (mx != -INFINITY)
        for (int32_t s = 0; s < n_splits; s++) {
            const float *ps = part + (int64_t)s * (hd + 2);
            if (ps[1] > 0.0f) total = __fmaf_rn(ps[1], expf(__fsub_rn(ps[0], mx)), total);
        }
    float *out = a.out + (int64_t)r * a.ld_out + (int64_t)h * hd;
    for (int32_t d = threadIdx.x; d < hd; d += SPECD_CUDA_THREADS) {
        float acc = 0.0f;
        if (total > 0.0f) {
            for (int32_t s = 0; s < n_splits; s++) {
                const float *ps = part + (int64_t)s * (hd + 2);
                if (ps[1] > 0.0f)
                    acc = __fmaf_rn(ps[2 + d], expf(__fsub_rn(ps[0], mx)), acc);
            }
            acc = __fdiv_rn(acc, total);
        }
        out[d] = acc;
    }
}

extern "C" int specd_cuda_attention(const specd_cuda_attention_args *args, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (specd_cuda_check_attention(args, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (args->n_rows == 0) return SPECD_CUDA_OK;
    const int32_t n_splits = specd_cuda_attention_splits(args->n_kv);
    const cudaStream_t s = SPECD_CUDA_STREAM(stream);
    const dim3 grid1((unsigned)n_splits, (unsigned)args->n_heads, (unsigned)args->n_rows);
    attention_split_kernel<<<grid1, SPECD_CUDA_THREADS, 0, s>>>(*args, n_splits);
    const int rc = specd_cuda_launch_status();
    if (rc != SPECD_CUDA_OK) return rc;
    const dim3 grid2((unsigned)args->n_heads, (unsigned)args->n_rows);
    attention_merge_kernel<<<grid2, SPECD_CUDA_THREADS, 0, s>>>(*args, n_splits);
    return specd_cuda_launch_status();
}
