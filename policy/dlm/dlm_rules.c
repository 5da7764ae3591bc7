/* Fill-rule parsing and dispatch shared by the DLM policies (see dlm_rules.h). */
#include "policy/dlm/dlm_rules.h"

#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/dlm/wedlm_select.h"

#include <math.h>
#include <string.h>

specd_status specd_dlm_rule_parse(const char *policy, specd_dlm_rule_kind kind, float tau,
                                  float tau_low, float lambda, specd_dlm_rule *out,
                                  specd_error *err) {
    specd_dlm_rule r = {.kind = kind, .tau_low = 0.62f, .lambda = 0.1f};
    r.tau = kind == SPECD_DLM_ENTROPY ? 0.3f : kind == SPECD_DLM_HIER ? 0.92f : 0.8f;
    /* the table bounds tau by entropy's range; the other rules' thresholds are probabilities */
    if (!isnan(tau) && kind != SPECD_DLM_ENTROPY && tau > 1.0f)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy %s: option tau=%g (want a number in [0, 1] for this select)",
                          policy, (double)tau);
    if (!isnan(tau)) r.tau = tau;
    if (!isnan(tau_low)) r.tau_low = tau_low;
    if (!isnan(lambda)) r.lambda = lambda;
    *out = r;
    return SPECD_OK;
}

specd_status specd_dlm_rule_apply(const specd_dlm_rule *r, const specd_dlm_pos *pos,
                                  const uint8_t *elig, int32_t n, int force, uint8_t *fill,
                                  int32_t *n_fill, specd_error *err) {
    int32_t k = 0;
    switch (r->kind) {
    case SPECD_DLM_ENTROPY:
        SPECD_TRY(specd_wedlm_select(pos, elig, n, r->tau, r->lambda, fill, &k, err));
        break;
    case SPECD_DLM_HIER:
        SPECD_TRY(specd_dlm_commit_hierarchical(pos, elig, n, r->tau, r->tau_low, fill, &k, err));
        break;
    default: SPECD_TRY(specd_dlm_commit_threshold(pos, elig, n, r->tau, fill, &k, err));
    }
    if (!force && k == 1) {
        int32_t i = 0, left = 0;
        while (!fill[i])
            i++;
        while (!elig[left])
            left++;
        const double h = (double)pos[i].entropy + (double)r->lambda * (double)(i - left);
        const int passed = r->kind == SPECD_DLM_ENTROPY ? h < (double)r->tau
                           : r->kind == SPECD_DLM_HIER  ? pos[i].p > r->tau_low || pos[i].p > r->tau
                                                        : pos[i].p >= r->tau;
        if (!passed) fill[i] = 0, k = 0;
    }
    *n_fill = k;
    return SPECD_OK;
}

specd_status specd_dlm_masked_confidences(const char *policy, int64_t first, const float *rows,
                                          int32_t n_vocab, const int32_t *token, int32_t n,
                                          specd_dlm_pos *pos, uint8_t *elig, specd_error *err) {
    for (int32_t i = 0; i < n; i++) {
        elig[i] = 0;
        pos[i] = (specd_dlm_pos){0};
        if (token[i] >= 0) continue;
        specd_status st = specd_dlm_pos_from_logits(rows + (size_t)i * (size_t)n_vocab, n_vocab,
                                                    &pos[i], err);
        if (st == SPECD_E_NUMERIC) {
            specd_log(SPECD_LOG_WARN, "policy %s: slot %lld: %s; left masked", policy,
                      (long long)(first + i), err ? err->message : "non-finite logits");
            continue;
        }
        SPECD_TRY(st);
        elig[i] = 1;
    }
    return SPECD_OK;
}

int32_t specd_dlm_static_pick(const specd_dlm_pos *pos, const uint8_t *elig, int32_t n) {
    int32_t best = -1;
    for (int32_t i = 0; i < n; i++)
        if (elig[i] && (best < 0 || pos[i].p > pos[best].p)) best = i;
    return best;
}

specd_status specd_dlm_rule_fill(const specd_dlm_rule *r, const specd_dlm_pos *pos,
                                 const uint8_t *elig, int32_t n, int force,
                                 specd_dlm_credit *credit, int64_t first, int32_t *token,
                                 int32_t *n_fill, specd_error *err) {
    uint8_t fill[SPECD_DLM_CREDIT_SLOTS];
    if (n > SPECD_DLM_CREDIT_SLOTS)
        return specd_fail(err, SPECD_E_INVALID_ARG, "dlm: %d slots, at most %d", n,
                          SPECD_DLM_CREDIT_SLOTS);
    SPECD_TRY(specd_dlm_rule_apply(r, pos, elig, n, force, fill, n_fill, err));
    for (int32_t i = 0; i < n; i++)
        if (fill[i]) {
            token[i] = pos[i].token;
            specd_dlm_credit_forget(credit, first + i);
        }
    return SPECD_OK;
}
