#include "kernels/cpu/ops.h"

#include <math.h>

/* theta advances by repeated multiplication in float, as ggml_rope_cache_init does, so our angles
 * round exactly as llama.cpp's. Which products are fused into multiply-adds follows what the
 * compiler made of ggml's rope in llama.cpp's x86 build (its C++ is contracted,
 * -ffp-contract=fast), checked bit for bit against its tensors:
 *   x0' = fma(x0, cos, -(x1 sin)),   x1' = fma(x0, sin, x1 cos). */
void specd_rope_angles(int32_t pos, int32_t n_rot, float freq_base, float *cos_out,
                       float *sin_out) {
    const float theta_scale = powf(freq_base, -2.0f / (float)n_rot);
    float theta = (float)pos;
    for (int32_t i = 0; i < n_rot / 2; i++) {
        cos_out[i] = cosf(theta);
        sin_out[i] = sinf(theta);
        theta *= theta_scale;
    }
}

void specd_rope_f32(float *x, int32_t n_heads, int32_t head_dim, int32_t n_rot, const float *cs,
                    const float *sn, int neox) {
    const int32_t n_pairs = n_rot / 2;
    for (int32_t h = 0; h < n_heads; h++) {
        float *p = x + (size_t)h * (size_t)head_dim;
        for (int32_t i = 0; i < n_pairs; i++) {
            const int32_t a = neox ? i : 2 * i;
            const int32_t b = neox ? i + n_pairs : 2 * i + 1;
            const float x0 = p[a], x1 = p[b];
            p[a] = fmaf(x0, cs[i], -(x1 * sn[i]));
            p[b] = fmaf(x0, sn[i], x1 * cs[i]);
        }
    }
}
