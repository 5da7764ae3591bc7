#include "serve/serve_prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static void put(serve_prom *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(serve_prom *p, const char *fmt, ...) {
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

void serve_prom_family(serve_prom *p, const char *name, const char *type, const char *help) {
    put(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void serve_prom_int(serve_prom *p, const char *name, const char *labels, int64_t value) {
    if (labels && *labels) put(p, "%s{%s} %lld\n", name, labels, (long long)value);
    else put(p, "%s %lld\n", name, (long long)value);
}

void serve_prom_double(serve_prom *p, const char *name, const char *labels, double value) {
    /* The text format spells the non-finite values itself. */
    char v[64];
    if (isnan(value)) snprintf(v, sizeof v, "NaN");
    else if (isinf(value)) snprintf(v, sizeof v, "%s", value > 0 ? "+Inf" : "-Inf");
    else snprintf(v, sizeof v, "%.17g", value);
    if (labels && *labels) put(p, "%s{%s} %s\n", name, labels, v);
    else put(p, "%s %s\n", name, v);
}

void serve_prom_counter(serve_prom *p, const char *name, const char *help, int64_t value) {
    serve_prom_family(p, name, "counter", help);
    serve_prom_int(p, name, NULL, value);
}

void serve_prom_gauge(serve_prom *p, const char *name, const char *help, double value) {
    serve_prom_family(p, name, "gauge", help);
    serve_prom_double(p, name, NULL, value);
}

void serve_prom_spec_decode(serve_prom *p, const specd_seq_stats *s, int n_pos) {
    /* The help texts are session/metrics.c's, which writes the same counters to a file. */
    serve_prom_counter(p, "specd:spec_decode_num_drafts_total",
                       "Steps that verified at least one proposal.", s->n_drafts);
    serve_prom_counter(p, "specd:spec_decode_num_draft_tokens_total", "Proposed tokens verified.",
                       s->n_draft_tokens);
    serve_prom_counter(p, "specd:spec_decode_num_accepted_tokens_total",
                       "Proposed tokens accepted.", s->n_accepted);
    serve_prom_family(p, "specd:spec_decode_num_accepted_tokens_per_pos_total", "counter",
                      "Accepted proposals by draft position.");
    if (n_pos < 0)
        for (n_pos = 0; n_pos < SPECD_MAX_DRAFT && s->drafted_at[n_pos] > 0;) n_pos++;
    for (int i = 0; i < n_pos && i < SPECD_MAX_DRAFT; i++) {
        char l[32];
        snprintf(l, sizeof l, "position=\"%d\"", i);
        serve_prom_int(p, "specd:spec_decode_num_accepted_tokens_per_pos_total", l,
                       s->accepted_at[i]);
    }
    serve_prom_counter(p, "specd:spec_decode_num_emitted_tokens_total", "Tokens emitted.",
                       s->n_emitted);
    serve_prom_counter(p, "specd:spec_decode_num_target_forwards_total",
                       "Target forward passes (steps).", s->n_steps);
    serve_prom_counter(p, "specd:spec_decode_num_backoffs_total",
                       "Times the adaptive guard turned drafting off.", s->n_backoffs);
    serve_prom_counter(p, "specd:spec_decode_num_guard_plain_steps_total",
                       "Steps the adaptive guard ran without proposals.", s->n_guard_plain);
}

void serve_hist_observe(serve_hist *h, double v) {
    int i = 0;
    while (i < h->n && v > h->bounds[i]) i++;
    h->counts[i]++;
    h->count++;
    h->sum += v;
}

void serve_prom_histogram(serve_prom *p, const char *name, const char *help, const serve_hist *h) {
    serve_prom_family(p, name, "histogram", help);
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
