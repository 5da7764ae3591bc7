/* dInfer's commit rules (paper 001, App. B) and the per-position summaries they read. */
#include "policy/dlm/dlm_commit.h"

#include "common/status_internal.h"

#include <math.h>
#include <string.h>

specd_status specd_dlm_pos_from_logits(const float *logits, int32_t n_vocab, specd_dlm_pos *out,
                                       specd_error *err) {
    if (!logits || !out || n_vocab < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "dlm: logits row missing or n_vocab %d",
                          (int)n_vocab);
    int32_t top = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        /* -inf is a token ruled out (probability 0); NaN and +inf have no distribution */
        if (isnan(logits[v]) || logits[v] == INFINITY)
            return specd_fail(err, SPECD_E_NUMERIC, "dlm: logit %d is %g", (int)v,
                              (double)logits[v]);
        if (logits[v] > logits[top]) top = v;
    }
    /* double sums: entropy = log Z - sum p (f - m) loses digits in float near H = 0 */
    const double m = logits[top];
    if (m == -INFINITY)
        return specd_fail(err, SPECD_E_NUMERIC, "dlm: every logit of %d is -inf", (int)n_vocab);
    double z = 0.0, s = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) {
        const double d = (double)logits[v] - m, e = exp(d);
        z += e;
        if (e > 0.0) s += e * d; /* -inf * 0 would be NaN */
    }
    double h = log(z) - s / z;
    if (h < 0.0) h = 0.0; /* rounding when one token has all the mass */
    out->token = top;
    out->p = (float)(1.0 / z);
    out->entropy = (float)h;
    return SPECD_OK;
}

specd_status specd_dlm_pos_from_probs(const float *probs, int32_t n_vocab, specd_dlm_pos *out,
                                      specd_error *err) {
    if (!probs || !out || n_vocab < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "dlm: probability row missing or n_vocab %d",
                          (int)n_vocab);
    int32_t top = 0;
    double sum = 0.0, h = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) {
        const float q = probs[v];
        if (!isfinite(q) || q < 0.0f)
            return specd_fail(err, SPECD_E_NUMERIC, "dlm: probability %d is %g", (int)v, (double)q);
        if (q > probs[top]) top = v;
        sum += q;
        if (q > 0.0f) h -= (double)q * log((double)q);
    }
    if (fabs(sum - 1.0) > 1e-3)
        return specd_fail(err, SPECD_E_NUMERIC, "dlm: probabilities sum to %g, not 1", sum);
    out->token = top;
    out->p = probs[top];
    out->entropy = (float)(h < 0.0 ? 0.0 : h);
    return SPECD_OK;
}

/* Validates the window and finds its most confident masked slot (leftmost on ties). */
static specd_status check_window(const specd_dlm_pos *pos, const uint8_t *masked, int32_t n,
                                 int32_t *best_out, specd_error *err) {
    if (!pos || !masked || n < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "dlm: empty window (n %d)", (int)n);
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++) {
        if (!masked[i]) continue;
        if (!(pos[i].p >= 0.0f && pos[i].p <= 1.0f)) /* also catches NaN */
            return specd_fail(err, SPECD_E_NUMERIC, "dlm: slot %d confidence %g is not in [0, 1]",
                              (int)i, (double)pos[i].p);
        if (best < 0 || pos[i].p > pos[best].p) best = i;
    }
    if (best < 0) return specd_fail(err, SPECD_E_STATE, "dlm: no masked slot among %d", (int)n);
    *best_out = best;
    return SPECD_OK;
}

specd_status specd_dlm_commit_threshold(const specd_dlm_pos *pos, const uint8_t *masked, int32_t n,
                                        float tau, uint8_t *commit, int32_t *n_commit,
                                        specd_error *err) {
    if (!commit || !n_commit || isnan(tau))
        return specd_fail(err, SPECD_E_INVALID_ARG, "dlm threshold: missing output or NaN tau");
    int32_t best = -1;
    SPECD_TRY(check_window(pos, masked, n, &best, err));
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        commit[i] = masked[i] && pos[i].p >= tau;
        k += commit[i];
    }
    if (k == 0) { /* at least one per iteration */
        commit[best] = 1;
        k = 1;
    }
    *n_commit = k;
    return SPECD_OK;
}

specd_status specd_dlm_commit_hierarchical(const specd_dlm_pos *pos, const uint8_t *masked,
                                           int32_t n, float tau_high, float tau_low,
                                           uint8_t *commit, int32_t *n_commit, specd_error *err) {
    if (!commit || !n_commit || isnan(tau_high) || isnan(tau_low))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "dlm hierarchical: missing output or NaN threshold");
    int32_t best = -1;
    SPECD_TRY(check_window(pos, masked, n, &best, err));
    memset(commit, 0, (size_t)n);
    for (int32_t i = 0; i < n;) {
        if (!masked[i]) {
            i++;
            continue;
        }
        /* one region: the run of masked slots [i, j) */
        int32_t j = i, top = i;
        for (; j < n && masked[j]; j++) {
            if (pos[j].p > pos[top].p) top = j;
            if (pos[j].p > tau_high) commit[j] = 1;
        }
        if (pos[top].p > tau_low) commit[top] = 1;
        i = j;
    }
    commit[best] = 1; /* the window's top slot, so an iteration never commits nothing */
    int32_t k = 0;
    for (int32_t i = 0; i < n; i++)
        k += commit[i];
    *n_commit = k;
    return SPECD_OK;
}

int32_t specd_dlm_eos_stop(const int32_t *tokens, const uint8_t *decided, int32_t n,
                           const int32_t *eos, int32_t n_eos) {
    if (!tokens || !decided || !eos) return -1;
    for (int32_t i = 0; i < n; i++) {
        if (!decided[i]) return -1;
        for (int32_t e = 0; e < n_eos; e++)
            if (tokens[i] == eos[e]) return i;
    }
    return -1;
}
