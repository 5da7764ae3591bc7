/* Quantized weights times quantized activation rows (kernels/cuda/cuda_ops.h).
 *
 * Eight lanes compute one (output o, row r) pair with the CPU's arithmetic
 * (kernels/cpu/quant_32.c): lane i owns elements 4i..4i+3 of every block of 32; per block it takes
 * the exact integer dot of those four weight quants with the four activation quants (one dp4a)
 * and folds it in with lane = fma(d_w * d_x, (float)sum, lane), blocks in order; the eight lanes
 * are then summed as ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) (float addition is commutative, so
 * the xor-shuffle tree below rounds exactly so). Q4_1 adds its minimum terms, m_w * s_x folded
 * block by block into one scalar, at the end. The pair's result never depends on which other
 * pairs share its warp or how many rows there are. The pairs' layout:
 * kernels/cuda/qmm_pairs.cuh. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/qmm_pairs.cuh"

#include "kernels/cpu/dtype.h"

/* Lane i's four weight quants of a block, as four signed bytes. Q4 elements e < 16 are the low
 * nibbles of qs[e], e >= 16 the high nibbles of qs[e - 16]: lane i < 4 reads qs[4i..4i+3]'s low
 * nibbles, lane i >= 4 the high nibbles of qs[4i-16..4i-13]. */
template <int TYPE> struct qblock;

template <> struct qblock<SPECD_DTYPE_Q4_0> {
    enum { BYTES = 18 };
    static __device__ __forceinline__ int quants(const uint8_t *b, int i) {
        const int v = specd_dev_load_u16x2(b + 2 + ((4 * i) & 15));
        const int nib = (i < 4 ? v : v >> 4) & 0x0f0f0f0f;
        return (int)__vsub4((unsigned)nib, 0x08080808u); /* q - 8 per byte */
    }
};

template <> struct qblock<SPECD_DTYPE_Q4_1> {
    enum { BYTES = 20 };
    static __device__ __forceinline__ int quants(const uint8_t *b, int i) {
        const int v = *(const int *)(b + 4 + ((4 * i) & 15));
        return (i < 4 ? v : v >> 4) & 0x0f0f0f0f;
    }
};

template <> struct qblock<SPECD_DTYPE_Q8_0> {
    enum { BYTES = 34 };
    static __device__ __forceinline__ int quants(const uint8_t *b, int i) {
        return specd_dev_load_u16x2(b + 2 + 4 * i);
    }
};

template <int TYPE>
static __global__ void matmul_q_kernel(const uint8_t *__restrict__ w, int32_t n_blocks,
                                       int32_t n_out, const uint8_t *__restrict__ xq,
                                       int32_t n_rows, float *__restrict__ y, int64_t ld_y) {
    const specd_qmm_pair q = specd_qmm_pair_of_thread(w, qblock<TYPE>::BYTES, xq,
                                                       SPECD_CUDA_Q8_BLOCK_BYTES, n_blocks,
                                                       n_out, n_rows);
    const int i = q.lane;
    float lane = 0.0f, mins = 0.0f;
    for (int32_t b = 0; b < n_blocks; b++) {
        const uint8_t *wb = q.wrow + (int64_t)b * qblock<TYPE>::BYTES;
        const uint8_t *xb = q.xrow + (int64_t)b * SPECD_CUDA_Q8_BLOCK_BYTES;
        const int sumi = __dp4a(qblock<TYPE>::quants(wb, i), *(const int *)(xb + 4 + 4 * i), 0);
        const uint16_t *wh = (const uint16_t *)wb, *xh = (const uint16_t *)xb;
        const float d = __fmul_rn(specd_dev_h2f(wh[0]), specd_dev_h2f(xh[0]));
        lane = __fmaf_rn(d, (float)sumi, lane);
        if (TYPE == SPECD_DTYPE_Q4_1) mins = __fmaf_rn(specd_dev_h2f(wh[1]), specd_dev_h2f(xh[1]), mins);
    }
    lane = __fadd_rn(lane, __shfl_xor_sync(0xffffffffu, lane, 4));
    lane = __fadd_rn(lane, __shfl_xor_sync(0xffffffffu, lane, 2));
    lane = __fadd_rn(lane, __shfl_xor_sync(0xffffffffu, lane, 1));
    if (TYPE == SPECD_DTYPE_Q4_1) lane = __fadd_rn(lane, mins);
    specd_qmm_store(q, y, ld_y, lane);
}

extern "C" int specd_cuda_matmul_q(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                                   const void *xq, int32_t n_rows, float *y, int64_t ld_y,
                                   void *stream) {
    uint32_t grid;
    const int rc = specd_cuda_qmm_grid(specd_cuda_check_matmul_q, w_type, w, n_in, n_out, xq,
                                       n_rows, y, ld_y, &grid);
    if (rc != SPECD_CUDA_OK || grid == 0) return rc;
    const cudaStream_t s = SPECD_CUDA_STREAM(stream);
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
    const int32_t nb = n_in / 32;
    switch (w_type) {
    case SPECD_DTYPE_Q4_0:
        matmul_q_kernel<SPECD_DTYPE_Q4_0>
            <<<grid, SPECD_CUDA_THREADS, 0, s>>>(wb, nb, n_out, xb, n_rows, y, ld_y);
        break;
    case SPECD_DTYPE_Q4_1:
        matmul_q_kernel<SPECD_DTYPE_Q4_1>
            <<<grid, SPECD_CUDA_THREADS, 0, s>>>(wb, nb, n_out, xb, n_rows, y, ld_y);
        break;
    default:
        matmul_q_kernel<SPECD_DTYPE_Q8_0>
            <<<grid, SPECD_CUDA_THREADS, 0, s>>>(wb, nb, n_out, xb, n_rows, y, ld_y);
        break;
    }
    return specd_cuda_launch_status();
}
