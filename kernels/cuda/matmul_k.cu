/* Q4_K and Q6_K weights times Q8_K activation rows (kernels/cuda/cuda_ops.h).
 *
 * Eight lanes compute one (output o, row r) pair with the CPU's arithmetic
 * (kernels/cpu/quant_k.c): per super-block of 256, lane l takes the exact integer sum over the
 * elements whose index is l mod 8 of scale * (activation quant * weight quant), then
 * sums_l = sums_l + d * lane_l (two roundings, d = fp16 d_w * d_x); Q4_K's minimum term
 * sum = sum - dmin * (bsums . mins) runs alongside in one float; at the end
 * sum = sum + sums_l for l = 0..7 in order. No step depends on how many pairs or rows there are.
 * The pairs' layout: kernels/cuda/qmm_pairs.cuh.
 *
 * Block layouts (kernels/cpu/quant_blocks.h): Q4_K = fp16 d, fp16 dmin, scales[12], qs[128]
 * (144 bytes); Q6_K = ql[128], qh[64], int8 scales[16], fp16 d (210 bytes); Q8_K = float d,
 * int8 qs[256], int16 bsums[16] (292 bytes). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/qmm_pairs.cuh"

#include "kernels/cpu/dtype.h"

/* Sub-block j's (0..7) 6-bit scale and min of a Q4_K super-block: j < 4 keep theirs in the low
 * 6 bits of bytes j and j + 4; j >= 4 split theirs into a nibble of byte j + 4 and the top two
 * bits of bytes j - 4 (scale) and j (min). */
