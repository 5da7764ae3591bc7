/* The sampling transform (include/specd/sampling.h describes it) on one logits row: validation,
 * filters, the fixed-order softmax sum, probabilities and the keyed Gumbel-max sample. Shared by
 * the public sampler and the acceptance engine so both compute the same bits. */
#ifndef SPECD_VERIFIER_ACCEPT_XFORM_H
#define SPECD_VERIFIER_ACCEPT_XFORM_H

#include <stdint.h>

#include "specd/sampling.h"

/* Lanes of the fixed summation order (one 256-thread CUDA block). */
#define SPECD_SUM_LANES 256

typedef struct specd_zi {
    float z;
    int32_t i;
} specd_zi;

/* Quick-reject table for keyed sampling: gtab[j] is the smallest 23-bit uniform index m whose
 * Gumbel value G(m) reaches SPECD_GTAB_LO + j / SPECD_GTAB_STEPS. G is non-decreasing in m
 * (test_accept_rng checks all 2^23 values), so m < gtab[j] proves G(m) below that level and the
 * token is skipped without computing two logarithms. Exactness does not depend on the table. */
#define SPECD_GTAB_LO (-3.0f)
#define SPECD_GTAB_STEPS 16
#define SPECD_GTAB_N 320

/* Validated params plus scratch for rows of up to max_vocab tokens. */
typedef struct specd_xform {
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    specd_logit_bias *bias; /* owned copy, sorted by token */
    size_t n_bias;
    int32_t max_vocab;
    float *biased;  /* max_vocab: the row with bias applied */
    specd_zi *pairs; /* max_vocab: top-k heap / top-p sort */
    float *bbmax;    /* block maxima of biased */
    uint32_t gtab[SPECD_GTAB_N];
} specd_xform;

/* One prepared row. l points at the caller's row or at xf->biased. */
typedef struct specd_xrow {
    const float *l;
    const float *bmax; /* block maxima of l */
    int32_t n;
    float lmax;     /* max of l (after bias) */
    int32_t imax;   /* lowest index holding lmax */
    float zmax;     /* lmax / T (T > 0) */
    int greedy;     /* T == 0: the distribution is one-hot at imax */
    int thresh;     /* top-k/top-p cut active: kept iff (z, -x) >= (thr_z, -thr_i) */
    float thr_z;
    int32_t thr_i;
    int filtered;   /* thresh or min-p active */
    float sum;      /* Z, valid when has_sum */
    int has_sum;
} specd_xrow;

specd_status specd_xform_init(specd_xform *xf, const specd_sampling_params *p, int32_t max_vocab,
                              specd_error *err);
void specd_xform_release(specd_xform *xf);

/* Bias tokens must lie inside a row of n_vocab tokens. */
specd_status specd_xform_check_vocab(const specd_xform *xf, int32_t n_vocab, specd_error *err);

/* Tokens per block of the block maxima that let keyed sampling skip blocks that cannot win. */
#define SPECD_BLOCK 64
static inline int32_t specd_n_blocks(int32_t n) { return (n + SPECD_BLOCK - 1) / SPECD_BLOCK; }

/* NaN/+inf check of one raw row, filling bmax[specd_n_blocks(n)] with block maxima and *max,
 * *min with the row's extremes. -inf (and anything <= -FLT_MAX) is a mask, which
 * specd_xform_prepare bans; a row masked throughout fails here. what/row name the row. */
specd_status specd_row_check(const float *l, int32_t n, const char *what, int32_t row,
                             float *bmax, float *max, float *min, specd_error *err);

/* Prepares a checked row. bmax is the row's block maxima from specd_row_check; with a logit bias
 * the biased copy gets its own (in xf scratch). Fails with SPECD_E_NUMERIC when nothing survives
 * (every token banned) or logits / T overflows. */
specd_status specd_xform_prepare(specd_xform *xf, const float *logits, int32_t n,
                                 const float *bmax, float raw_max, float raw_min, const char *what,
                                 int32_t row, specd_xrow *r, specd_error *err);

/* e[x] (0 outside the kept set; greedy rows: 1 at imax, else 0). */
float specd_xrow_e(const specd_xform *xf, const specd_xrow *r, int32_t x);
/* Z, computed once in the fixed lane order. */
float specd_xrow_sum(const specd_xform *xf, specd_xrow *r);
/* P as floats, e[x] / Z. */
void specd_xrow_probs(const specd_xform *xf, specd_xrow *r, float *probs);
/* argmax over kept x of z[x] + G(key, purpose, x); greedy rows return imax. */
int32_t specd_xrow_keyed(const specd_xform *xf, const specd_xrow *r, specd_sample_key key,
                         specd_rng_purpose purpose);

/* w[x] = e[x] / z for the whole row (z = 1: the weights themselves). */
void specd_xrow_weights(const specd_xform *xf, const specd_xrow *r, float z, float *w);

/* Inverse-CDF draw from weights w[0..n) >= 0 with a uniform u in (0, 1), in a fixed order a CUDA
 * port reproduces: block sums of 64 tokens (8 lanes, then a 3-level tree), a sequential scan of
 * the block sums to the first one passing u * total, then a sequential scan inside that block
 * (its last positive token if rounding leaves the crossing past its end). bsum: scratch of
 * specd_n_blocks(n) floats. Returns -1 when every weight is 0. */
int32_t specd_cdf_draw(const float *w, int32_t n, float u, float *bsum);
/* The same draw with bsum already filled (specd_xrow_weights_bsum). */
int32_t specd_cdf_draw_summed(const float *w, int32_t n, float u, const float *bsum);
/* w = e of the row and its block sums in one pass (the bonus token's weights). */
void specd_xrow_weights_bsum(const specd_xform *xf, const specd_xrow *r, float *w, float *bsum);

/* Sum of v[0..n) in the fixed lane order (v[x] >= 0). */
float specd_lane_sum(const float *v, int32_t n);
/* The same sum of a probability row; returns nonzero when some entry is not in [0, 1]. */
int specd_prob_row_sum(const float *v, int32_t n, float *sum);

#endif
