/* The device verify driver: the one place that loads the CUDA acceptance kernel
 * (kernels/cuda/verify.cu, through the kernel library's table) and the CUDA runtime, checks
 * them, holds the kernel's output and scratch buffers, and runs a launch of described sequences
 * (specd_cuda_verify_seq) over a logits block, bringing the outcomes back to the host. Both
 * verifiers on a device use it: the session's device backend (session/spec_device.c, CUDA
 * logits of a host's batch) and specd-verifier --device cuda (verifier/daemon/verifier_device.c,
 * a Verify's rows in a CUDA IPC buffer). What a step is, and whether the kernel can take it, is
 * theirs to say; the kernel decides as the CPU engine (verifier/accept/) does, bit for bit. */
#ifndef SPECD_VERIFIER_DEVICE_DEVICE_VERIFY_H
#define SPECD_VERIFIER_DEVICE_DEVICE_VERIFY_H

#include <stdint.h>

#include "kernels/cuda/cudart.h"
#include "kernels/cuda/cuda_plan.h"
#include "kernels/cuda/verify_plan.h"
#include "specd/status.h"

typedef struct specd_verify_device specd_verify_device;

/* Loads the kernel library (with a verify kernel) and the runtime and allocates buffers for
 * cap_seqs sequences. device >= 0: that CUDA device, selected first (and again when the
 * buffers are freed); device < 0: the calling thread's current one. SPECD_E_UNSUPPORTED saying
 * why a piece is missing ("the kernel library predates the verify kernel", "1 CUDA device(s)
 * found", the loader's own message), SPECD_E_IO naming a CUDA failure. */
specd_status specd_verify_device_open(int device, int32_t cap_seqs, specd_verify_device **out,
                                      specd_error *err);
void specd_verify_device_close(specd_verify_device *d);

/* The runtime the driver loaded, for the caller's own copies (q rows, bias rows). */
const specd_cudart *specd_verify_device_runtime(const specd_verify_device *d);

/* Buffers for n sequences (grown, never shrunk); 0 when device memory runs out. */
int specd_verify_device_reserve(specd_verify_device *d, int32_t n);

/* One launch of a->n_seqs described sequences (a's logits fields and seqs set by the caller;
 * out, scratch and scratch_bytes are the driver's) on the legacy default stream, their outcomes
 * copied into host_out (a->n_seqs entries). SPECD_CUDA_OK, SPECD_CUDA_E_ARGUMENT when the kernel
 * refuses the arguments (specd_verify_device_refusal says why), else a CUDA error code (the
 * runtime's error state is cleared). */
int specd_verify_device_run(specd_verify_device *d, specd_cuda_verify_args *a,
                            specd_cuda_verify_out *host_out);
const char *specd_verify_device_refusal(const specd_verify_device *d);
const char *specd_verify_device_error_string(const specd_verify_device *d, int rc);

#endif
