/* Goodness-of-fit for the statistical tests: the G-test against known probabilities, with cells
 * of small expectation pooled, and its chi-square p-value (regularised upper incomplete gamma). */
#ifndef SPECD_TESTS_ACCEPT_GOF_H
#define SPECD_TESTS_ACCEPT_GOF_H

#include <math.h>
#include <stdint.h>

/* Q(a, x) = Gamma(a, x) / Gamma(a): series below a + 1, Lentz continued fraction above. */
static inline double gof_gamma_q(double a, double x) {
    if (x <= 0.0) return 1.0;
    double gln = lgamma(a);
    if (x < a + 1.0) {
        double ap = a, sum = 1.0 / a, del = sum;
        for (int n = 0; n < 100000; n++) {
            ap += 1.0;
            del *= x / ap;
            sum += del;
            if (fabs(del) < fabs(sum) * 1e-15) break;
        }
        return 1.0 - sum * exp(-x + a * log(x) - gln);
    }
    double b = x + 1.0 - a, c = 1.0 / 1e-300, d = 1.0 / b, h = d;
    for (int i = 1; i < 100000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < 1e-300) d = 1e-300;
        c = b + an / c;
        if (fabs(c) < 1e-300) c = 1e-300;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-15) break;
    }
    return exp(-x + a * log(x) - gln) * h;
}

static inline double gof_chi2_sf(double stat, double df) { return gof_gamma_q(df / 2.0, stat / 2.0); }

/* G-test p-value of counts[n] (total draws) against probabilities prob[n] (summing to 1).
 * Cells expecting fewer than 5 draws are pooled into one; counts in cells of probability 0 make
 * the p-value 0 (an impossible outcome happened). */
static inline double gof_pvalue(const uint64_t *counts, const double *prob, int n, uint64_t total) {
    double g = 0.0, pooled_e = 0.0, pooled_o = 0.0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        double e = prob[i] * (double)total, o = (double)counts[i];
        if (prob[i] <= 0.0) {
            if (o > 0) return 0.0;
            continue;
        }
        if (e < 5.0) {
            pooled_e += e;
            pooled_o += o;
            continue;
        }
        if (o > 0) g += 2.0 * o * log(o / e);
        g -= 2.0 * (o - e); /* keeps g >= 0 when sum(prob) drifts from 1 by rounding */
        cells++;
    }
    if (pooled_e > 0.0) {
        if (pooled_o > 0) g += 2.0 * pooled_o * log(pooled_o / pooled_e);
        g -= 2.0 * (pooled_o - pooled_e);
        cells++;
    }
    if (cells < 2) return 1.0;
    return gof_chi2_sf(g, cells - 1);
}

#endif
