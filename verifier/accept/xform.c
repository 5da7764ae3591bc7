#include "verifier/accept/xform.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/fastmath.h"
#include "common/philox.h"
#include "common/status_internal.h"
#include "verifier/accept/row_ops.h"

static int cmp_bias(const void *a, const void *b) {
    const specd_logit_bias *x = a, *y = b;
    return (x->token > y->token) - (x->token < y->token);
}

static float gumbel_of(uint32_t m) { return specd_gumbel(specd_u32_to_uniform(m << 9)); }

/* Smallest m with G(m) >= g: an analytic guess, then exact steps with the fixed functions. */
static uint32_t gumbel_inverse(float g) {
    const uint32_t top = (1u << 23) - 1;
    double u = exp(-exp(-(double)g)) * 8388608.0 - 0.5;
    uint32_t m = u <= 0 ? 0 : (u >= top ? top : (uint32_t)u);
    while (m > 0 && gumbel_of(m - 1) >= g) m--;
    while (m <= top && gumbel_of(m) < g) m++;
    return m; /* top + 1 when no uniform reaches g */
}

static void build_gtab(uint32_t *tab) {
    for (int j = 0; j < SPECD_GTAB_N; j++)
        tab[j] = gumbel_inverse(SPECD_GTAB_LO + (float)j / (float)SPECD_GTAB_STEPS);
}

specd_status specd_xform_init(specd_xform *xf, const specd_sampling_params *p, int32_t max_vocab,
                              specd_error *err) {
    memset(xf, 0, sizeof *xf);
    if (!p) return specd_fail(err, SPECD_E_INVALID_ARG, "sampling params are NULL");
    if (!(p->temperature >= 0.0f) || !isfinite(p->temperature))
        return specd_fail(err, SPECD_E_INVALID_ARG, "temperature %g: must be finite and >= 0",
                          (double)p->temperature);
    if (p->top_k < 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "top_k %d: must be >= 0", (int)p->top_k);
    if (!(p->top_p > 0.0f && p->top_p <= 1.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG, "top_p %g: must be in (0, 1]",
                          (double)p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p < 1.0f))
        return specd_fail(err, SPECD_E_INVALID_ARG, "min_p %g: must be in [0, 1)",
                          (double)p->min_p);
    if (max_vocab < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "max_vocab %d: must be >= 1", (int)max_vocab);
    if (p->n_bias && !p->bias)
        return specd_fail(err, SPECD_E_INVALID_ARG, "n_bias %zu but bias is NULL", p->n_bias);
    if (p->n_bias > (size_t)max_vocab)
        return specd_fail(err, SPECD_E_INVALID_ARG, "n_bias %zu exceeds max_vocab %d", p->n_bias,
                          (int)max_vocab);
    for (size_t i = 0; i < p->n_bias; i++) {
        const specd_logit_bias *b = &p->bias[i];
        if (b->token < 0 || b->token >= max_vocab)
            return specd_fail(err, SPECD_E_INVALID_ARG, "bias %zu: token %d outside [0, %d)", i,
                              (int)b->token, (int)max_vocab);
        if (isnan(b->bias) || b->bias == INFINITY)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "bias %zu (token %d): %g is not finite or -inf", i, (int)b->token,
                              (double)b->bias);
    }
    xf->temperature = p->temperature;
    xf->top_k = p->top_k;
    xf->top_p = p->top_p;
    xf->min_p = p->min_p;
    xf->max_vocab = max_vocab;
    xf->n_bias = p->n_bias;
    build_gtab(xf->gtab);
    xf->biased = specd_alloc_array((size_t)max_vocab, sizeof *xf->biased);
    xf->bbmax = specd_alloc_array((size_t)specd_n_blocks(max_vocab), sizeof *xf->bbmax);
    xf->pairs = specd_alloc_array((size_t)max_vocab, sizeof *xf->pairs);
    xf->bias = specd_alloc_array(p->n_bias ? p->n_bias : 1, sizeof *xf->bias);
    if (!xf->biased || !xf->bbmax || !xf->pairs || !xf->bias) {
        specd_xform_release(xf);
        return specd_fail(err, SPECD_E_NOMEM, "sampling scratch for %d tokens", (int)max_vocab);
    }
    if (p->n_bias) memcpy(xf->bias, p->bias, p->n_bias * sizeof *xf->bias);
    qsort(xf->bias, xf->n_bias, sizeof *xf->bias, cmp_bias);
    for (size_t i = 1; i < xf->n_bias; i++) {
        if (xf->bias[i].token == xf->bias[i - 1].token) {
            int tok = (int)xf->bias[i].token;
            specd_xform_release(xf);
            return specd_fail(err, SPECD_E_INVALID_ARG, "bias: token %d appears twice", tok);
        }
    }
    return SPECD_OK;
}

