/* F32, F16 and BF16 rows. Dot products accumulate in double, in element order, as ggml's
 * reference does, so the scalar result is the most accurate of the tables. */
#include "kernels/cpu/dtype_internal.h"
#include "kernels/cpu/fp16.h"

#include <string.h>

void specd_f32_to_float(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void specd_f32_from_float(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void specd_f32_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const float *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * y[i]);
    *s = (float)sum;
}

void specd_f16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = specd_fp16_to_fp32(x[i]);
}

void specd_f16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = specd_fp32_to_fp16(src[i]);
}

void specd_f16_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(specd_fp16_to_fp32(x[i]) * specd_fp16_to_fp32(y[i]));
    *s = (float)sum;
}

void specd_bf16_to_float(const void *src, float *dst, int64_t n) {
    const uint16_t *x = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = specd_bf16_to_fp32(x[i]);
}

void specd_bf16_from_float(const float *src, void *dst, int64_t n) {
    uint16_t *y = dst;
    for (int64_t i = 0; i < n; i++)
        y[i] = specd_fp32_to_bf16(src[i]);
}

void specd_bf16_vec_dot(int64_t n, float *s, const void *vx, const void *vy) {
    const uint16_t *x = vx, *y = vy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)(specd_bf16_to_fp32(x[i]) * specd_bf16_to_fp32(y[i]));
    *s = (float)sum;
}
