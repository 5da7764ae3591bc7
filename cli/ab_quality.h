/* specd ab's quality figures for outputs that may differ from plain decoding (lossy policies and
 * modes: mrp mode=direct, relaxed acceptance --tau): how likely the base model finds the output,
 * how repetitive it is, and how far it follows greedy decoding. They are computed after the timed
 * runs, so speed figures do not change.
 *
 * CLI-local on purpose: they use only the public runtime API (a host engine scores with its own
 * target), and keeping them out of libspecd fixes no ABI for what is a reporting choice. */
#ifndef SPECD_CLI_AB_QUALITY_H
#define SPECD_CLI_AB_QUALITY_H

#include "specd/runtime.h"

#include <stdint.h>

/* The n-gram length of the repetition figure. */
enum { AB_REPEAT_N = 4 };

/* One output's figures. Sums, so prompts pool by adding (overall = token-weighted). */
typedef struct ab_quality {
    double nll_sum;     /* sum over the scored tokens of -log p(token | prompt, output before it) */
    int64_t nll_tokens; /* tokens scored (every emitted token, the stop token included); 0 = not
                           scored */
    int64_t grams;      /* windows of AB_REPEAT_N consecutive tokens: max(0, n - AB_REPEAT_N + 1) */
    int64_t repeated;   /* of those, windows equal to a window that starts earlier in the output */
    int64_t tasks, passed; /* rule-checked task items run and passed (0/0 without --tasks) */
} ab_quality;

/* Agreement of an output with the plain greedy run (meaningful at T = 0). */
typedef struct ab_agreement {
    int64_t prefix;  /* tokens before the first difference */
    int64_t matches; /* positions i < min(n_plain, n_spec) with equal tokens */
    int64_t n_plain; /* the plain run's length (prefix's denominator) */
    int64_t n_max;   /* max(n_plain, n_spec) (matches' denominator: a length gap counts as
                        disagreement) */
} ab_agreement;

/* Adds b into a. */
void ab_quality_add(ab_quality *a, const ab_quality *b);
void ab_agreement_add(ab_agreement *a, const ab_agreement *b);

/* Mean NLL per scored token, repetition rate (repeated / grams), prefix agreement (prefix /
 * n_plain) and positional agreement (matches / n_max); 0 for an empty denominator. */
double ab_quality_nll(const ab_quality *q);
double ab_quality_repeat_rate(const ab_quality *q);
double ab_agreement_prefix(const ab_agreement *a);
double ab_agreement_positions(const ab_agreement *a);

/* Counts out's AB_REPEAT_N-gram windows and the repeated ones into q->grams / q->repeated.
 * Returns non-zero when out of memory (q untouched). */
int ab_quality_repeats(const int32_t *out, int64_t n, ab_quality *q);

/* Fills a from the two outputs. */
void ab_agreement_of(const int32_t *plain, int64_t n_plain, const int32_t *spec, int64_t n_spec,
                     ab_agreement *a);

/* Scores out under ctx's model at temperature 1: *nll_sum receives the sum over i of
 * -log softmax(logits(prompt, out[0..i)))[out[i]], computed in double from the target's raw
 * logits. Uses sequence 0 of ctx, whose KV cache it clears before and after (a spec run clears it
 * again at its start). prompt + out must fit the context. On failure fills err and leaves
 * *nll_sum untouched. */
specd_status ab_quality_score(specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                              const int32_t *out, int64_t n_out, double *nll_sum,
                              specd_error *err);

#endif
