/* Device verification of a step from CUDA logits (session/spec_device.h). */
#include "session/spec_device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"

struct specd_device_verify {
    const specd_cuda_kernels *k;
    const specd_cudart *rt;
    void *out;     /* device: one specd_cuda_verify_out */
    void *scratch; /* device: specd_cuda_verify_scratch_bytes(1) */
    int unavailable;
};

static atomic_uint_fast64_t n_device_steps;
static atomic_int warned_unavailable;

uint64_t specd_device_verify_count(void) { return (uint64_t)atomic_load(&n_device_steps); }

void specd_device_verify_free(specd_device_verify *d) {
    if (!d) return;
    if (d->rt) {
        if (d->out) d->rt->free(d->out);
        if (d->scratch) d->rt->free(d->scratch);
    }
    specd_free(d);
}

/* The kernel library and buffers, or d->unavailable with the reason said once per process. */
static void open_device(specd_device_verify *d) {
    specd_error e;
    const char *why = NULL;
    d->k = specd_cuda_kernels_get(&e);
    if (!d->k)
        why = e.message;
    else if (d->k->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof d->k->verify ||
             !d->k->verify)
        why = "the kernel library predates the verify kernel";
    else if (!(d->rt = specd_cudart_get(&e)))
        why = e.message;
    else if (d->rt->malloc(&d->out, sizeof(specd_cuda_verify_out)) != SPECD_CUDA_SUCCESS ||
             d->rt->malloc(&d->scratch, specd_cuda_verify_scratch_bytes(1)) !=
                 SPECD_CUDA_SUCCESS) {
        (void)d->rt->get_last_error();
        why = "no device memory for its buffers";
    }
    if (!why) return;
    d->unavailable = 1;
    if (!atomic_exchange(&warned_unavailable, 1))
        specd_log(SPECD_LOG_WARN,
                  "spec: CUDA logits are copied to the host and verified there: the device "
                  "verify kernel is unavailable (%s) (said once per process)", why);
}

static int eligible(const spec_seq *q, const specd_logits *lg) {
    if (lg->device != SPECD_DEVICE_CUDA) return 0;
    if (!(q->ops->propose || q->plain_step) || q->tree || q->has_q) return 0;
    if (q->rule != SPECD_ACCEPT_GREEDY && q->rule != SPECD_ACCEPT_COUPLED) return 0;
    if (q->sampling.top_p != 1.0f || q->sampling.n_bias != 0) return 0;
    if (q->n_draft > SPECD_CUDA_VERIFY_MAX_K || q->n_step_rows != q->n_draft + 1) return 0;
    for (int32_t r = 0; r < q->n_step_rows; r++)
        if (q->step_gated[r]) return 0;
    const char *force = getenv("SPECD_CUDA_VERIFY");
    return !(force && strcmp(force, "host") == 0);
}

specd_status specd_spec_device_verify(specd_device_verify **dev, spec_seq *q, int32_t n_vocab,
                                      const specd_logits *lg, int32_t row0, int *done,
                                      int32_t *n_emitted, int32_t *n_accepted,
                                      specd_error *err) {
    *done = 0;
    if (!lg || !lg->data || !eligible(q, lg)) return SPECD_OK;
    if (lg->dtype != SPECD_DTYPE_F32 && lg->dtype != SPECD_DTYPE_F16 &&
        lg->dtype != SPECD_DTYPE_BF16)
        return SPECD_OK; /* the copy path refuses it with its message */
    if (lg->row_stride < n_vocab || row0 < 0 || (int64_t)row0 + q->n_step_rows > lg->n_rows)
        return SPECD_OK;
    if (!*dev) {
        *dev = specd_alloc_array(1, sizeof **dev);
        if (!*dev) return specd_fail(err, SPECD_E_NOMEM, "spec: device verify state");
        open_device(*dev);
    }
    specd_device_verify *d = *dev;
    if (d->unavailable) return SPECD_OK;

    specd_cuda_verify_seq s;
    memset(&s, 0, sizeof s);
    s.rule = q->rule == SPECD_ACCEPT_GREEDY ? SPECD_CUDA_VERIFY_GREEDY : SPECD_CUDA_VERIFY_COUPLED;
    s.temperature = q->sampling.temperature;
    s.top_k = q->sampling.top_k;
    s.top_p = 1.0f;
    s.min_p = q->sampling.min_p;
    s.seed = q->key.seed;
    s.sequence = q->key.sequence;
    s.k = q->n_draft;
    for (int32_t i = 0; i < q->n_draft; i++) s.draft[i] = q->draft[i];
    for (int32_t i = 0; i <= q->n_draft; i++) {
        s.row[i] = row0 + i;
        s.pos[i] = (uint32_t)q->n_history + (uint32_t)i;
    }
    specd_cuda_verify_args a = {.logits = lg->data, .dtype = (int32_t)lg->dtype,
                                .row_stride = lg->row_stride, .n_rows = lg->n_rows,
                                .n_vocab = n_vocab, .mask_at = specd_dtype_lowest(lg->dtype),
                                .n_seqs = 1, .seqs = &s, .out = d->out, .scratch = d->scratch,
                                .scratch_bytes = specd_cuda_verify_scratch_bytes(1)};
    int rc = d->k->verify(&a, NULL);
    if (rc == SPECD_CUDA_E_ARGUMENT) return SPECD_OK; /* not a step for the device after all */
    specd_cuda_verify_out o;
    if (rc == SPECD_CUDA_OK)
        rc = d->rt->memcpy(&o, d->out, sizeof o, SPECD_CUDA_MEMCPY_DEVICE_TO_HOST);
    if (rc != SPECD_CUDA_OK) {
        (void)d->rt->get_last_error();
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: sequence %d: verifying on the CUDA "
                          "device failed: %s", (int)q->id, d->rt->get_error_string(rc));
    }
    if (o.status != SPECD_CUDA_VERIFY_OK) return SPECD_OK; /* the copy path says what is wrong */
    memcpy(q->emitted, o.tokens, (size_t)o.n_emitted * sizeof *q->emitted);
    *n_emitted = o.n_emitted;
    *n_accepted = o.n_accepted;
    *done = 1;
    atomic_fetch_add(&n_device_steps, 1);
    return SPECD_OK;
}
