/* dInfer commit rules (paper 001, App. B) over a window of masked positions: which masked slots a
 * diffusion-LM policy fills this iteration. Internal to libspecd; shared by the DLM policies
 * (wedlm.c, and the block policies later). Pure functions: no model, no allocation.
 *
 * A window is n slots in LOGICAL order (slot i+1 is the position after slot i). masked[i] != 0
 * marks the slots still undecided; only those can be chosen. Every rule guarantees at least one
 * commit per iteration while any slot is masked (the paper's "at least one per iteration"): when
 * nothing passes its test, the most confident masked slot is committed (ties: leftmost). */
#ifndef SPECD_POLICY_DLM_COMMIT_H
#define SPECD_POLICY_DLM_COMMIT_H

#include "specd/status.h"

#include <stdint.h>

/* What a rule needs to know about one position's predicted distribution. */
typedef struct specd_dlm_pos {
    int32_t token; /* top-1 token (ties: lowest id) */
    float p;       /* its probability, the "confidence" of dInfer's decoders */
    float entropy; /* H = -sum_v p(v) log p(v), nats (WeDLM eq. 11's H_i) */
} specd_dlm_pos;

/* Summary of softmax(logits) at temperature 1. Any NaN/Inf logit, or n_vocab < 1, fails with
 * SPECD_E_NUMERIC / SPECD_E_INVALID_ARG and leaves *out untouched. */
specd_status specd_dlm_pos_from_logits(const float *logits, int32_t n_vocab, specd_dlm_pos *out,
                                       specd_error *err);

/* Same from a probability row: entries must be finite, >= 0 and sum to 1 within 1e-3. */
specd_status specd_dlm_pos_from_probs(const float *probs, int32_t n_vocab, specd_dlm_pos *out,
                                      specd_error *err);

/* Threshold decoding (Fast-dLLM, dInfer App. B): commit every masked slot with p >= tau.
 * commit[i] is set to 0/1 for all n slots; *n_commit counts the ones. Fails (outputs untouched)
 * on n < 1, no masked slot, or a masked slot whose p is not a finite value in [0, 1]. */
specd_status specd_dlm_commit_threshold(const specd_dlm_pos *pos, const uint8_t *masked, int32_t n,
                                        float tau, uint8_t *commit, int32_t *n_commit,
                                        specd_error *err);

/* Hierarchical decoding (dInfer App. B.1): the masked slots split into regions, the maximal runs of
 * contiguous masked slots; in each region the most confident slot is committed when its p > tau_low
 * ("at least one token in each region ... whenever confidence permits"), every slot with
 * p > tau_high is committed as well, and the window's most confident slot always is. The paper
 * leaves the recursion implicit: committing inside a region splits it, so the next iteration sees
 * smaller regions (the paper's O(log n) argument). Defaults in the paper: tau_high 0.92,
 * tau_low 0.62 (App. D). Same contract as the threshold rule. */
specd_status specd_dlm_commit_hierarchical(const specd_dlm_pos *pos, const uint8_t *masked,
                                           int32_t n, float tau_high, float tau_low,
                                           uint8_t *commit, int32_t *n_commit, specd_error *err);

/* Early EOS termination (dInfer §2.4: "once an EOS token is generated ... fill all remaining with
 * EOS"). tokens[i] is slot i's decided token (committed or about to be), decided[i] != 0 where it
 * is. Returns the first slot, in logical order, whose decided token is one of eos[0..n_eos-1] and
 * before which every slot is decided, or -1: generation ends after that slot, and the slots after
 * it need no further iterations. A decided EOS after an undecided slot does not stop (the gap
 * could still hold an earlier EOS or text the EOS depends on). */
int32_t specd_dlm_eos_stop(const int32_t *tokens, const uint8_t *decided, int32_t n,
                           const int32_t *eos, int32_t n_eos);

#endif
