/* Speculative-decoding counters in Prometheus text exposition format, named after vLLM's spec
 * decode metrics (num_drafts, num_draft_tokens, num_accepted_tokens, accepted per position). */
#ifndef SPECD_METRICS_H
#define SPECD_METRICS_H

#include "specd/api.h"

#include <stddef.h>

#include "specd/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the counters of stats (summed over whatever the caller summed) as Prometheus text into
 * buf (NUL-terminated) and returns the length it needs, excluding the NUL; output is truncated
 * when that is >= cap. extra_labels (may be NULL) is inserted into every label set, e.g.
 * `policy="ngram"`; it must already be valid label syntax. */
SPECD_API size_t specd_metrics_format(const specd_seq_stats *stats, const char *extra_labels, char *buf,
                            size_t cap);

/* Adds b's counters into a (for totals over sequences). */
SPECD_API void specd_seq_stats_add(specd_seq_stats *a, const specd_seq_stats *b);

#ifdef __cplusplus
}
#endif
#endif
