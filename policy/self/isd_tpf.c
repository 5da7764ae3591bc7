/* Paper 000 Appendix B: the tokens per forward ISD's renewal cycle predicts (specd/isd.h). */
#include "specd/isd.h"


double specd_isd_tpf_uniform(double p, int32_t stride) {
    if (!(p >= 0.0 && p <= 1.0) || stride < 2 || stride > SPECD_MAX_DRAFT + 1) return 0.0;
    double num = 2.0, pk = 1.0;
    for (int32_t k = 1; k <= stride - 2; k++) num += (pk *= p);
    return num / (2.0 - pk * p);
}

double specd_isd_tpf_formula(const double *accept, int32_t n) {
    if (!accept || n < 1 || n > SPECD_MAX_DRAFT) return 0.0;
    /* A cycle is one propose step (1 token) and stride steps until the first rejection; a stride
     * step emits s_0 + ... + s_n tokens on average and continues with probability S = s_n, so by
     * Wald's identity tokens = 1 + sum(s) / (1 - S) and forwards = 1 + 1 / (1 - S). */
    double s = 1.0, sum = 1.0;
    for (int32_t i = 0; i < n; i++) {
        if (!(accept[i] >= 0.0 && accept[i] <= 1.0)) return 0.0;
        s *= accept[i];
        sum += s;
    }
    return (1.0 - s + sum) / (2.0 - s);
}

int32_t specd_isd_accept_rates(const specd_seq_stats *stats, double *accept, int32_t max) {
    if (!stats || !accept || max < 1) return 0;
    int32_t n = 0;
    while (n < max && n < SPECD_MAX_DRAFT && stats->drafted_at[n] > 0) {
        /* position n is examined when it was drafted and every earlier proposal was accepted */
        int64_t reached = stats->drafted_at[n];
        if (n > 0 && stats->accepted_at[n - 1] < reached) reached = stats->accepted_at[n - 1];
        accept[n] = reached > 0 ? (double)stats->accepted_at[n] / (double)reached : 0.0;
        n++;
    }
    return n;
}
