/* The exact reference of SimSD's one-pass verification (policy/dlm/simsd.c): the target's
 * distribution at each draft step computed both ways for one drafted block -
 *  - one pass: the paired D / D~ rows under eq. (1) (policy/dlm/simsd_layout.h), p^(r) read at
 *    D~_{o_r};
 *  - sequential replay: one forward per draft step r over the block as it stood then (the
 *    slots decided before, drafts o_1..o_{r-1} as tokens, the rest masks; bidirectional, as the
 *    target decodes), read at slot o_r.
 * With a one-layer target the two agree up to float summation order (attention at layer 0 sees
 * exactly the same keys); deeper, the mask rows' hidden states mix in the data rows they see
 * (the paper's "higher order interactions", §4.3), which is what tests/policy/dlm/test_simsd_model.c
 * and bench/simsd measure. Internal to libspecd. */
#ifndef SPECD_POLICY_SIMSD_REPLAY_H
#define SPECD_POLICY_SIMSD_REPLAY_H

#include "policy/dlm/simsd_drafter.h"
#include "specd/runtime.h"

typedef struct specd_simsd_replay_input {
    specd_context *target;  /* seq 0 holds history[0..n-1); LoRA set when gates are used */
    int use_lora;           /* gate the block rows */
    const float *mask_vec;  /* n_embd, or NULL: the mask token's embedding */
    int32_t n_embd, mask_id, n_vocab, b;
    const int32_t *history; /* n tokens; the block's slot 0 is at logical position n */
    int64_t n;
    const int32_t *block;   /* b: the block before the draft (-1 = mask), or NULL: all masks */
    const specd_simsd_draft *draft; /* token / tau / order / gamma */
    int rope_copy;
} specd_simsd_replay_input;

/* onepass and sequential: gamma rows of n_vocab each, row r = draft step r (either may be NULL).
 * Leaves the target's cache as it found it. */
specd_status specd_simsd_replay(const specd_simsd_replay_input *in, float *onepass,
                                float *sequential, specd_error *err);

/* KL(softmax(p) || softmax(q)) at temperature 1 (nats), in double; *top1_agree (may be NULL)
 * says whether the two argmaxes (lowest id on ties) are the same token. The measure of the paper's
 * Figs. 3-4: p the sequential (or the drafter's) distribution, q the one-pass verification's. */
double specd_simsd_kl_logits(const float *p, const float *q, int32_t n_vocab, int *top1_agree);

#endif
