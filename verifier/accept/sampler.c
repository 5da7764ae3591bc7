/* The public keyed sampler: one transform plus per-row scratch. */
#include "specd/sampling.h"

#include <string.h>

#include "common/alloc.h"
#include "common/fastmath.h"
#include "common/philox.h"
#include "common/status_internal.h"
#include "verifier/accept/xform.h"

struct specd_sampler {
    specd_xform xf;
    float *bmax; /* block maxima of the current row */
};

specd_sampling_params specd_sampling_default_params(void) {
    specd_sampling_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0f;
    p.top_p = 1.0f;
    return p;
}

specd_status specd_sampler_create(const specd_sampling_params *params, int32_t max_vocab,
                                  specd_sampler **out, specd_error *err) {
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "out is NULL");
    specd_sampler *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "sampler");
    specd_status st = specd_xform_init(&s->xf, params, max_vocab, err);
    if (st != SPECD_OK) {
        specd_free(s);
        return st;
    }
    s->bmax = specd_alloc_array((size_t)specd_n_blocks(max_vocab), sizeof *s->bmax);
    if (!s->bmax) {
        specd_sampler_destroy(s);
        return specd_fail(err, SPECD_E_NOMEM, "sampler scratch");
    }
    *out = s;
    return SPECD_OK;
}

void specd_sampler_destroy(specd_sampler *s) {
    if (!s) return;
    specd_xform_release(&s->xf);
    specd_free(s->bmax);
    specd_free(s);
}

static specd_status prepare(specd_sampler *s, const float *logits, int32_t n_vocab,
                            specd_xrow *r, specd_error *err) {
    if (!s || !logits) return specd_fail(err, SPECD_E_INVALID_ARG, "sampler or logits is NULL");
    SPECD_TRY(specd_xform_check_vocab(&s->xf, n_vocab, err));
    float mx, mn;
    SPECD_TRY(specd_row_check(logits, n_vocab, "logits", 0, s->bmax, &mx, &mn, err));
    return specd_xform_prepare(&s->xf, logits, n_vocab, s->bmax, mx, mn, "logits", 0, r, err);
}

static specd_status sample(specd_sampler *s, const float *logits, int32_t n_vocab,
                           specd_sample_key key, specd_rng_purpose purpose, int32_t *token,
                           specd_error *err) {
    if (!token) return specd_fail(err, SPECD_E_INVALID_ARG, "token is NULL");
    specd_xrow r;
    SPECD_TRY(prepare(s, logits, n_vocab, &r, err));
    *token = specd_xrow_keyed(&s->xf, &r, key, purpose);
    return SPECD_OK;
}

specd_status specd_sampler_sample(specd_sampler *s, const float *logits, int32_t n_vocab,
                                  specd_sample_key key, int32_t *token, specd_error *err) {
    return sample(s, logits, n_vocab, key, SPECD_RNG_SAMPLE, token, err);
}

specd_status specd_sampler_sample_draft(specd_sampler *s, const float *logits, int32_t n_vocab,
                                        specd_sample_key key, int32_t *token, specd_error *err) {
    return sample(s, logits, n_vocab, key, SPECD_RNG_DRAFT, token, err);
}

specd_status specd_sampler_probs(specd_sampler *s, const float *logits, int32_t n_vocab,
                                 float *probs, specd_error *err) {
    if (!probs) return specd_fail(err, SPECD_E_INVALID_ARG, "probs is NULL");
    specd_xrow r;
    SPECD_TRY(prepare(s, logits, n_vocab, &r, err));
    specd_xrow_probs(&s->xf, &r, probs);
    return SPECD_OK;
}

static uint32_t word(specd_sample_key key, specd_rng_purpose purpose, uint32_t index) {
    const uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    const uint32_t ctr[4] = {index >> 2, key.position, key.sequence, (uint32_t)purpose};
    uint32_t w[4];
    specd_philox4x32_10(ctr, k, w);
    return w[index & 3];
}

float specd_sampling_gumbel(specd_sample_key key, specd_rng_purpose purpose, int32_t token) {
    return specd_gumbel(specd_u32_to_uniform(word(key, purpose, (uint32_t)token)));
}

float specd_sampling_uniform(specd_sample_key key, specd_rng_purpose purpose, uint32_t index) {
    const uint32_t k[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    const uint32_t ctr[4] = {index, key.position, key.sequence, (uint32_t)purpose};
    uint32_t w[4];
    specd_philox4x32_10(ctr, k, w);
    return specd_u32_to_uniform(w[0]);
}
