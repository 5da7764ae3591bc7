/* Row operations of the acceptance engine over one logits row (CPU code; the model's GPU kernels
 * are kernels/cuda), vectorised (verifier/accept/simd.h) and compiled twice: baseline x86-64 and
 * AVX2, picked per call by CPU feature. Each computes exactly the bits of the scalar definitions
 * in include/specd/sampling.h and verifier/accept/xform.h. */
#ifndef SPECD_VERIFIER_ACCEPT_ROW_OPS_H
#define SPECD_VERIFIER_ACCEPT_ROW_OPS_H

#include <stdint.h>

/* NaN/Inf flag (nonzero = bad), block maxima bmax[], row max and min. */
int specd_check_kernel(const float *l, int32_t n, float *bmax, float *gmax, float *gmin);
/* acc[j] += exp(z - zmax) over tokens j, j + 256, ... (z = l / t). */
void specd_sum_kernel(const float *l, int32_t n, float t, float zmax, float *acc);
/* acc[j] += v[j], v[j + 256], ...; nonzero when some v is outside [0, 1]. */
int specd_lanesum_kernel(const float *v, int32_t n, float *acc);
/* Folds the keyed scores z + G of the full block starting at b0 into (*best, *best_i). */
void specd_scores_kernel(const float *l, int32_t b0, float t, const uint32_t kk[2],
                         const uint32_t ctr[4], float *best, int32_t *best_i);
/* w[x] = exp(z - zmax) / z_norm. */
void specd_weights_kernel(const float *l, int32_t n, float t, float zmax, float z, float *w);
/* Block sums of the inverse-CDF draw. */
void specd_bsum_kernel(const float *w, int32_t n, float *bsum);
/* w = exp(z - zmax) and its block sums in one pass. */
void specd_weights_bsum_kernel(const float *l, int32_t n, float t, float zmax, float *w,
                               float *bsum);

#endif
