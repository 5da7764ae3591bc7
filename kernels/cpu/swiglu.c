#include "kernels/cpu/ops.h"

#include <math.h>

void specd_swiglu_f32(const float *g, const float *u, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        const float s = g[i] / (1.0f + expf(-g[i]));
        y[i] = s * u[i];
    }
}