void specd_xform_release(specd_xform *xf) {
    specd_free(xf->biased);
    specd_free(xf->bbmax);
    specd_free(xf->pairs);
    specd_free(xf->bias);
    memset(xf, 0, sizeof *xf);
}

specd_status specd_xform_check_vocab(const specd_xform *xf, int32_t n_vocab, specd_error *err) {
    if (n_vocab < 1 || n_vocab > xf->max_vocab)
        return specd_fail(err, SPECD_E_INVALID_ARG, "n_vocab %d outside [1, max_vocab %d]",
                          (int)n_vocab, (int)xf->max_vocab);
    if (xf->n_bias && xf->bias[xf->n_bias - 1].token >= n_vocab)
        return specd_fail(err, SPECD_E_INVALID_ARG, "bias token %d outside the vocabulary of %d",
                          (int)xf->bias[xf->n_bias - 1].token, (int)n_vocab);
    return SPECD_OK;
}

specd_status specd_row_check(const float *l, int32_t n, const char *what, int32_t row,
                             float *bmax, float *max, float *min, specd_error *err) {
    float gmax, gmin;
    if (specd_check_kernel(l, n, bmax, &gmax, &gmin)) {
        /* -inf is a mask (a banned token, as host engines pad and constrain); NaN and +inf are
         * errors. The extremes are recomputed here, where the kernel's are not defined. */
        gmax = -INFINITY;
        gmin = INFINITY;
        for (int32_t b = 0; b < n; b += SPECD_BLOCK) {
            int32_t e = b + SPECD_BLOCK < n ? b + SPECD_BLOCK : n;
            float m = -INFINITY;
            for (int32_t x = b; x < e; x++) {
                float v = l[x];
                if (v != v || v == INFINITY)
                    return specd_fail(err, SPECD_E_NUMERIC,
                                      "%s row %d token %d: %g is not finite (only -inf masks)",
                                      what, (int)row, (int)x, (double)v);
                m = v > m ? v : m;
                gmin = v < gmin ? v : gmin;
            }
            bmax[b / SPECD_BLOCK] = m;
            gmax = m > gmax ? m : gmax;
        }
    }
    if (gmax <= -FLT_MAX) /* checked with the rest, before anything is decided */
        return specd_fail(err, SPECD_E_NUMERIC, "%s row %d: every token is masked (-inf)", what,
                          (int)row);
    *max = gmax;
    *min = gmin;
    return SPECD_OK;
}

static inline float zval(float l, float t) { return l / t; }

/* Kept by the top-k/top-p cut (z order: higher z first, then lower index). */
static inline int above_cut(const specd_xrow *r, float z, int32_t x) {
    return z > r->thr_z || (z == r->thr_z && x <= r->thr_i);
}

static inline float e_of(const specd_xform *xf, const specd_xrow *r, float z, int32_t x) {
    if (r->thresh && !above_cut(r, z, x)) return 0.0f;
    float e = specd_fast_exp_neg(z - r->zmax);
    if (xf->min_p > 0.0f && !(e >= xf->min_p)) return 0.0f;
    return e;
}

float specd_xrow_e(const specd_xform *xf, const specd_xrow *r, int32_t x) {
    if (r->greedy) return x == r->imax ? 1.0f : 0.0f;
    return e_of(xf, r, zval(r->l[x], xf->temperature), x);
}

/* "a ranks before b" in z order. */
static inline int zi_better(specd_zi a, specd_zi b) { return a.z > b.z || (a.z == b.z && a.i < b.i); }

