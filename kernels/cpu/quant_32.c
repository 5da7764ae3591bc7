/* Q4_0, Q4_1, Q8_0 and Q8_1: blocks of 32 with fp16 scales. Scalar reference kernels.
 *
 * Dot products follow ggml's reference order exactly (an exact integer sum per block, then one
 * float multiply-add per block, accumulated in block order) so logits track llama.cpp's. The
 * AVX2 kernels compute the same integer sums and the same float sequence, so they agree with these
 * bit for bit.
 *
 * Activation quantization (Q8_0, Q8_1) follows what llama.cpp runs on x86: d = amax/127, the
 * multiplier 127/amax, round half to even. */
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant_blocks.h"

#include <math.h>

/* (int)v clamped to [lo, hi]; NaN gives lo. Avoids the undefined float->int conversion of an
 * out-of-range value. */
static int to_int_clamped(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v > (float)hi) return hi;
    return (int)v;
}

/* --- Q4_0 ---------------------------------------------------------------------------------- */
void specd_q4_0_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q4_0 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK) {
        const float d = specd_fp16_to_fp32(x[b].d);
        for (int j = 0; j < SPECD_QK / 2; j++) {
            dst[j] = (float)((x[b].qs[j] & 0xf) - 8) * d;
            dst[j + SPECD_QK / 2] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

void specd_q4_0_from_float(const float *src, void *dst, int64_t n) {
    specd_block_q4_0 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < SPECD_QK; j++) {
            if (amax < fabsf(src[j])) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        const float d = max / -8;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = specd_fp32_to_fp16(d);
        for (int j = 0; j < SPECD_QK / 2; j++) {
            int q0 = to_int_clamped(src[j] * id + 8.5f, 0, 15);
            int q1 = to_int_clamped(src[j + SPECD_QK / 2] * id + 8.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

/* llama.cpp's x86 order for dot products of 32-element blocks: eight float lanes, lane i
 * holding elements 4i..4i+3 of every block as one exact integer; per block
 * lane[i] = fma(d_x * d_y, (float)int_i, lane[i]); at the end the lanes are summed as
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). The AVX2 kernels (dtype_avx2.c, matmul.c) do the same
 * operations in registers, so every path gives llama.cpp's bits. */
static float lanes_sum(const float l[8]) {
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

/* Element e of a Q4 block: low nibbles hold elements 0..15, high nibbles 16..31. */
static int nibble(const uint8_t *qs, int e) {
    return e < SPECD_QK / 2 ? qs[e] & 0xf : qs[e - SPECD_QK / 2] >> 4;
}

void specd_q4_0_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_0 *x = vx;
    const specd_block_q8_0 *y = vy;
    float lane[8] = {0};
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        for (int i = 0; i < 8; i++) {
            int sumi = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++)
                sumi += (nibble(x[b].qs, e) - 8) * y[b].qs[e];
            lane[i] = fmaf(d, (float)sumi, lane[i]);
        }
    }
    *s = lanes_sum(lane);
}

/* --- Q4_1 ---------------------------------------------------------------------------------- */
void specd_q4_1_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q4_1 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK) {
        const float d = specd_fp16_to_fp32(x[b].d);
        const float m = specd_fp16_to_fp32(x[b].m);
        for (int j = 0; j < SPECD_QK / 2; j++) {
            dst[j] = (float)(x[b].qs[j] & 0xf) * d + m;
            dst[j + SPECD_QK / 2] = (float)(x[b].qs[j] >> 4) * d + m;
        }
    }
}

void specd_q4_1_from_float(const float *src, void *dst, int64_t n) {
    specd_block_q4_1 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK) {
        float min = 3.402823466e+38f, max = -3.402823466e+38f;
        for (int j = 0; j < SPECD_QK; j++) {
            if (src[j] < min) min = src[j];
            if (src[j] > max) max = src[j];
        }
        const float d = (max - min) / 15;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = specd_fp32_to_fp16(d);
        y[b].m = specd_fp32_to_fp16(min);
        for (int j = 0; j < SPECD_QK / 2; j++) {
            int q0 = to_int_clamped((src[j] - min) * id + 0.5f, 0, 15);
            int q1 = to_int_clamped((src[j + SPECD_QK / 2] - min) * id + 0.5f, 0, 15);
            y[b].qs[j] = (uint8_t)(q0 | (q1 << 4));
        }
    }
}

