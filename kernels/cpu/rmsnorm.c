#include "kernels/cpu/ops.h"

#include <math.h>

void specd_rmsnorm_f32(const float *x, const float *w, float *y, int64_t n, float eps) {
    double sum = 0.0; /* ggml_float: keeps the mean exact enough that eps dominates rounding */
    for (int64_t i = 0; i < n; i++)
        sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / (double)n);
    const float scale = 1.0f / sqrtf(mean + eps);
    /* two roundings, as ggml's rms_norm followed by mul */
    for (int64_t i = 0; i < n; i++) {
        float t = x[i] * scale;
        y[i] = w ? t * w[i] : t;
    }
}
