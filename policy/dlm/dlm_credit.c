/* Credit decoding, dInfer paper 001 App. B.2 eqs. (1)-(2): see dlm_credit.h. */
#include "policy/dlm/dlm_credit.h"

#include "common/status_internal.h"

#include <math.h>
#include <string.h>

specd_dlm_credit_params specd_dlm_credit_default_params(void) {
    return (specd_dlm_credit_params){.alpha = 1.0f, .beta = 0.7f, .gamma = 0.5f};
}

specd_status specd_dlm_credit_init(specd_dlm_credit *c, specd_dlm_credit_params params,
                                   specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "credit: no state");
    /* the paper's domains: beta, gamma in (0, 1), alpha > 0 */
    if (!(params.alpha > 0.0f && isfinite(params.alpha)) ||
        !(params.beta > 0.0f && params.beta < 1.0f) ||
        !(params.gamma > 0.0f && params.gamma < 1.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "credit: alpha %g must be > 0, beta %g and gamma %g in (0, 1)",
                          (double)params.alpha, (double)params.beta, (double)params.gamma);
    memset(c, 0, sizeof *c);
    c->params = params;
    for (int32_t s = 0; s < SPECD_DLM_CREDIT_SLOTS; s++)
        c->slot[s].lpos = -1;
    return SPECD_OK;
}

static specd_dlm_credit_slot *find(const specd_dlm_credit *c, int64_t lpos) {
    for (int32_t s = 0; s < SPECD_DLM_CREDIT_SLOTS; s++)
        if (c->slot[s].lpos == lpos) return (specd_dlm_credit_slot *)&c->slot[s];
    return NULL;
}

double specd_dlm_credit_get(const specd_dlm_credit *c, int64_t lpos, int32_t token) {
    const specd_dlm_credit_slot *sl = (c && lpos >= 0) ? find(c, lpos) : NULL;
    if (!sl) return 0.0;
    for (int32_t k = 0; k < sl->n; k++)
        if (sl->token[k] == token) return sl->credit[k];
    return 0.0;
}

void specd_dlm_credit_forget(specd_dlm_credit *c, int64_t lpos) {
    specd_dlm_credit_slot *sl = (c && lpos >= 0) ? find(c, lpos) : NULL;
    if (sl) {
        memset(sl, 0, sizeof *sl);
        sl->lpos = -1;
    }
}

specd_status specd_dlm_credit_update(specd_dlm_credit *c, int64_t lpos, const float *logits,
                                     int32_t n_vocab, specd_dlm_pos *fused, specd_error *err) {
    if (!c || !fused || lpos < 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "credit: bad state, output or position %lld",
                          (long long)lpos);
    specd_dlm_pos raw;
    SPECD_TRY(specd_dlm_pos_from_logits(logits, n_vocab, &raw, err));
    specd_dlm_credit_slot *sl = find(c, lpos);
    if (!sl) {
        sl = find(c, -1);
        if (!sl)
            return specd_fail(err, SPECD_E_STATE, "credit: %d positions already tracked",
                              SPECD_DLM_CREDIT_SLOTS);
        sl->lpos = lpos;
        sl->n = 0;
    }
    const specd_dlm_credit_params *pr = &c->params;

    /* eq. (1): every held credit is discounted by beta; the argmax v* of p gains p(v*)^gamma */
    int32_t at = -1;
    for (int32_t k = 0; k < sl->n; k++) {
        sl->credit[k] *= pr->beta;
        if (sl->token[k] == raw.token) at = k;
    }
    if (at < 0) {
        if (sl->n < SPECD_DLM_CREDIT_TOKENS) {
            at = sl->n++;
        } else { /* full: drop the smallest credit, the smallest eq. 2 boost */
            at = 0;
            for (int32_t k = 1; k < sl->n; k++)
                if (sl->credit[k] < sl->credit[at]) at = k;
        }
        sl->token[at] = raw.token;
        sl->credit[at] = 0.0;
    }
    sl->credit[at] += pow((double)raw.p, (double)pr->gamma);

    /* eq. (2): f~_v = f_v + alpha log(1 + C_v); only held tokens have C_v != 0, so softmax(f~)
     * is softmax(f) with those terms corrected: Z~ = Z + sum_held e^{f_v} ((1 + C_v)^alpha - 1). */
    double m = -INFINITY;
    for (int32_t v = 0; v < n_vocab; v++)
        if (logits[v] > m) m = logits[v];
    double boost[SPECD_DLM_CREDIT_TOKENS];
    int32_t top = raw.token;
    double top_f = m; /* f~ at top; raw top has f = m plus its own boost below */
    for (int32_t k = 0; k < sl->n; k++) {
        boost[k] = (double)pr->alpha * log1p(sl->credit[k]);
        const double ft = (double)logits[sl->token[k]] + boost[k];
        if (ft > top_f || (ft == top_f && sl->token[k] < top)) {
            top_f = ft;
            top = sl->token[k];
        }
    }
    /* sums relative to the new max top_f: z = sum e^{f~ - M}, s = sum e^{f~ - M} (f~ - M) */
    const double mm = top_f;
    double z = 0.0, s = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) {
        const double d = (double)logits[v] - mm, e = exp(d);
        z += e;
        if (e > 0.0) s += e * d; /* -inf * 0 would be NaN */
    }
    for (int32_t k = 0; k < sl->n; k++) {
        const double d0 = (double)logits[sl->token[k]] - mm, d1 = d0 + boost[k];
        const double e0 = exp(d0), e1 = exp(d1);
        if (e0 == 0.0) continue; /* a token now at -inf stays at probability 0 */
        z += e1 - e0;
        s += e1 * d1 - e0 * d0;
    }
    double h = log(z) - s / z;
    fused->token = top;
    fused->p = (float)(1.0 / z); /* e^{f~_top - M} = 1 */
    fused->entropy = (float)(h < 0.0 ? 0.0 : h);
    return SPECD_OK;
}
