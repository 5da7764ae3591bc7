/* Prometheus text exposition (format 0.0.4) into a growing buffer: each family's HELP and TYPE
 * once, then its samples. Names follow vLLM's (vllm:spec_decode_num_drafts_total and the rest),
 * with the prefix "specd:". */
#ifndef SPECD_COMMON_PROM_H
#define SPECD_COMMON_PROM_H

#include <stddef.h>
#include <stdint.h>

#include "specd/spec.h"

typedef struct prom {
    char *buf; /* malloc'd, NUL-terminated; the caller frees it (or takes it) */
    size_t len, cap;
    int failed; /* an allocation failed: the text is incomplete */
} prom;

/* # HELP and # TYPE lines of one family (type "counter" or "gauge"). */
void prom_family(prom *p, const char *name, const char *type, const char *help);
/* One sample: name{labels} value; labels may be NULL or "" (must be valid label syntax). */
void prom_int(prom *p, const char *name, const char *labels, int64_t value);
void prom_double(prom *p, const char *name, const char *labels, double value);
/* A family with a single sample. */
void prom_counter(prom *p, const char *name, const char *help, int64_t value);
void prom_gauge(prom *p, const char *name, const char *help, double value);

/* A histogram of observations in seconds, as Prometheus keeps one: cumulative buckets by upper
 * bound. Observe under the owner's lock; write with prom_histogram. */
#define PROM_HIST_MAX 24
typedef struct prom_hist {
    const double *bounds; /* ascending upper bounds (static), n of them; +Inf is implicit */
    int n;
    int64_t counts[PROM_HIST_MAX]; /* per bucket, not cumulative; [n] is the +Inf bucket */
    int64_t count;
    double sum;
} prom_hist;

void prom_hist_observe(prom_hist *h, double v);
/* # HELP/# TYPE histogram, then name_bucket{le=...} (cumulative), name_sum and name_count. */
void prom_histogram(prom *p, const char *name, const char *help, const prom_hist *h);

/* The speculative-decoding counters of s, vLLM's names (specd:spec_decode_num_drafts_total,
 * _num_draft_tokens_total, _num_accepted_tokens_total, _num_accepted_tokens_per_pos_total by
 * position) plus specd's own (emitted tokens, target forwards, guard backoffs and plain steps).
 * n_pos: how many draft positions to list (those ever drafted when < 0). */
void prom_spec_decode(prom *p, const specd_seq_stats *s, int n_pos);

#endif
