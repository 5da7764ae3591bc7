/* One verifier interface for the session's sequences: a small backend table chosen when a
 * sequence opens, through which specd_spec_seq_verify_step decides every drafter-shaped step
 * (a drafter's chain or tree, a self-speculative policy's plain step) with one call.
 *
 *   cpu     the acceptance engine (verifier/accept/) on host rows (session/spec_logits.h copies
 *           and checks them first);
 *   device  the device kernel (verifier/device/, kernels/cuda/verify.cu) where CUDA logits lie,
 *           the cpu backend where the kernel cannot take the step (session/spec_device.h);
 *   remote  a specd-verifier daemon (verifier/remote/): through its CUDA IPC pool, then through
 *           host memory, then the cpu backend, committing what was decided here.
 *
 * All three make the engine's decisions bit for bit, so the output does not depend on which
 * one decided. A self-speculative policy's own steps are verified by the policy (its verify
 * slots), not here. Not a public header. */
#ifndef SPECD_SESSION_SPEC_VERIFIER_H
#define SPECD_SESSION_SPEC_VERIFIER_H

#include "session/spec_internal.h"

struct spec_verifier_ops {
    const char *name;
    /* The sequence opens (prompt given, policy created) and closes; NULL = nothing to do. An
     * error from open fails the sequence's open. */
    specd_status (*open)(specd_spec *spec, spec_seq *q, const int32_t *prompt, int64_t n_prompt,
                         const specd_seq_params *p, specd_error *err);
    void (*close)(specd_spec *spec, spec_seq *q);
    /* Decides q's laid-out step from rows [row0, row0 + q->n_step_rows) of lg: *out (its
     * emitted tokens and keep list in q's arrays), *rows the host rows the decision read (NULL
     * when it was decided where the logits lie). decided: what a batch's device launch made of
     * the step (session/spec_device.h), or NULL; only the device backend is handed one. */
    specd_status (*verify)(specd_spec *spec, spec_seq *q, const specd_logits *lg, int32_t row0,
                           const spec_decided *decided, specd_step_outcome *out,
                           const float **rows, specd_error *err);
};

extern const spec_verifier_ops specd_verifier_cpu;
extern const spec_verifier_ops specd_verifier_device;
extern const spec_verifier_ops specd_verifier_remote;

/* The backend a sequence opened with params p verifies with: remote when the spec has a
 * verifier daemon, device where the kernel takes the sequence's rule, else cpu. */
const spec_verifier_ops *specd_spec_verifier_choose(const specd_spec *spec,
                                                    const specd_seq_params *p);

/* Shared by the backends and the session. */
/* q's scored rows as the engine reads them (f32 host rows, masks floored; the row processors'
 * output when q has processors): *rows. */
specd_status specd_spec_seq_host_rows(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                      int32_t row0, const float **rows, specd_error *err);
/* A drafter-shaped step's outcome from q->emitted: keep the pending row and accepted drafts. */
void specd_spec_chain_outcome(spec_seq *q, int32_t n_emitted, int32_t n_accepted, int lossy,
                              specd_step_outcome *out);

#endif
