/* The adaptive guard: per sequence, compares tokens per second of drafting steps with plain
 * steps (both timed from the host's layout-to-verify wall clock) and shortens or pauses drafting
 * when speculation does not pay, so a sequence is never much slower than plain decoding. */
#ifndef SPECD_POLICY_ADAPTIVE_H
#define SPECD_POLICY_ADAPTIVE_H

#include <stdint.h>

typedef struct specd_adaptive {
    int enabled;
    int32_t max_draft;
    int32_t budget;        /* current draft limit, 1..max_draft */
    int32_t pause_left;    /* plain steps left before drafting is retried */
    int32_t pause_len;     /* next pause length (doubles on repeated back-offs) */
    int32_t since_plain;   /* drafting steps since the last plain step */
    int64_t n_spec, n_plain;
    double ns_spec, tok_spec, ns_plain; /* exponential moving averages */
    int64_t n_backoffs;
} specd_adaptive;

void specd_adaptive_init(specd_adaptive *g, int enabled, int32_t max_draft);
/* Draft tokens the next step may propose (0 = a plain step). */
int32_t specd_adaptive_budget(specd_adaptive *g);
/* Records a finished step: proposals verified, tokens emitted, its wall time. */
void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_emitted,
                            uint64_t step_ns);

#endif
