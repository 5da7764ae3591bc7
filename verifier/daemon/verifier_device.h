/* specd-verifier --device cuda[:N]: a Verify whose target logits lie in a CUDA IPC buffer is
 * decided where they lie, by the device acceptance kernel (kernels/cuda/verify.cu), which makes
 * the CPU engine's decisions bit for bit. The steps taken there: a chain (no tree), GREEDY,
 * COUPLED, or REJECTION with the drafter's distributions (Verify.q: f32 [k, vocab] in a CUDA IPC
 * buffer on this device, usually the host's pool beside the logits) or without them (a
 * deterministic drafter), any temperature / top-k / top-p / min-p, at most
 * SPECD_CUDA_VERIFY_MAX_K drafts, f32/f16/bf16 logits rows. Anything else is refused before any
 * CUDA call (specd_verifier_device_plan, plain C) with a readable SPECD_E_UNSUPPORTED (or
 * SPECD_E_PROTOCOL for a q reference that cannot be the draft's rows): the host then verifies
 * the step itself. */
#ifndef SPECD_VERIFIER_DAEMON_DEVICE_H
#define SPECD_VERIFIER_DAEMON_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/buffer.h"
#include "ipc/seq_store.h"
#include "kernels/cuda/verify_plan.h"
#include "specd/status.h"

typedef struct specd_verifier_device specd_verifier_device;

/* Loads the kernel library and the runtime, selects `device` and allocates the kernel's output
 * and scratch. SPECD_E_UNSUPPORTED saying why when any of it is missing. */
specd_status specd_verifier_device_open(int device, specd_verifier_device **out, specd_error *err);
void specd_verifier_device_close(specd_verifier_device *d);

/* The kernel's description of one Verify of sequence q (its history length is the key position
 * of the first draft), or a refusal saying what the device cannot do. logits: the resolved view
 * ([k + 1, vocab]); tree: the request carries parents; qv: its resolved q view, or NULL (the
 * planned step reads qv->data on the device). */
specd_status specd_verifier_device_plan(const specd_seq *q, uint64_t seq_id,
                                        const specd_ipc_view *logits, uint32_t vocab,
                                        const uint32_t *draft, size_t k, int tree,
                                        const specd_ipc_view *qv, specd_cuda_verify_seq *s,
                                        specd_error *err);

/* Runs the planned step on the logits view (device memory, after the owner's event): tokens
 * (room for k + 1), *n_emitted, *n_accepted. A row the kernel refuses (NaN, +inf, everything
 * masked; or a q row that is not a distribution or gives its draft 0) is SPECD_E_NUMERIC naming
 * the row; a CUDA failure SPECD_E_IO naming it. */
specd_status specd_verifier_device_chain(specd_verifier_device *d, const specd_cuda_verify_seq *s,
                                         const specd_ipc_view *logits, uint32_t vocab,
                                         int32_t *tokens, int32_t *n_emitted, int32_t *n_accepted,
                                         specd_error *err);

/* Steps decided on the device by this process. */
uint64_t specd_verifier_device_steps(const specd_verifier_device *d);

#endif