static __device__ __forceinline__ void q4_k_scale_min(int j, const uint8_t *q, int *sc, int *mn) {
    if (j < 4) {
        *sc = q[j] & 63;
        *mn = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *mn = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Lane l's integer sum over one Q4_K super-block and the block's sum of bsums times mins.
 * Elements 64c..64c+31 are the low nibbles of qs[32c..32c+31] with sub-block 2c's scale,
 * 64c+32..64c+63 their high nibbles with sub-block 2c+1's. */
static __device__ __forceinline__ int q4_k_lane(const uint8_t *w, const uint8_t *x, int l,
                                                int *summ) {
    const uint8_t *scales = w + 4, *q4 = w + 16;
    const int8_t *q8 = (const int8_t *)(x + 4);
    const int16_t *bsums = (const int16_t *)(x + 260);
    int acc = 0, mins = 0;
    for (int c = 0; c < 4; c++) {
        int sc_lo, mn_lo, sc_hi, mn_hi;
        q4_k_scale_min(2 * c, scales, &sc_lo, &mn_lo);
        q4_k_scale_min(2 * c + 1, scales, &sc_hi, &mn_hi);
        int lo = 0, hi = 0;
        for (int e = l; e < 32; e += 8) {
            lo += q8[64 * c + e] * (q4[32 * c + e] & 0xf);
            hi += q8[64 * c + 32 + e] * (q4[32 * c + e] >> 4);
        }
        acc += sc_lo * lo + sc_hi * hi;
        mins += (bsums[4 * c] + bsums[4 * c + 1]) * mn_lo + (bsums[4 * c + 2] + bsums[4 * c + 3]) * mn_hi;
    }
    *summ = mins;
    return acc;
}

/* Q6_K element e's quant: g = e / 128, w = e % 128, quarter k = w / 32, i = w % 32: the low four
 * bits are a nibble of ql[64g + i + 32 (k & 1)] (low for k < 2), the high two are bits 2k, 2k+1
 * of qh[32g + i]; less 32. */
static __device__ __forceinline__ int q6_k_quant(const uint8_t *ql, const uint8_t *qh, int e) {
    const int g = e / 128, w = e % 128, k = w / 32, i = w % 32;
    const int byte = ql[64 * g + i + 32 * (k & 1)];
    const int low = k < 2 ? byte & 0xf : byte >> 4;
    const int high = (qh[32 * g + i] >> (2 * k)) & 3;
    return (low | (high << 4)) - 32;
}

static __device__ __forceinline__ int q6_k_lane(const uint8_t *w, const uint8_t *x, int l) {
    const uint8_t *ql = w, *qh = w + 128;
    const int8_t *scales = (const int8_t *)(w + 192);
    const int8_t *q8 = (const int8_t *)(x + 4);
    int acc = 0;
    for (int e = l; e < 256; e += 8)
        acc += scales[e / 16] * (q8[e] * q6_k_quant(ql, qh, e));
    return acc;
}

template <int TYPE>
static __global__ void matmul_k_kernel(const uint8_t *__restrict__ w, int32_t n_blocks,
                                       int32_t n_out, const uint8_t *__restrict__ xq,
                                       int32_t n_rows, float *__restrict__ y, int64_t ld_y) {
    enum { WBYTES = TYPE == SPECD_DTYPE_Q4_K ? 144 : 210 };
    const specd_qmm_pair q = specd_qmm_pair_of_thread(w, WBYTES, xq, SPECD_CUDA_Q8_K_BLOCK_BYTES,
                                                       n_blocks, n_out, n_rows);
    const int l = q.lane;
    float sums = 0.0f, sum = 0.0f;
    for (int32_t b = 0; b < n_blocks; b++) {
        const uint8_t *wb = q.wrow + (int64_t)b * WBYTES;
        const uint8_t *xb = q.xrow + (int64_t)b * SPECD_CUDA_Q8_K_BLOCK_BYTES;
        const float xd = *(const float *)xb;
        if (TYPE == SPECD_DTYPE_Q4_K) {
            int summ;
            const int acc = q4_k_lane(wb, xb, l, &summ);
            const uint16_t *wh = (const uint16_t *)wb;
            const float d = __fmul_rn(specd_dev_h2f(wh[0]), xd);
            sums = __fadd_rn(sums, __fmul_rn(d, (float)acc));
            const float dmin = __fmul_rn(specd_dev_h2f(wh[1]), xd);
            sum = __fsub_rn(sum, __fmul_rn(dmin, (float)summ));
        } else {
            const int acc = q6_k_lane(wb, xb, l);
            const float d = __fmul_rn(specd_dev_h2f(*(const uint16_t *)(wb + 208)), xd);
            sums = __fadd_rn(sums, __fmul_rn(d, (float)acc));
        }
    }
    /* sum + sums_0 + sums_1 + ... + sums_7, left to right, gathered by each group's lane 0 */
    const int base = threadIdx.x & 31 & ~7;
    for (int k = 0; k < 8; k++) {
        const float s = __shfl_sync(0xffffffffu, sums, base + k);
        sum = __fadd_rn(sum, s);
    }
    specd_qmm_store(q, y, ld_y, sum);
}

extern "C" int specd_cuda_matmul_k(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out,
                                   const void *xq, int32_t n_rows, float *y, int64_t ld_y,
                                   void *stream) {
    uint32_t grid;
    const int rc = specd_cuda_qmm_grid(specd_cuda_check_matmul_k, w_type, w, n_in, n_out, xq,
                                       n_rows, y, ld_y, &grid);
    if (rc != SPECD_CUDA_OK || grid == 0) return rc;
    const cudaStream_t s = SPECD_CUDA_STREAM(stream);
    const uint8_t *wb = (const uint8_t *)w, *xb = (const uint8_t *)xq;
    if (w_type == SPECD_DTYPE_Q4_K)
        matmul_k_kernel<SPECD_DTYPE_Q4_K>
            <<<grid, SPECD_CUDA_THREADS, 0, s>>>(wb, n_in / 256, n_out, xb, n_rows, y, ld_y);
    else
        matmul_k_kernel<SPECD_DTYPE_Q6_K>
            <<<grid, SPECD_CUDA_THREADS, 0, s>>>(wb, n_in / 256, n_out, xb, n_rows, y, ld_y);
    return specd_cuda_launch_status();
}
