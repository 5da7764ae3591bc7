/* Verification of a sequence's step on the CUDA device its logits live on (kernels/cuda/verify.cu
 * through the kernel library's table), without copying the logits block to the host. Only steps
 * whose decisions the kernel makes bit for bit as the host path would take it: a drafter chain
 * or a plain step (no tree, no q, no remote verifier), rule GREEDY or COUPLED, no top-p, no logit
 * bias, no LoRA-gated rows, at most SPECD_CUDA_VERIFY_MAX_K drafts. Everything else, a machine
 * whose kernel library does not load (said once per process), and a step with a bad row (whose
 * readable error the host path gives) go through the copy path (session/spec_logits.c).
 * SPECD_CUDA_VERIFY=host in the environment forces the copy path. */
#ifndef SPECD_SESSION_SPEC_DEVICE_H
#define SPECD_SESSION_SPEC_DEVICE_H

#include <stdint.h>

#include "session/spec_internal.h"

typedef struct specd_device_verify specd_device_verify;

/* Tries q's laid-out step (rows [row0, row0 + q->n_step_rows) of lg) on the device. *done = 1:
 * decided there, q->emitted holds *n_emitted tokens, *n_accepted drafts accepted. *done = 0: the
 * caller takes the copy path. A CUDA failure is an error (SPECD_E_INVALID_ARG naming it).
 * *dev is created on first use and freed by specd_device_verify_free. */
specd_status specd_spec_device_verify(specd_device_verify **dev, spec_seq *q, int32_t n_vocab,
                                      const specd_logits *lg, int32_t row0, int *done,
                                      int32_t *n_emitted, int32_t *n_accepted, specd_error *err);
void specd_device_verify_free(specd_device_verify *dev);

/* Steps decided on the device so far in this process (tests assert the path was taken). */
uint64_t specd_device_verify_count(void);

#endif
