/* The session's device verifier backend (specd_verifier_device, session/spec_verifier.h):
 * verification of sequences' steps on the CUDA device their logits live on (kernels/cuda/verify.cu,
 * run by the device verify driver verifier/device/device_verify.h), without copying the logits
 * block to the host. It takes every step the acceptance engine takes for a drafter chain or tree or
 * a plain step (no remote verifier): rule GREEDY, COUPLED or REJECTION, exact or relaxed (tau > 0:
 * the outcome says lossy, as the engine's result does); temperature, top-k, top-p, min-p and the
 * logit bias (the engine's own list, verifier/accept/accept_bias.h, as a dense device row built and
 * uploaded once per sequence, -inf bans included; a token listed twice is refused when the sequence
 * opens); the drafter's q rows under every rule (copied to the device and checked there as the
 * engine checks them; read by REJECTION only). Left to the copy path (session/spec_logits.c):
 * LoRA-gated rows, more than SPECD_CUDA_VERIFY_MAX_K drafts, a self-speculative policy's own
 * verify, a machine whose kernel library does not load (said once per process), and a step the
 * kernel finds bad (a bad row or q, a row that overflows or bans every token): the copy path then
 * gives the engine's readable error. SPECD_CUDA_VERIFY=host in the environment forces the copy
 * path.
 *
 * A batch (specd/spec_batch.h) is decided in one launch: specd_spec_device_decide_batch, before
 * the batch's sequences are verified one by one, decides every eligible one together and hands
 * each its decision (spec_decided), which its verify takes without another launch. */
#ifndef SPECD_SESSION_SPEC_DEVICE_H
#define SPECD_SESSION_SPEC_DEVICE_H

#include <stdint.h>

#include "session/spec_internal.h"

typedef struct specd_device_verify specd_device_verify;

/* Tries q's laid-out step (rows [row0, row0 + q->n_step_rows) of lg) on the device, a launch of
 * its own.
 * *done = 1: decided there, q->emitted holds *n_emitted tokens, *n_accepted drafts accepted (a
 * tree's path in q->tree_path). *done = 0: the caller takes the copy path. A CUDA failure is an
 * error (SPECD_E_INVALID_ARG naming it). *dev is created on first use and freed by
 * specd_device_verify_free. */
specd_status specd_spec_device_verify(specd_device_verify **dev, spec_seq *q, int32_t n_vocab,
                                      const specd_logits *lg, int32_t row0, int *done,
                                      int32_t *n_emitted, int32_t *n_accepted, specd_error *err);
void specd_device_verify_free(specd_device_verify *dev);

/* One launch for every eligible sequence of spec's laid-out batch whose rows lg holds (CUDA
 * logits, the device backend, no row processors): decided[i] for the batch's entry i (spec->n_batch
 * entries): SPEC_DECIDED (its tokens in its q->emitted, a tree's path in q->tree_path),
 * SPEC_TO_HOST (the kernel found the step bad: the engine decides it and says what is wrong), or
 * SPEC_UNDECIDED (not launched, or any failure, which its own launch then reports). Nothing fails
 * here. */
void specd_spec_device_decide_batch(specd_spec *spec, const specd_logits *lg,
                                   spec_decided *decided);

/* Steps decided on the device so far in this process (tests assert the path was taken), and the
 * launches that decided them (a batch's steps share one). */
uint64_t specd_device_verify_count(void);
uint64_t specd_device_verify_launches(void);
/* Dense logit biases uploaded so far (one per biased sequence, again only when it reopens with
 * another list): tests assert it is not per step. */
uint64_t specd_device_verify_bias_uploads(void);

#endif