static void heap_sift_down(specd_zi *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t w = i, c1 = 2 * i + 1, c2 = 2 * i + 2;
        if (c1 < n && zi_better(h[w], h[c1])) w = c1; /* root holds the worst */
        if (c2 < n && zi_better(h[w], h[c2])) w = c2;
        if (w == i) return;
        specd_zi t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

static void heap_sift_up(specd_zi *h, int32_t i) {
    while (i > 0) {
        int32_t p = (i - 1) / 2;
        if (!zi_better(h[p], h[i])) return;
        specd_zi t = h[i];
        h[i] = h[p];
        h[p] = t;
        i = p;
    }
}

/* Top-k cut: a heap of the k best with the worst at the root. */
static void apply_top_k(specd_xform *xf, specd_xrow *r) {
    specd_zi *h = xf->pairs;
    int32_t k = xf->top_k, size = 0;
    for (int32_t x = 0; x < r->n; x++) {
        float z = zval(r->l[x], xf->temperature);
        if (z == -INFINITY) continue;
        specd_zi c = {z, x};
        if (size < k) {
            h[size] = c;
            heap_sift_up(h, size++);
        } else if (zi_better(c, h[0])) {
            h[0] = c;
            heap_sift_down(h, size, 0);
        }
    }
    if (size == k) {
        r->thresh = 1;
        r->thr_z = h[0].z;
        r->thr_i = h[0].i;
    }
}

static int cmp_zi(const void *a, const void *b) {
    specd_zi x = *(const specd_zi *)a, y = *(const specd_zi *)b;
    return zi_better(x, y) ? -1 : (zi_better(y, x) ? 1 : 0);
}

/* Top-p cut over the current survivors: sort them, add e in that order until p * Z. */
static void apply_top_p(specd_xform *xf, specd_xrow *r) {
    float acc[SPECD_SUM_LANES];
    memset(acc, 0, sizeof acc);
    int32_t m = 0;
    for (int32_t x = 0; x < r->n; x++) {
        float z = zval(r->l[x], xf->temperature);
        if (z == -INFINITY || (r->thresh && !above_cut(r, z, x))) continue;
        acc[x % SPECD_SUM_LANES] += specd_fast_exp_neg(z - r->zmax);
        xf->pairs[m].z = z;
        xf->pairs[m++].i = x;
    }
    for (int32_t s = SPECD_SUM_LANES / 2; s > 0; s /= 2)
        for (int32_t j = 0; j < s; j++) acc[j] += acc[j + s];
    float target = xf->top_p * acc[0];
    qsort(xf->pairs, (size_t)m, sizeof *xf->pairs, cmp_zi);
    float cum = 0.0f;
    for (int32_t j = 0; j < m; j++) {
        cum += specd_fast_exp_neg(xf->pairs[j].z - r->zmax);
        if (cum >= target) {
            r->thresh = 1;
            r->thr_z = xf->pairs[j].z;
            r->thr_i = xf->pairs[j].i;
            return;
        }
    }
}

specd_status specd_xform_prepare(specd_xform *xf, const float *logits, int32_t n,
                                 const float *bmax, float raw_max, float raw_min, const char *what,
                                 int32_t row, specd_xrow *r, specd_error *err) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->l = logits;
    r->bmax = bmax;
    float lmax = raw_max, lmin = raw_min;
    const float t = xf->temperature;
    /* A logit at or below -FLT_MAX (-inf, or PyTorch's finfo.min mask) is a banned token: the
     * row is copied with those entries at -inf, which the bias path below already treats as
     * banned (weight 0, never the argmax nor a keyed sample, out of the overflow check). */
    int masked = raw_min <= -FLT_MAX;
    if (xf->n_bias || masked) {
        memcpy(xf->biased, logits, (size_t)n * sizeof *logits);
        if (masked)
            for (int32_t x = 0; x < n; x++)
                if (xf->biased[x] <= -FLT_MAX) xf->biased[x] = -INFINITY;
        for (size_t i = 0; i < xf->n_bias; i++) {
            int32_t tok = xf->bias[i].token;
            float v = xf->biased[tok] + xf->bias[i].bias;
            if (v == INFINITY)
                return specd_fail(err, SPECD_E_NUMERIC, "%s row %d token %d: biased logit overflows",
                                  what, (int)row, (int)tok);
            xf->biased[tok] = v;
        }
        lmax = -INFINITY;
        lmin = INFINITY;
        for (int32_t b = 0; b < n; b += SPECD_BLOCK) {
            int32_t e = b + SPECD_BLOCK < n ? b + SPECD_BLOCK : n;
            float m = -INFINITY;
            for (int32_t x = b; x < e; x++) {
                float v = xf->biased[x];
                m = v > m ? v : m;
                if (v > -INFINITY && v < lmin) lmin = v;
            }
            xf->bbmax[b / SPECD_BLOCK] = m;
            lmax = m > lmax ? m : lmax;
        }
        r->l = xf->biased;
        r->bmax = xf->bbmax;
    }
    if (lmax == -INFINITY)
        return specd_fail(err, SPECD_E_NUMERIC,
                          "%s row %d: every token is masked (-inf) or banned by the bias", what,
                          (int)row);
    r->lmax = lmax;
    r->greedy = t == 0.0f;
    float zmax = r->greedy ? lmax : zval(lmax, t);
    if (!r->greedy && (!isfinite(zmax) || !isfinite(zval(lmin, t))))
        return specd_fail(err, SPECD_E_NUMERIC,
                          "%s row %d: logits / temperature %g overflow a float", what, (int)row,
                          (double)t);
    r->zmax = zmax;
    /* imax: lowest index whose z equals zmax; only blocks whose maximum maps to zmax hold it. */
    r->imax = -1;
    for (int32_t b = 0; b < specd_n_blocks(n) && r->imax < 0; b++) {
        float bz = r->greedy ? r->bmax[b] : zval(r->bmax[b], t);
        if (bz != zmax) continue;
        int32_t e = (b + 1) * SPECD_BLOCK < n ? (b + 1) * SPECD_BLOCK : n;
        for (int32_t x = b * SPECD_BLOCK; x < e; x++) {
            float z = r->greedy ? r->l[x] : zval(r->l[x], t);
            if (z == zmax) {
                r->imax = x;
                break;
            }
        }
    }
    if (r->imax < 0) return specd_fail(err, SPECD_E_INTERNAL, "%s row %d: lost the maximum", what,
                                       (int)row);
    if (r->greedy) return SPECD_OK;
    if (xf->top_k > 0 && xf->top_k < n) apply_top_k(xf, r);
    if (xf->top_p < 1.0f) apply_top_p(xf, r);
    r->filtered = r->thresh || xf->min_p > 0.0f;
    return SPECD_OK;
}

