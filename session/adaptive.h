/* The adaptive guard: decides per step how many proposals a sequence may make (0 = a plain step)
 * from a cost model, so speculation never makes a sequence much slower than plain decoding.
 *
 * Drafter-shaped policies (chain mode): a step with k proposals costs c0 + c1 * k (c0 = a plain
 * step, c1 = one proposal's marginal cost: proposing it, its forward row, verifying it) and is
 * expected to emit E(k) = 1 + a + ... + a^k tokens at per-position acceptance a. The guard drafts
 * the k that maximises E(k) / (c0 + c1 k) when that beats plain decoding's 1 / c0 by a margin,
 * else it steps plainly and probes with one proposal now and then (doubling the interval while
 * probes keep saying no). Self-speculative policies lay out their own steps, so their guard is
 * on/off: the policy's measured tokens per second against plain steps.
 *
 * Start: a plain step first (c0), then a one-proposal probe (c1, and acceptance from a weak
 * prior), so the first judgement comes after two steps. Re-probes wait at least twice as long
 * each time, and long enough that probing costs about 2% of the time (a probe's cost beyond
 * plain decoding is measured). A spec handle passes what one sequence
 * learned (costs, acceptance, probe interval) to the next sequence with the same policy, which
 * starts from it and keeps adapting with its own evidence (older evidence is down-weighted).
 * All decisions are deterministic functions of the observations fed in (tests feed synthetic
 * timings). */
#ifndef SPECD_SESSION_ADAPTIVE_H
#define SPECD_SESSION_ADAPTIVE_H

#include <stdint.h>

/* What is learned; carried from sequence to sequence. Weights count observations. */
typedef struct specd_adaptive_model {
    double ns_plain, w_plain; /* plain step cost c0 */
    double ns_prop, w_prop;   /* chain: marginal cost c1 of one proposal */
    double acc_hit, acc_try;  /* chain: proposals accepted / examined (decayed counts) */
    double ns_self, tok_self, w_self; /* self-speculative: a policy step's cost and tokens */
    int32_t probe_every;      /* plain steps between probes while speculation does not pay */
    double probe_wait;        /* the least spacing the last probe's cost asks for */
} specd_adaptive_model;

typedef struct specd_adaptive {
    int enabled;
    int self_spec;     /* on/off guard for policies that lay out their own steps */
    int32_t max_draft;
    specd_adaptive_model m;
    int32_t step_k;    /* budget handed out for the step in flight */
    int drafting;      /* the current judgement: speculation pays */
    int judged;        /* a judgement has been made */
    int32_t since_plain;  /* policy steps since the last plain step */
    int32_t since_probe;  /* plain steps since the last probe */
    int32_t probe_left;   /* self-speculative probe: policy steps still to run */
    int probing;          /* the steps in flight are a probe */
    int probe_retry;      /* ... after a back-off (its interval doubles) */
    double probe_excess;  /* its cost beyond plain decoding of its tokens, in plain steps */
    int64_t n_backoffs;   /* times the guard turned drafting off */
    int64_t n_plain_steps; /* steps the guard ran without proposals */
} specd_adaptive;

/* prior may be NULL (nothing learned yet). */
void specd_adaptive_init(specd_adaptive *g, int enabled, int self_spec, int32_t max_draft,
                         const specd_adaptive_model *prior);
/* Proposals the next step may make; 0 = a plain step. For self-speculative policies any value
 * > 0 means "let the policy lay out its step". Must be followed by one observe. */
int32_t specd_adaptive_budget(specd_adaptive *g);
/* Records the step laid out after the last budget call: proposals verified, of which accepted,
 * tokens emitted, and its cost: a lone sequence's wall time from layout to the end of
 * verification, or a batched sequence's share of its batch (session/batch_cost.h). */
void specd_adaptive_observe(specd_adaptive *g, int32_t n_drafted, int32_t n_accepted,
                            int32_t n_emitted, uint64_t step_ns);

/* The chain mode's expected tokens per second relative to plain decoding at its best k
 * (written to *best_k), from the current model; 0 when it has no estimate yet. */
double specd_adaptive_best_ratio(const specd_adaptive *g, int32_t *best_k);

#endif
