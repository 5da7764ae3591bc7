/* Q4_K, Q6_K and their activation type Q8_K: super-blocks of 256. Scalar reference kernels.
 *
 * The dot products reproduce ggml's reference arithmetic: per super-block, eight int32 lanes
 * (lane l collects the elements whose index is l mod 8, each times its sub-block scale), then
 * sums[l] += d * lane[l] in float, the Q4_K min term subtracted from a running float per block,
 * and the eight float lanes added last, in lane order. The AVX2 kernels keep exactly these lanes.
 */
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>
#include <string.h>

/* --- Q4_K ---------------------------------------------------------------------------------- */
void specd_q4_k_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q4_k *x = src;
    for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
        const float d = specd_fp16_to_fp32(x[b].d);
        const float dmin = specd_fp16_to_fp32(x[b].dmin);
        const uint8_t *q = x[b].qs;
        for (int j = 0; j < 8; j += 2, q += 32) {
            uint8_t sc, mn;
            specd_q4_k_scale_min(j, x[b].scales, &sc, &mn);
            const float d1 = d * sc, m1 = dmin * mn;
            specd_q4_k_scale_min(j + 1, x[b].scales, &sc, &mn);
            const float d2 = d * sc, m2 = dmin * mn;
            for (int l = 0; l < 32; l++)
                *dst++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; l++)
                *dst++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void specd_q4_k_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_k *x = vx;
    const specd_block_q8_k *y = vy;
    float sums[8] = {0};
    float sum = 0.0f;
    for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
        uint8_t sc[8], mn[8];
        for (int j = 0; j < 8; j++)
            specd_q4_k_scale_min(j, x[b].scales, &sc[j], &mn[j]);
        int32_t lane[8] = {0};
        const uint8_t *q4 = x[b].qs;
        const int8_t *q8 = y[b].qs;
        for (int j = 0; j < 8; j += 2, q4 += 32, q8 += 64) {
            for (int l = 0; l < 32; l++)
                lane[l % 8] += sc[j] * (q8[l] * (q4[l] & 0xf));
            for (int l = 0; l < 32; l++)
                lane[l % 8] += sc[j + 1] * (q8[l + 32] * (q4[l] >> 4));
        }
        int summ = 0;
        for (int j = 0; j < 16; j++)
            summ += y[b].bsums[j] * mn[j / 2];
        const float d = specd_fp16_to_fp32(x[b].d) * y[b].d;
        for (int l = 0; l < 8; l++)
            sums[l] += d * (float)lane[l];
        const float dmin = specd_fp16_to_fp32(x[b].dmin) * y[b].d;
        sum -= dmin * (float)summ;
    }
    for (int l = 0; l < 8; l++)
        sum += sums[l];
    *s = sum;
}

/* --- Q6_K ---------------------------------------------------------------------------------- */
/* Element l of each group of 128: four 6-bit values share ql[l], ql[l+32] and qh[l]. */
static void q6_k_unpack(const specd_block_q6_k *x, int8_t *out) {
    const uint8_t *ql = x->ql, *qh = x->qh;
    for (int g = 0; g < 2; g++, ql += 64, qh += 32, out += 128) {
        for (int l = 0; l < 32; l++) {
            out[l] = (int8_t)(((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32);
            out[l + 32] = (int8_t)(((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32);
            out[l + 64] = (int8_t)(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            out[l + 96] = (int8_t)(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void specd_q6_k_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q6_k *x = src;
    int8_t q[SPECD_QK_K];
    for (int64_t b = 0; b < n / SPECD_QK_K; b++, dst += SPECD_QK_K) {
        const float d = specd_fp16_to_fp32(x[b].d);
        q6_k_unpack(&x[b], q);
        /* the scale of element e is scales[e / 16]; ggml's order: (d * scale) * q */
        for (int e = 0; e < SPECD_QK_K; e++)
            dst[e] = d * (float)x[b].scales[e / 16] * (float)q[e];
    }
}

void specd_q6_k_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q6_k *x = vx;
    const specd_block_q8_k *y = vy;
    float sums[8] = {0};
    int8_t q[SPECD_QK_K];
    for (int64_t b = 0; b < n / SPECD_QK_K; b++) {
        q6_k_unpack(&x[b], q);
        int32_t lane[8] = {0};
        for (int e = 0; e < SPECD_QK_K; e++)
            lane[e % 8] += x[b].scales[e / 16] * (y[b].qs[e] * q[e]);
        const float d = specd_fp16_to_fp32(x[b].d) * y[b].d;
        for (int l = 0; l < 8; l++)
            sums[l] += d * (float)lane[l];
    }
    float sum = 0.0f;
    for (int l = 0; l < 8; l++)
        sum += sums[l];
    *s = sum;
}

/* --- Q8_K ---------------------------------------------------------------------------------- */
void specd_q8_k_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q8_k *x = src;
    for (int64_t b = 0; b < n / SPECD_QK_K; b++, dst += SPECD_QK_K)
        for (int e = 0; e < SPECD_QK_K; e++)
            dst[e] = x[b].d * (float)x[b].qs[e];
}

/* Round half to even for |v| < 2^22 by letting the float adder round, as ggml's nearest_int does
 * (NaN gives an arbitrary but defined value). */
static int nearest_int(float v) {
    const float r = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &r, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

void specd_q8_k_from_float(const float *src, void *dst, int64_t n) {
    specd_block_q8_k *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK_K; b++, src += SPECD_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int e = 0; e < SPECD_QK_K; e++) {
            const float a = fabsf(src[e]);
            if (a > amax) {
                amax = a;
                max = src[e];
            }
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        /* -127/max keeps the most negative quant at -127 (ggml does the same) */
        const float iscale = -127.0f / max;
        for (int e = 0; e < SPECD_QK_K; e++) {
            int v = nearest_int(iscale * src[e]);
            if (v > 127) v = 127;
            if (v < -128) v = -128;
            y[b].qs[e] = (int8_t)v;
        }
        for (int g = 0; g < SPECD_QK_K / 16; g++) {
            int sum = 0;
            for (int e = 0; e < 16; e++)
                sum += y[b].qs[g * 16 + e];
            y[b].bsums[g] = (int16_t)sum;
        }
        y[b].d = 1.0f / iscale;
    }
}
