/* The device path of specd-verifier (verifier/daemon/verifier_device.h): its plan of a Verify,
 * run by the device verify driver (verifier/device/device_verify.h). */
#include "verifier/daemon/verifier_device.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "verifier/device/device_verify.h"

_Static_assert((int)SPECD_IPC_F32 == SPECD_CUDA_LOGITS_F32 &&
                   (int)SPECD_IPC_F16 == SPECD_CUDA_LOGITS_F16 &&
                   (int)SPECD_IPC_BF16 == SPECD_CUDA_LOGITS_BF16,
               "wire dtypes are the kernel's logits types");

struct specd_verifier_device {
    specd_verify_device *drv; /* the kernel, its runtime and buffers (verifier/device/) */
    int device;
    uint64_t steps;
};

void specd_verifier_device_close(specd_verifier_device *d) {
    if (!d) return;
    specd_verify_device_close(d->drv);
    specd_free(d);
}

specd_status specd_verifier_device_open(int device, specd_verifier_device **out, specd_error *err) {
    specd_verifier_device *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "verifier: out of memory");
    d->device = device;
    specd_error e;
    specd_status st = specd_verify_device_open(device, 1, &d->drv, &e);
    if (st != SPECD_OK) {
        specd_free(d);
        return specd_fail(err, st, "--device cuda:%d: %s", device, e.message);
    }
    *out = d;
    return SPECD_OK;
}

specd_status specd_verifier_device_plan(const specd_seq *q, uint64_t seq_id,
                                        const specd_ipc_view *logits, uint32_t vocab,
                                        const uint32_t *draft, size_t k, int tree,
                                        const specd_ipc_view *qv, specd_cuda_verify_seq *s,
                                        specd_error *err) {
    /* q is the drafter's: a reference that cannot be its k rows is a malformed request */
    if (qv && (qv->rank != 2 || qv->shape[0] != k || qv->shape[1] != vocab))
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "verify on the device: q has shape [%llu, %llu], not [%zu draft(s), "
                          "vocab %u]",
                          (unsigned long long)(qv->rank > 0 ? qv->shape[0] : 0),
                          (unsigned long long)(qv->rank > 1 ? qv->shape[1] : 0), k, vocab);
    const char *no = NULL;
    if (tree)
        no = "draft trees";
    else if (qv && qv->dtype != SPECD_IPC_F32)
        no = "draft distributions (q) of this dtype (f32 is)";
    else if (qv && !qv->on_device)
        no = "draft distributions (q) in host memory beside logits on the device";
    else if (q->rule != SPECD_ACCEPT_GREEDY && q->rule != SPECD_ACCEPT_COUPLED &&
             q->rule != SPECD_ACCEPT_REJECTION)
        no = "this acceptance rule";
    else if (!(q->top_p > 0.0f && q->top_p <= 1.0f))
        no = "this top-p";
    else if (k == 0 || k > SPECD_CUDA_VERIFY_MAX_K)
        no = "this many drafts (1..32 are)";
    else if (logits->dtype != SPECD_IPC_F32 && logits->dtype != SPECD_IPC_F16 &&
             logits->dtype != SPECD_IPC_BF16)
        no = "logits of this dtype (f32, f16 and bf16 are)";
    else if (logits->rank != 2 || logits->shape[0] != k + 1 || logits->shape[1] != vocab ||
             vocab > INT32_MAX)
        no = "logits of this shape";
    else if (!isfinite(q->temperature) || q->temperature < 0.0f || q->min_p < 0.0f ||
             q->min_p >= 1.0f || q->top_k > INT32_MAX)
        no = "these sampling parameters";
    else if (q->n > UINT32_MAX - SPECD_CUDA_VERIFY_MAX_SLOTS)
        no = "positions past 2^32";
    if (no)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "verify on the device: the device kernel does not take %s; verify "
                          "this step in-process",
                          no);
    memset(s, 0, sizeof *s);
    /* REJECTION without q: a deterministic drafter, as the CPU engine reads a NULL q; with q,
     * the kernel reads the drafter's rows where the view lies (GREEDY and COUPLED ignore q, as
     * the engine does) */
    if (qv && q->rule == SPECD_ACCEPT_REJECTION) {
        s->draft_probs = qv->data;
        s->q_stride = (int64_t)vocab;
    }
    s->rule = q->rule == SPECD_ACCEPT_GREEDY      ? SPECD_CUDA_VERIFY_GREEDY
              : q->rule == SPECD_ACCEPT_REJECTION ? SPECD_CUDA_VERIFY_REJECTION
                                                  : SPECD_CUDA_VERIFY_COUPLED;
    s->temperature = q->temperature;
    s->top_k = (int32_t)q->top_k;
    s->top_p = q->top_p;
    s->min_p = q->min_p;
    s->seed = q->seed;
    s->sequence = (uint32_t)seq_id;
    s->k = (int32_t)k;
    for (size_t i = 0; i < k; i++) {
        if (draft[i] >= vocab)
            return specd_fail(err, SPECD_E_FORMAT, "verify: draft token %zu = %u >= vocab %u", i,
                              draft[i], vocab);
        s->draft[i] = (int32_t)draft[i];
    }
    for (size_t i = 0; i <= k; i++) {
        s->row[i] = (int32_t)i;
        s->pos[i] = (uint32_t)q->n + (uint32_t)i;
    }
    return SPECD_OK;
}