static float tree_reduce(float *acc, int32_t used) {
    int32_t width = 1;
    while (width < used) width *= 2; /* lanes past `used` hold 0: adding them changes nothing */
    for (int32_t s = width / 2; s > 0; s /= 2)
        for (int32_t j = 0; j < s; j++) acc[j] += acc[j + s];
    return acc[0];
}

float specd_lane_sum(const float *v, int32_t n) {
    float acc[SPECD_SUM_LANES];
    memset(acc, 0, sizeof acc);
    (void)specd_lanesum_kernel(v, n, acc);
    return tree_reduce(acc, n < SPECD_SUM_LANES ? n : SPECD_SUM_LANES);
}

int specd_prob_row_sum(const float *v, int32_t n, float *sum) {
    float acc[SPECD_SUM_LANES];
    memset(acc, 0, sizeof acc);
    int bad = specd_lanesum_kernel(v, n, acc);
    *sum = tree_reduce(acc, n < SPECD_SUM_LANES ? n : SPECD_SUM_LANES);
    return bad;
}

float specd_xrow_sum(const specd_xform *xf, specd_xrow *r) {
    if (r->has_sum) return r->sum;
    if (r->greedy) {
        r->sum = 1.0f;
        r->has_sum = 1;
        return r->sum;
    }
    float acc[SPECD_SUM_LANES];
    memset(acc, 0, sizeof acc);
    const float *l = r->l;
    const float t = xf->temperature, zmax = r->zmax;
    const int32_t n = r->n;
    int32_t i = 0;
    if (r->filtered) {
        for (; i + SPECD_SUM_LANES <= n; i += SPECD_SUM_LANES)
            for (int32_t j = 0; j < SPECD_SUM_LANES; j++)
                acc[j] += e_of(xf, r, zval(l[i + j], t), i + j);
        for (int32_t j = 0; i + j < n; j++) acc[j] += e_of(xf, r, zval(l[i + j], t), i + j);
    } else {
        specd_sum_kernel(l, n, t, zmax, acc);
    }
    r->sum = tree_reduce(acc, n < SPECD_SUM_LANES ? n : SPECD_SUM_LANES);
    r->has_sum = 1;
    return r->sum;
}

void specd_xrow_weights(const specd_xform *xf, const specd_xrow *r, float z, float *w) {
    if (r->greedy || r->filtered) {
        for (int32_t x = 0; x < r->n; x++) w[x] = specd_xrow_e(xf, r, x) / z;
        return;
    }
    specd_weights_kernel(r->l, r->n, xf->temperature, r->zmax, z, w);
}

