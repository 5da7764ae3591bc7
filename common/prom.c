#include "common/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void put(prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(prom *p, const char *fmt, ...) {
    if (p->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = p->cap - p->len;
        int n = vsnprintf(p->buf ? p->buf + p->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            p->len += (size_t)n;
            return;
        }
        size_t cap = p->cap ? p->cap * 2 : 4096;
        while (cap < p->len + (size_t)n + 1) cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) {
            p->failed = 1;
            return;
        }
        p->buf = b;
        p->cap = cap;
    }
}

void prom_family(prom *p, const char *name, const char *type, const char *help) {
    put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void prom_int(prom *p, const char *name, const char *labels, int64_t value) {
    if (labels && *labels) put(p, "%s{%s} %lld\n", name, labels, (long long)value);
    else put(p, "%s %lld\n", name, (long long)value);
}

void prom_double(prom *p, const char *name, const char *labels, double value) {
    /* The text format spells the non-finite values itself. */
    char v[64];
    if (isnan(value)) snprintf(v, sizeof v, "NaN");
    else if (isinf(value)) snprintf(v, sizeof v, "%s", value > 0 ? "+Inf" : "-Inf");
    else snprintf(v, sizeof v, "%.17g", value);
    if (labels && *labels) put(p, "%s{%s} %s\n", name, labels, v);
    else put(p, "%s %s\n", name, v);
}

void prom_counter(prom *p, const char *name, const char *help, int64_t value) {
    prom_family(p, name, "counter", help);
    prom_int(p, name, NULL, value);
}

void prom_gauge(prom *p, const char *name, const char *help, double value) {
    prom_family(p, name, "gauge", help);
    prom_double(p, name, NULL, value);
}

void prom_spec_decode(prom *p, const specd_seq_stats *s, int n_pos) {
    /* The help texts are session/metrics.c's, which writes the same counters to a file. */
    prom_counter(p, "specd:spec_decode_num_drafts_total",
                 "Steps that verified at least one proposal.", s->n_drafts);
    prom_counter(p, "specd:spec_decode_num_draft_tokens_total", "Proposed tokens verified.",
                 s->n_draft_tokens);
    prom_counter(p, "specd:spec_decode_num_accepted_tokens_total", "Proposed tokens accepted.",
                 s->n_accepted);
    prom_family(p, "specd:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                "Accepted proposals by draft position.");
    if (n_pos < 0)
        for (n_pos = 0; n_pos < SPECD_MAX_DRAFT && s->drafted_at[n_pos] > 0;) n_pos++;
    for (int i = 0; i < n_pos && i < SPECD_MAX_DRAFT; i++) {
        char l[32];
        snprintf(l, sizeof l, "position=\"%d\"", i);
        prom_int(p, "specd:spec_decode_num_accepted_tokens_per_pos_total", l, s->accepted_at[i]);
    }
    prom_counter(p, "specd:spec_decode_num_emitted_tokens_total", "Tokens emitted.", s->n_emitted);
    prom_counter(p, "specd:spec_decode_num_target_forwards_total", "Target forward passes (steps).",
                 s->n_steps);
    prom_counter(p, "specd:spec_decode_num_backoffs_total",
                 "Times the adaptive guard turned drafting off.", s->n_backoffs);
    prom_counter(p, "specd:spec_decode_num_guard_plain_steps_total",
                 "Steps the adaptive guard ran without proposals.", s->n_guard_plain);
}

void prom_hist_observe(prom_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void prom_histogram(prom *p, const char *name, const char *help, const prom_hist *h) {
    prom_family(p, name, "histogram", help);
    int64_t cum = 0;
    for (int i = 0; i <= h->n; i++) {
        cum += h->counts[i];
        char l[48];
        if (i < h->n) snprintf(l, sizeof l, "le=\"%g\"", h->bounds[i]);
        else snprintf(l, sizeof l, "le=\"+Inf\"");
        put(p, "%s_bucket{%s} %lld\n", name, l, (long long)cum);
    }
    put(p, "%s_sum %.9g\n%s_count %lld\n", name, h->sum, name, (long long)h->count);
}
