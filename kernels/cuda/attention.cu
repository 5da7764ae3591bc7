/* Attention over an F16 KV cache with per-row visibility bits (kernels/cuda/cuda_ops.h).
 *
 * Pass 1, one block per (split, head, row): split s holds the row's visible positions of rank
 * [s S, (s + 1) S) among its visible ones, in position order (S = SPECD_CUDA_ATTN_SPLIT, fixed).
 * Splitting by rank rather than by absolute position is what makes a tree row exact: a drafted
 * node's mask hides its uncles, and once the accepted path is committed plain decoding sees the
 * same keys packed together, each at its rank. Cutting at absolute positions would group the keys
 * differently from that decode, and a greedy token could flip in the last bits. For a row without
 * holes, rank and position are the same. The query is rounded to F16 as the CPU's F16 cache path
 * does (kernels/cpu/attention.c); each position's score is scale * (q . k_j), lane l summing dims
 * l, l + 32, ... with fused multiply-adds and the lanes combined by a fixed xor tree; the split's
 * max m, its sum l of exp(score - m) (per thread, then a fixed tree) and, per dim,
 * sum_j exp(score_j - m) v_j in rank order go to the work buffer. Invisible positions are never
 * read (the cache there may hold anything).
 * Pass 2, one block per (head, row): the splits merged in order with the usual log-sum-exp
 * rescaling. Splits holding none of the row's positions add exact zeros, so a row's result is the
 * same whatever n_kv beyond its last visible position and whatever the other rows.
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

/* The absolute positions of the row's visible positions of rank [r0, r0 + S) into pos, in order;
 * returns how many there are. The mask's words are counted a block's width at a time (an exclusive
 * scan of their popcounts), and only the words holding ranks of the split are expanded. Bits at
 * n_kv and past it do not count. */
static __device__ int32_t split_positions(const uint32_t *mask, int32_t n_kv, int32_t r0,
                                          int32_t *pos, int32_t *scan) {
    const int32_t n_words = (n_kv + 31) / 32, r1 = r0 + SPECD_CUDA_ATTN_SPLIT;
    int32_t before = 0; /* visible positions in the words counted so far (equal in every thread) */
    for (int32_t w0 = 0; w0 < n_words && before < r1; w0 += SPECD_CUDA_THREADS) {
        const int32_t w = w0 + (int32_t)threadIdx.x;
        uint32_t bits = w < n_words ? mask[w] : 0u;
        if (w == n_words - 1 && n_kv % 32) bits &= (1u << (n_kv % 32)) - 1u;
        scan[threadIdx.x] = __popc(bits);
        __syncthreads();
        for (int o = 1; o < SPECD_CUDA_THREADS; o <<= 1) { /* inclusive scan; integers: exact */
            const int32_t add = (int32_t)threadIdx.x >= o ? scan[threadIdx.x - o] : 0;
            __syncthreads();
            scan[threadIdx.x] += add;
            __syncthreads();
        }
        int32_t rank = before + scan[threadIdx.x] - __popc(bits);
        const int32_t total = scan[SPECD_CUDA_THREADS - 1];
        __syncthreads(); /* scan is rewritten by the next chunk */
        for (; bits && rank < r1; bits &= bits - 1u, rank++)
            if (rank >= r0) pos[rank - r0] = w * 32 + (__ffs((int)bits) - 1);
        before += total;
    }
    __syncthreads(); /* every pos[] written */
    return max(0, min((int32_t)SPECD_CUDA_ATTN_SPLIT, before - r0));
}

static __global__ void attention_split_kernel(specd_cuda_attention_args a, int32_t n_splits) {
    __shared__ float qh[SPECD_CUDA_ATTN_MAX_HEAD_DIM];
    __shared__ float sc[SPECD_CUDA_ATTN_SPLIT];
    __shared__ float red[SPECD_CUDA_THREADS];
    __shared__ int32_t pos[SPECD_CUDA_ATTN_SPLIT];
    __shared__ int32_t scan[SPECD_CUDA_THREADS];
    const int32_t split = blockIdx.x, h = blockIdx.y, r = blockIdx.z;
    const int32_t hd = a.head_dim, g = h / (a.n_heads / a.n_kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x / 32;
    const float *q = a.q + (int64_t)r * a.ld_q + (int64_t)h * hd;
    for (int32_t d = threadIdx.x; d < hd; d += SPECD_CUDA_THREADS)
        qh[d] = __half2float(__float2half_rn(q[d]));
    const int32_t len = split_positions(a.visible + (int64_t)r * a.mask_words, a.n_kv,
                                        split * SPECD_CUDA_ATTN_SPLIT, pos, scan);

    const uint16_t *kg = a.k + (int64_t)g * a.k_head_stride;
    /* scores: one warp per position */
    for (int32_t jj = warp; jj < len; jj += WARPS) {
        const uint16_t *kj = kg + (int64_t)pos[jj] * a.k_pos_stride;
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
            const float p = expf(__fsub_rn(sc[jj], m));
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
                if (p == 0.0f) continue; /* underflowed: adds nothing */
                const int64_t at = (int64_t)pos[jj] * a.v_pos_stride + (int64_t)d * a.v_dim_stride;
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