void specd_xrow_weights_bsum(const specd_xform *xf, const specd_xrow *r, float *w, float *bsum) {
    if (r->greedy || r->filtered) {
        specd_xrow_weights(xf, r, 1.0f, w);
        specd_bsum_kernel(w, r->n, bsum);
        return;
    }
    specd_weights_bsum_kernel(r->l, r->n, xf->temperature, r->zmax, w, bsum);
}

int32_t specd_cdf_draw(const float *w, int32_t n, float u, float *bsum) {
    specd_bsum_kernel(w, n, bsum);
    return specd_cdf_draw_summed(w, n, u, bsum);
}

int32_t specd_cdf_draw_summed(const float *w, int32_t n, float u, const float *bsum) {
    int32_t nb = specd_n_blocks(n);
    float total = 0.0f;
    for (int32_t b = 0; b < nb; b++) total += bsum[b];
    if (!(total > 0.0f)) return -1;
    float target = u * total, cum = 0.0f;
    for (int32_t b = 0; b < nb; b++) {
        float next = cum + bsum[b];
        if (!(next > target)) {
            cum = next;
            continue;
        }
        int32_t x0 = b * SPECD_BLOCK, x1 = x0 + SPECD_BLOCK < n ? x0 + SPECD_BLOCK : n, last = -1;
        float rest = target - cum, s = 0.0f;
        for (int32_t x = x0; x < x1; x++) {
            if (!(w[x] > 0.0f)) continue;
            s += w[x];
            last = x;
            if (s > rest) return x;
        }
        return last; /* rounding left the crossing just past the block's end */
    }
    for (int32_t x = n - 1; x >= 0; x--) /* u * total rounded up to total: the last token */
        if (w[x] > 0.0f) return x;
    return -1;
}

void specd_xrow_probs(const specd_xform *xf, specd_xrow *r, float *probs) {
    float z = specd_xrow_sum(xf, r);
    for (int32_t x = 0; x < r->n; x++) probs[x] = specd_xrow_e(xf, r, x) / z;
}

int32_t specd_xrow_keyed(const specd_xform *xf, const specd_xrow *r, specd_sample_key key,
                         specd_rng_purpose purpose) {
    if (r->greedy) return r->imax;
    const float t = xf->temperature;
    const float *l = r->l;
    const int32_t n = r->n;
    const uint32_t kk[2] = {(uint32_t)key.seed, (uint32_t)(key.seed >> 32)};
    uint32_t ctr[4] = {0, key.position, key.sequence, (uint32_t)purpose};
    uint32_t w[4];
    int32_t best_i = r->imax;
    ctr[0] = (uint32_t)best_i >> 2;
    specd_philox4x32_10(ctr, kk, w);
    float best = r->zmax + specd_gumbel(specd_u32_to_uniform(w[best_i & 3]));
    uint32_t have = ctr[0];
    for (int32_t b = 0; b < specd_n_blocks(n); b++) {
        if (zval(r->bmax[b], t) + SPECD_GUMBEL_MAX < best) continue; /* nobody here can win */
        int32_t e = (b + 1) * SPECD_BLOCK < n ? (b + 1) * SPECD_BLOCK : n;
        if (!r->filtered && e - b * SPECD_BLOCK == SPECD_BLOCK) { /* a full block: vectors */
            specd_scores_kernel(l, b * SPECD_BLOCK, t, kk, ctr, &best, &best_i);
            continue;
        }
        for (int32_t x = b * SPECD_BLOCK; x < e; x++) {
            float a = zval(l[x], t);
            if (a + SPECD_GUMBEL_MAX < best) continue;
            if (r->filtered && e_of(xf, r, a, x) == 0.0f) continue;
            if ((uint32_t)x >> 2 != have) {
                have = ctr[0] = (uint32_t)x >> 2;
                specd_philox4x32_10(ctr, kk, w);
            }
            uint32_t m = w[x & 3] >> 9;
            /* Quick reject: G(m) < level <= best - a - 1/64 means a + G < best even after
             * rounding (the 1/64 margin dwarfs float rounding at these magnitudes). */
            float idx = ((best - a) - (SPECD_GTAB_LO + 1.0f / 64.0f)) * (float)SPECD_GTAB_STEPS;
            if (idx >= 0.0f) {
                int32_t j = idx < (float)(SPECD_GTAB_N - 1) ? (int32_t)idx : SPECD_GTAB_N - 1;
                if (m < xf->gtab[j]) continue;
            }
            float s = a + specd_gumbel(specd_u32_to_uniform(m << 9));
            if (s > best || (s == best && x < best_i)) {
                best = s;
                best_i = x;
            }
        }
    }
    return best_i;
}