/* The dtype's lowest finite value: entries at or below it are masks (session/spec_logits.h). */
static float lowest(specd_ipc_dtype dtype) {
    if (dtype == SPECD_IPC_F16) return -65504.0f;
    if (dtype == SPECD_IPC_BF16) {
        uint32_t bits = 0xff7fu << 16;
        float f;
        memcpy(&f, &bits, sizeof f);
        return f;
    }
    return -FLT_MAX;
}

specd_status specd_verifier_device_chain(specd_verifier_device *d, const specd_cuda_verify_seq *s,
                                         const specd_ipc_view *logits, uint32_t vocab,
                                         int32_t *tokens, int32_t *n_emitted, int32_t *n_accepted,
                                         specd_error *err) {
    if (!logits->on_device)
        return specd_fail(err, SPECD_E_INTERNAL, "verify on the device: logits in host memory");
    /* specd_ipc_dtype and the kernel's logits types share their values */
    specd_cuda_verify_args a = {.logits = logits->data,
                                .dtype = (int32_t)logits->dtype,
                                .row_stride = (int64_t)vocab,
                                .n_rows = s->k + 1,
                                .n_vocab = (int32_t)vocab,
                                .mask_at = lowest(logits->dtype),
                                .n_seqs = 1,
                                .seqs = s};
    specd_cuda_verify_out o;
    int rc = specd_verify_device_run(d->drv, &a, &o);
    if (rc == SPECD_CUDA_E_ARGUMENT)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "verify on the device: %s",
                          specd_verify_device_refusal(d->drv));
    if (rc != SPECD_CUDA_SUCCESS)
        return specd_fail(err, SPECD_E_IO, "verify on CUDA device %d failed: %s", d->device,
                          specd_verify_device_error_string(d->drv, rc));
    if (o.status == SPECD_CUDA_VERIFY_BAD_Q)
        return specd_fail(err, SPECD_E_NUMERIC,
                          "verify on the device: q row %d (draft token %d) is not a "
                          "probability distribution (entries in [0, 1] summing to 1 within "
                          "1e-3) or gives its draft token probability 0",
                          (int)o.bad_row,
                          o.bad_row >= 0 && o.bad_row < s->k ? (int)s->draft[o.bad_row] : -1);
    if (o.status != SPECD_CUDA_VERIFY_OK)
        return specd_fail(err, SPECD_E_NUMERIC,
                          "verify on the device: logits row %d holds NaN or +inf, masks every "
                          "token or overflows under the transform",
                          (int)o.bad_row);
    if (o.n_accepted < 0 || o.n_accepted > s->k || o.n_emitted != o.n_accepted + 1)
        return specd_fail(err, SPECD_E_INTERNAL,
                          "verify on the device: %d of %d accepted, %d "
                          "emitted",
                          (int)o.n_accepted, (int)s->k, (int)o.n_emitted);
    memcpy(tokens, o.tokens, (size_t)o.n_emitted * sizeof *tokens);
    *n_emitted = o.n_emitted;
    *n_accepted = o.n_accepted;
    d->steps++;
    return SPECD_OK;
}

uint64_t specd_verifier_device_steps(const specd_verifier_device *d) {
    return d ? d->steps : 0;
}