void specd_q4_1_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q4_1 *x = vx;
    const specd_block_q8_1 *y = vy;
    float lane[8] = {0}, mins = 0.0f; /* the min terms go to one scalar, as in llama.cpp */
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        mins = fmaf(specd_fp16_to_fp32(x[b].m), specd_fp16_to_fp32(y[b].s), mins);
        for (int i = 0; i < 8; i++) {
            int sumi = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++)
                sumi += nibble(x[b].qs, e) * y[b].qs[e];
            lane[i] = fmaf(d, (float)sumi, lane[i]);
        }
    }
    *s = lanes_sum(lane) + mins;
}

/* --- Q8_0 ---------------------------------------------------------------------------------- */
void specd_q8_0_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q8_0 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK) {
        const float d = specd_fp16_to_fp32(x[b].d);
        for (int j = 0; j < SPECD_QK; j++)
            dst[j] = (float)x[b].qs[j] * d;
    }
}

float specd_q8_block(const float *src, int8_t *qs, int32_t *sum) {
    float amax = 0.0f;
    for (int j = 0; j < SPECD_QK; j++) {
        const float a = fabsf(src[j]);
        if (a > amax) amax = a;
    }
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int32_t s = 0;
    for (int j = 0; j < SPECD_QK; j++) {
        qs[j] = (int8_t)to_int_clamped(rintf(src[j] * id), -128, 127);
        s += qs[j];
    }
    if (sum) *sum = s;
    return amax;
}

/* Quantizes one block of 32 to int8 with x86 llama.cpp's rounding; returns the fp32 scale. */
static float quantize_block_8(const float *src, int8_t *qs) {
    return specd_q8_block(src, qs, NULL) / 127.0f;
}

void specd_q8_0_from_float(const float *src, void *dst, int64_t n) {
    specd_block_q8_0 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK)
        y[b].d = specd_fp32_to_fp16(quantize_block_8(src, y[b].qs));
}

void specd_q8_0_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q8_0 *x = vx;
    const specd_block_q8_0 *y = vy;
    float lane[8] = {0};
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        const float d = specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d);
        for (int i = 0; i < 8; i++) {
            int sumi = 0;
            for (int e = 4 * i; e < 4 * i + 4; e++)
                sumi += x[b].qs[e] * y[b].qs[e];
            lane[i] = fmaf(d, (float)sumi, lane[i]);
        }
    }
    *s = lanes_sum(lane);
}

/* --- Q8_1 (activations for Q4_1) ----------------------------------------------------------- */
void specd_q8_1_to_float(const void *src, float *dst, int64_t n) {
    const specd_block_q8_1 *x = src;
    for (int64_t b = 0; b < n / SPECD_QK; b++, dst += SPECD_QK) {
        const float d = specd_fp16_to_fp32(x[b].d);
        for (int j = 0; j < SPECD_QK; j++)
            dst[j] = (float)x[b].qs[j] * d;
    }
}

void specd_q8_1_from_float(const float *src, void *dst, int64_t n) {
    specd_block_q8_1 *y = dst;
    for (int64_t b = 0; b < n / SPECD_QK; b++, src += SPECD_QK) {
        const float d = quantize_block_8(src, y[b].qs);
        int sum = 0;
        for (int j = 0; j < SPECD_QK; j++)
            sum += y[b].qs[j];
        y[b].d = specd_fp32_to_fp16(d);
        y[b].s = specd_fp32_to_fp16(d * (float)sum);
    }
}

void specd_q8_1_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const specd_block_q8_1 *x = vx;
    const specd_block_q8_1 *y = vy;
    float sum = 0.0f;
    for (int64_t b = 0; b < n / SPECD_QK; b++) {
        int sumi = 0;
        for (int j = 0; j < SPECD_QK; j++)
            sumi += x[b].qs[j] * y[b].qs[j];
        sum += (float)sumi * (specd_fp16_to_fp32(x[b].d) * specd_fp16_to_fp32(y[b].d));
    }
    *s = sum;
}
