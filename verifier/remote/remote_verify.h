/* The remote verifier client: verification by a specd-verifier daemon for a spec session
 * (specd_spec_params.verifier_*; the session's remote backend, session/spec_verifier.h): one ipc
 * client and one shared-memory logits buffer per spec. A drafting step's target logits (and, under
 * REJECTION with a sampling drafter, its draft distributions q, which go with them as Verify.q) are
 * copied into the buffer (or written there by the host: specd_spec_verifier_logits) and the daemon
 * decides; tokens decided here (plain steps, and every step the daemon cannot answer) are committed
 * to it so its history, which gives the sampling positions, stays the sequence's. The daemon and
 * the session run the same keyed acceptance engine, so the output does not depend on which of them
 * decided. */
#ifndef SPECD_VERIFIER_REMOTE_REMOTE_VERIFY_H
#define SPECD_VERIFIER_REMOTE_REMOTE_VERIFY_H

#include "specd/spec.h"
#include "specd/spec_batch.h"

typedef struct specd_rverify specd_rverify;

/* Connects. A daemon that is not up yet, or that refuses our vocabulary/tokenizer (a dead peer,
 * with a warning), is not an error: steps are decided here until a matching one answers. A
 * malformed endpoint is. */
specd_status specd_rverify_create(const specd_spec_params *sp, specd_rverify **out,
                                  specd_error *err);
void specd_rverify_destroy(specd_rverify *r);

/* The shared buffer: max_draft + 1 rows of n_vocab floats (then room for max_draft q rows,
 * which the session does not write). */
float *specd_rverify_logits(const specd_rverify *r);

/* Checks that the sequence's setup can be verified remotely (no logit bias, no relaxed
 * rejection) and opens it there. */
specd_status specd_rverify_open(specd_rverify *r, int32_t seq, const int32_t *prompt,
                                int64_t n_prompt, const specd_seq_params *p, specd_error *err);
void specd_rverify_close(specd_rverify *r, int32_t seq);

/* Verifies k >= 1 drafts against (k + 1) rows of logits, and under REJECTION the k rows of q
 * (host memory, n_vocab floats each: the distributions the drafts were sampled from) when the
 * drafter sampled them, else NULL (a deterministic drafter). SPECD_OK with the outcome, or an
 * error (daemon down, slow, or refusing, a q row it finds bad included): nothing was decided and
 * the caller decides locally, then commits. The daemon's answer is checked (accepted tokens are
 * the drafts, ids in range) before it is used: an impossible outcome, or a token that is not the
 * keyed sample of its row under the sequence's seed and position (a daemon holding another
 * history), takes the sequence off the daemon with a warning, and it is verified in-process from
 * then on (an error is returned for this step, which the caller decides itself). REJECTION at
 * T > 0 draws its last token from the residual of p and q, not the keyed sample: those answers
 * get the outcome check only. *fatal is kept for callers, always 0. */
specd_status specd_rverify_chain(specd_rverify *r, int32_t seq, uint64_t step,
                                 const int32_t *draft, int32_t k, const float *logits,
                                 const float *q, int32_t *emitted, int32_t *n_emitted,
                                 int32_t *n_accepted, int *fatal, specd_error *err);
/* Row i of a step's logits as the engine reads it (specd_rverify_chain_device's keyed check). */
typedef specd_status (*specd_rverify_row_reader)(void *ctx, uint32_t i, const float **row,
                                                 specd_error *err);

/* specd_rverify_chain for logits on a CUDA device (lg->device == SPECD_DEVICE_CUDA, rows [row0,
 * row0 + k + 1)), verified by a specd-verifier --device cuda where they lie: the rows are copied
 * device to device into one reusable CUDA IPC pool (made on the device the spec params name, else
 * 0, and attached once; the daemon opens it once; one allocation, never freed while the daemon maps
 * it), q's k rows (REJECTION with a sampling drafter; else NULL) beside them (host to device, or
 * device to device when q_on_device: rows on the same CUDA device), the pool's interprocess event
 * is recorded, and the Verify carries (offset, shape, dtype, seq) into it for the logits and for q.
 * The keyed check reads the one row it needs through read_row (the caller's logits intake of row
 * row0 + i of lg: n_vocab finite f32 on the host, masks floored, valid until the next call). An
 * error means nothing was decided: the caller takes the host path (specd_rverify_chain, then
 * in-process). A daemon that refuses the pool (no --device, another device, no kernel library)
 * turns the pool off for this spec, said once; a step the daemon's kernel refuses for its own rows
 * (SPECD_E_NUMERIC: a logits row, or a q row that is not a distribution or gives its draft 0, named
 * in the message) leaves the pool on. Steps the kernel cannot take (trees, more than 32 drafts) are
 * never sent. */
specd_status specd_rverify_chain_device(specd_rverify *r, int32_t seq, uint64_t step,
                                        const int32_t *draft, int32_t k, const specd_logits *lg,
                                        int32_t row0, specd_rverify_row_reader read_row,
                                        void *read_ctx, const float *q, int q_on_device,
                                        int32_t *emitted, int32_t *n_emitted,
                                        int32_t *n_accepted, specd_error *err);
/* Steps verified through the CUDA IPC pool in this process (tests assert the path ran). */
uint64_t specd_rverify_cuda_steps(void);

/* Tokens the session decided itself. Failures to reach the daemon are absorbed: the client keeps
 * them and replays them on reconnect. */
void specd_rverify_commit(specd_rverify *r, int32_t seq, const int32_t *tokens, int32_t n);

#endif
