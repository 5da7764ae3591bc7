/* What the quantized matmuls share (matmul_q.cu: Q4_0, Q4_1 and Q8_0 weights on Q8_0 rows;
 * matmul_k.cu: Q4_K and Q6_K weights on Q8_K rows): eight lanes compute one (output o, row r)
 * pair, SPECD_CUDA_QMM_PAIRS_PER_BLOCK pairs to a block of SPECD_CUDA_THREADS. Pairs are numbered
 * p = o * n_rows + r, so the pairs of one weight row sit side by side and its blocks are read once
 * into L1 for all of them. Each kernel keeps its own block arithmetic and its own order of adding
 * up the eight lanes: its CPU twin's, which differ. */
#ifndef SPECD_KERNELS_CUDA_QMM_PAIRS_CUH
#define SPECD_KERNELS_CUDA_QMM_PAIRS_CUH

#include "kernels/cuda/cuda_common.cuh"

/* A thread's place in a quantized matmul. A pair past the end still takes part in the kernels'
 * shuffles (every lane of the warp must), on row 0 and output 0, and writes nothing. */
typedef struct {
    int lane;            /* 0..7 within the pair */
    bool live;           /* false past the last pair */
    int64_t o, r;        /* the pair's output and row */
    const uint8_t *wrow; /* weight row o: n_blocks blocks of w_block_bytes */
    const uint8_t *xrow; /* activation row r: n_blocks blocks of x_block_bytes */
} specd_qmm_pair;

static __device__ __forceinline__ specd_qmm_pair specd_qmm_pair_of_thread(
    const uint8_t *w, int32_t w_block_bytes, const uint8_t *xq, int32_t x_block_bytes,
    int32_t n_blocks, int32_t n_out, int32_t n_rows) {
    specd_qmm_pair q;
    q.lane = threadIdx.x & 7;
    const int64_t p = (int64_t)blockIdx.x * SPECD_CUDA_QMM_PAIRS_PER_BLOCK + threadIdx.x / 8;
    q.live = p < (int64_t)n_out * n_rows;
    q.o = q.live ? p / n_rows : 0;
    q.r = q.live ? p % n_rows : 0;
    q.wrow = w + q.o * n_blocks * (int64_t)w_block_bytes;
    q.xrow = xq + q.r * n_blocks * (int64_t)x_block_bytes;
    return q;
}

/* The pair's result, written once (by lane 0) and only for a live pair. */
static __device__ __forceinline__ void specd_qmm_store(specd_qmm_pair q, float *y, int64_t ld_y,
                                                       float v) {
    if (q.live && q.lane == 0) y[q.r * ld_y + q.o] = v;
}

/* A launcher's check (specd_cuda_check_matmul_q or _k, kernels/cuda/cuda_plan.h). */
typedef int specd_cuda_qmm_check(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                                 const void *xq, int32_t n_rows, const float *y, int64_t ld_y,
                                 char *why, size_t why_size);

/* A launcher's first steps: SPECD_CUDA_E_ARGUMENT when check refuses (its reason in the refusal
 * buffer), else SPECD_CUDA_OK and *grid, the blocks for n_out * n_rows pairs (0 when there are
 * no rows: nothing to launch). */
static inline int specd_cuda_qmm_grid(specd_cuda_qmm_check *check, uint32_t w_type, const void *w,
                                      int32_t n_in, int32_t n_out, const void *xq,
                                      int32_t n_rows, const float *y, int64_t ld_y,
                                      uint32_t *grid) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    *grid = 0;
    if (check(w_type, w, n_in, n_out, xq, n_rows, y, ld_y, why, why_size) != SPECD_CUDA_OK)
        return SPECD_CUDA_E_ARGUMENT;
    if (n_rows > 0)
        *grid = specd_cuda_grid_for((int64_t)n_out * n_rows, SPECD_CUDA_QMM_PAIRS_PER_BLOCK);
    return SPECD_CUDA_OK;
}

#endif
