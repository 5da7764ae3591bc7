/* The verifier a self-speculative policy builds for its sequence (isd, mrp, wedlm, simsd, sdar):
 * the acceptance engine with the sequence's rule, sampling transform and relaxed tau, and the
 * target's own sampler - the draw plain decoding makes at a position, greedy when the rule is. */
#ifndef SPECD_POLICY_SEQ_VERIFIER_H
#define SPECD_POLICY_SEQ_VERIFIER_H

#include "specd/policy.h"

/* Chains of up to max_k drafts. *accept and *target are the caller's (also after a failure:
 * whichever was made is set, the other NULL). */
specd_status specd_seq_verifier_create(const specd_policy_env *env, int32_t max_k,
                                       specd_accept **accept, specd_sampler **target,
                                       specd_error *err);

#endif
