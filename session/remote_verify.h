/* Verification by a specd-verifier daemon for a spec session (specd_spec_params.verifier_*):
 * one ipc client and one shared-memory logits buffer per spec. A drafting step's target logits
 * are copied into the buffer (or written there by the host: specd_spec_verifier_logits) and the
 * daemon decides; tokens decided here (plain steps, and every step the daemon cannot answer) are
 * committed to it so its history, which gives the sampling positions, stays the sequence's. The
 * daemon and the session run the same keyed acceptance engine, so the output does not depend on
 * which of them decided. */
#ifndef SPECD_POLICY_REMOTE_VERIFY_H
#define SPECD_POLICY_REMOTE_VERIFY_H

#include "specd/spec.h"

typedef struct specd_rverify specd_rverify;

/* Connects. A daemon that is not up yet, or that refuses our vocabulary/tokenizer (a dead peer,
 * with a warning), is not an error: steps are decided here until a matching one answers. A
 * malformed endpoint is. */
specd_status specd_rverify_create(const specd_spec_params *sp, specd_rverify **out,
                                  specd_error *err);
void specd_rverify_destroy(specd_rverify *r);

/* The shared buffer: max_draft + 1 rows of n_vocab floats. */
float *specd_rverify_logits(const specd_rverify *r);

/* Checks that the sequence's setup can be verified remotely and opens it there. */
specd_status specd_rverify_open(specd_rverify *r, int32_t seq, const int32_t *prompt,
                                int64_t n_prompt, const specd_seq_params *p, specd_error *err);
void specd_rverify_close(specd_rverify *r, int32_t seq);

/* Verifies k >= 1 drafts against (k + 1) rows of logits. SPECD_OK with the outcome, or an error
 * (daemon down, slow, or refusing): nothing was decided and the caller decides locally, then
 * commits. The daemon's answer is checked (accepted tokens are the drafts, ids in range) before
 * it is used: an impossible outcome, or a token that is not the keyed sample of its row under
 * the sequence's seed and position (a daemon holding another history), takes the sequence off
 * the daemon with a warning, and it is verified in-process from then on (an error is returned
 * for this step, which the caller decides itself). *fatal is kept for callers, always 0. */
specd_status specd_rverify_chain(specd_rverify *r, int32_t seq, uint64_t step,
                                 const int32_t *draft, int32_t k, const float *logits,
                                 int32_t *emitted, int32_t *n_emitted, int32_t *n_accepted,
                                 int *fatal, specd_error *err);
/* Tokens the session decided itself. Failures to reach the daemon are absorbed: the client keeps
 * them and replays them on reconnect. */
void specd_rverify_commit(specd_rverify *r, int32_t seq, const int32_t *tokens, int32_t n);

#endif
