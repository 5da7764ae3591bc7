/* Iteration smoothing, dInfer paper 001 App. A.1: see dlm_smooth.h. */
#include "policy/dlm/dlm_smooth.h"

#include "common/status_internal.h"

#include <math.h>
#include <string.h>

float specd_dlm_smooth_alpha(float alpha_init, float alpha_growth, float alpha_max, int32_t t) {
    const float a = alpha_init + alpha_growth * (float)(t < 0 ? 0 : t);
    return a < alpha_max ? a : alpha_max;
}

specd_status specd_dlm_smooth_row(const float *logits, int32_t n_vocab, specd_dlm_emb_row_fn row,
                                  void *row_ctx, const float *e_mask, int32_t n_embd, float alpha,
                                  float *scratch, float *out, int32_t *n_used, specd_error *err) {
    if (!logits || !row || !e_mask || !scratch || !out || n_vocab < 1 || n_embd < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "smooth: missing input or sizes %d x %d",
                          (int)n_vocab, (int)n_embd);
    if (!isfinite(alpha)) return specd_fail(err, SPECD_E_NUMERIC, "smooth: alpha not finite");
    double m = -INFINITY;
    for (int32_t v = 0; v < n_vocab; v++) {
        if (isnan(logits[v]) || logits[v] == INFINITY) /* -inf: probability 0 */
            return specd_fail(err, SPECD_E_NUMERIC, "smooth: logit %d is %g", (int)v,
                              (double)logits[v]);
        if (logits[v] > m) m = logits[v];
    }
    if (m == -INFINITY)
        return specd_fail(err, SPECD_E_NUMERIC, "smooth: every logit of %d is -inf", (int)n_vocab);
    double z = 0.0;
    for (int32_t v = 0; v < n_vocab; v++)
        z += exp((double)logits[v] - m);
    /* p_v < 1e-9 p_top  <=>  f_v - m < log(1e-9); on a flat row that keeps most of the
     * vocabulary (a dequantized embedding row each), so the cut rises by decades until at most
     * SPECD_DLM_SMOOTH_MAX_ROWS tokens pass: the dropped ones each weigh less than the kept */
    double cut = log(1e-9);
    for (;;) {
        int32_t n = 0;
        for (int32_t v = 0; v < n_vocab && n <= SPECD_DLM_SMOOTH_MAX_ROWS; v++)
            n += (double)logits[v] - m >= cut;
        if (n <= SPECD_DLM_SMOOTH_MAX_ROWS) break;
        cut += log(10.0);
    }
    float *r = scratch, *acc = scratch + n_embd;
    memset(acc, 0, (size_t)n_embd * sizeof *acc);
    int32_t used = 0;
    for (int32_t v = 0; v < n_vocab; v++) {
        const double d = (double)logits[v] - m;
        if (d < cut) continue;
        if (row(row_ctx, v, r) != 0)
            return specd_fail(err, SPECD_E_IO, "smooth: embedding row %d unavailable", (int)v);
        const float pv = (float)(exp(d) / z);
        for (int32_t j = 0; j < n_embd; j++)
            acc[j] += pv * r[j];
        used++;
    }
    for (int32_t j = 0; j < n_embd; j++)
        out[j] = e_mask[j] + alpha * acc[j];
    if (n_used) *n_used = used;
    return SPECD_OK;
}
