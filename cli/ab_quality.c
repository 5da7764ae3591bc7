#include "cli/ab_quality.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows of logits one scoring extend returns: bounds the buffer (rows x n_vocab floats) however
 * long the output is. */
enum { SCORE_ROWS = 32 };

void ab_quality_add(ab_quality *a, const ab_quality *b) {
    a->nll_sum += b->nll_sum;
    a->nll_tokens += b->nll_tokens;
    a->grams += b->grams;
    a->repeated += b->repeated;
    a->tasks += b->tasks;
    a->passed += b->passed;
}

void ab_agreement_add(ab_agreement *a, const ab_agreement *b) {
    a->prefix += b->prefix;
    a->matches += b->matches;
    a->n_plain += b->n_plain;
    a->n_max += b->n_max;
}

static double ratio(double num, int64_t den) { return den > 0 ? num / (double)den : 0.0; }

double ab_quality_nll(const ab_quality *q) { return ratio(q->nll_sum, q->nll_tokens); }
double ab_quality_repeat_rate(const ab_quality *q) { return ratio((double)q->repeated, q->grams); }
double ab_agreement_prefix(const ab_agreement *a) { return ratio((double)a->prefix, a->n_plain); }
double ab_agreement_positions(const ab_agreement *a) {
    return ratio((double)a->matches, a->n_max);
}

void ab_agreement_of(const int32_t *plain, int64_t n_plain, const int32_t *spec, int64_t n_spec,
                     ab_agreement *a) {
    int64_t n = n_plain < n_spec ? n_plain : n_spec;
    memset(a, 0, sizeof *a);
    a->prefix = -1;
    for (int64_t i = 0; i < n; i++) {
        if (plain[i] == spec[i]) a->matches++;
        else if (a->prefix < 0) a->prefix = i;
    }
    if (a->prefix < 0) a->prefix = n;
    a->n_plain = n_plain;
    a->n_max = n_plain > n_spec ? n_plain : n_spec;
}

static uint64_t window_hash(const int32_t *w) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int k = 0; k < AB_REPEAT_N; k++) {
        h ^= (uint32_t)w[k];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 29;
    }
    return h;
}

/* Open addressing over window start indices: the output may be long (-n up to 2^20), so no
 * quadratic scan. */
int ab_quality_repeats(const int32_t *out, int64_t n, ab_quality *q) {
    int64_t grams = n >= AB_REPEAT_N ? n - AB_REPEAT_N + 1 : 0;
    if (grams == 0) {
        q->grams = 0;
        q->repeated = 0;
        return 0;
    }
    size_t cap = 16;
    while (cap < (size_t)grams * 2) cap *= 2;
    int64_t *slot = malloc(cap * sizeof *slot);
    if (!slot) return 1;
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    int64_t repeated = 0;
    for (int64_t i = 0; i < grams; i++) {
        size_t s = (size_t)window_hash(out + i) & (cap - 1);
        int seen = 0;
        while (slot[s] >= 0) {
            if (!memcmp(out + slot[s], out + i, AB_REPEAT_N * sizeof *out)) {
                seen = 1;
                break;
            }
            s = (s + 1) & (cap - 1);
        }
        if (seen) repeated++;
        else slot[s] = i;
    }
    free(slot);
    q->grams = grams;
    q->repeated = repeated;
    return 0;
}

static specd_status fail(specd_error *err, specd_status st, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        err->status = st;
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return st;
}

/* -log softmax(row)[tok] in double: max-shifted so a large logit cannot overflow exp. */
static double neg_log_prob(const float *row, int32_t n_vocab, int32_t tok) {
    float mx = row[0];
    for (int32_t v = 1; v < n_vocab; v++)
        if (row[v] > mx) mx = row[v];
    double sum = 0.0;
    for (int32_t v = 0; v < n_vocab; v++) sum += exp((double)row[v] - (double)mx);
    return log(sum) + (double)mx - (double)row[tok];
}

specd_status ab_quality_score(specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                              const int32_t *out, int64_t n_out, double *nll_sum,
                              specd_error *err) {
    if (!ctx || !prompt || n_prompt < 1 || n_out < 0 || (n_out > 0 && !out) || !nll_sum)
        return fail(err, SPECD_E_INVALID_ARG, "ab_quality_score: bad arguments");
    if (n_out == 0) {
        *nll_sum = 0.0;
        return SPECD_OK;
    }
    const specd_model_info *info = specd_model_get_info(specd_context_model(ctx));
    int32_t n_vocab = info->n_vocab, n_batch = specd_context_n_batch(ctx);
    for (int64_t i = 0; i < n_out; i++)
        if (out[i] < 0 || out[i] >= n_vocab)
            return fail(err, SPECD_E_INVALID_ARG, "ab_quality_score: output token %lld is %d, "
                        "outside the vocabulary of %d", (long long)i, out[i], n_vocab);
    /* fed: the prompt and every output token but the last (whose successor is not scored) */
    int64_t n_fed = n_prompt + n_out - 1;
    int32_t chunk = n_batch < SCORE_ROWS ? n_batch : SCORE_ROWS;
    float *logits = malloc((size_t)chunk * (size_t)n_vocab * sizeof *logits);
    int32_t *seq = malloc((size_t)n_fed * sizeof *seq);
    if (!logits || !seq) {
        free(logits);
        free(seq);
        return fail(err, SPECD_E_NOMEM, "ab_quality_score: no memory for %lld tokens",
                    (long long)n_fed);
    }
    memcpy(seq, prompt, (size_t)n_prompt * sizeof *seq);
    memcpy(seq + n_prompt, out, (size_t)(n_out - 1) * sizeof *seq);
    specd_status st = specd_context_kv_truncate(ctx, 0, 0, err);
    /* The prompt but its last token fills the cache only; from the prompt's last token on, row j
     * predicts out[j - (n_prompt - 1)]. */
    int64_t pos = 0;
    while (st == SPECD_OK && pos < n_prompt - 1) {
        int64_t take = n_prompt - 1 - pos < n_batch ? n_prompt - 1 - pos : n_batch;
        specd_seq_batch b = {.seq = 0, .n_tokens = (int32_t)take, .tokens = seq + pos};
        st = specd_context_extend(ctx, &b, 1, NULL, err);
        pos += take;
    }
    double sum = 0.0;
    while (st == SPECD_OK && pos < n_fed) {
        int64_t take = n_fed - pos < chunk ? n_fed - pos : chunk;
        specd_seq_batch b = {.seq = 0, .n_tokens = (int32_t)take, .tokens = seq + pos};
        specd_extend_out o = {.n_rows = (int32_t)take, .logits = logits};
        st = specd_context_extend(ctx, &b, 1, &o, err);
        for (int64_t r = 0; st == SPECD_OK && r < take; r++) {
            double nlp = neg_log_prob(logits + (size_t)r * (size_t)n_vocab, n_vocab,
                                      out[pos + r - (n_prompt - 1)]);
            /* a NaN would spread silently into the run's NLL and print as nan/null */
            if (!isfinite(nlp))
                st = fail(err, SPECD_E_NUMERIC,
                          "ab_quality_score: non-finite log-probability at output token %lld",
                          (long long)(pos + r - (n_prompt - 1)));
            sum += nlp;
        }
        pos += take;
    }
    specd_error ignored;
    specd_context_kv_truncate(ctx, 0, 0, &ignored);
    free(logits);
    free(seq);
    if (st != SPECD_OK) return st;
    *nll_sum = sum;
    return SPECD_OK;
}
