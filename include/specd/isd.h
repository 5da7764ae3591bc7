/* Introspective Strided Decoding (ISD) and Residual ISD (R-ISD): paper 000, section 3.2,
 * Algorithm 1, Appendices B, F and G. The policies themselves are in the registry under the names
 * "isd" and "risd" (specd/policy.h); this header carries what a summary needs beside them.
 *
 * Step shape with stride N (N - 1 proposals per step):
 *   propose step  [pending | MASK x (N-1)]                        N rows
 *   stride step   [pending | proposal_1 .. proposal_{N-1} | MASK x (N-1)]   2N - 1 rows
 * Strict causal attention, logit shift (the row at position j scores position j + 1). The clean
 * rows (pending + proposals) are the causal anchors that verify the proposals through the
 * acceptance engine; the mask rows make the next proposals. A rejection makes the next step a
 * propose step; all accepted adds the bonus token from the last clean row.
 *
 * Options (--policy-opts): n=STRIDE (default 3; 2N - 1 rows must fit max_draft + 1),
 * mask=ID (default: the GGUF key tokenizer.ggml.mask_token_id, else SPECD_POLICY_DEFAULT_MASK),
 * propose=argmax|sample (default argmax, the paper's choice; sample draws from the transformed
 * mask-row distribution q and hands q to REJECTION), adapter=DIR (a PEFT LoRA adapter). "isd"
 * applies the adapter to every row (the converted model everywhere: NOT lossless); "risd" gates
 * it to the mask rows only, so the clean rows run the base weights and output is identical to the
 * base model's plain decoding under the greedy and coupled rules.
 */
#ifndef SPECD_ISD_H
#define SPECD_ISD_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/policy.h"
#include "specd/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The framework's default mask token (specd/policy.h), under the name this header gave it first. */
#define SPECD_ISD_DEFAULT_MASK SPECD_POLICY_DEFAULT_MASK

/* Paper 000 eq. (5): TPF = (2 + p + ... + p^(N-2)) / (2 - p^(N-1)) for a uniform per-token
 * acceptance p in [0, 1] and stride N >= 2. Returns 0 for arguments outside those ranges. */
SPECD_API double specd_isd_tpf_uniform(double p, int32_t stride);

/* The same renewal argument (one propose step, then stride steps until the first rejection) with
 * a conditional acceptance per position: accept[i] = P(proposal i accepted | proposals 0..i-1
 * accepted), i < n = N - 1. With s_j = accept[0] * ... * accept[j-1] (s_0 = 1), S = s_n:
 *     TPF = (1 - S + s_0 + s_1 + ... + s_n) / (2 - S)
 * which is eq. (5) when every accept[i] = p. Returns 0 when n < 1 or a rate is outside [0, 1]. */
SPECD_API double specd_isd_tpf_formula(const double *accept, int32_t n);

/* Conditional acceptance per position from a sequence's stats (accepted_at / drafted_at, where
 * a position is reached only when every earlier proposal of the step was accepted) into
 * accept[0..n), n = min(max, positions drafted). Returns n. */
SPECD_API int32_t specd_isd_accept_rates(const specd_seq_stats *stats, double *accept, int32_t max);

#ifdef __cplusplus
}
#endif
#endif
