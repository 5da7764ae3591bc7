/* Device verification of steps from CUDA logits (session/spec_device.h): what a sequence's step
 * is to the kernel, its q and bias rows on the device, the batch's launch; the kernel itself is
 * run by the device verify driver (verifier/device/device_verify.h). */
#include "session/spec_device.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "verifier/device/device_verify.h"
#include "session/spec_verifier.h"
#include "verifier/accept/accept_bias.h"

struct specd_device_verify {
    specd_verify_device *drv; /* the kernel, its runtime and buffers (verifier/device/) */
    const specd_cudart *rt;
    int32_t cap_seqs;  /* sequences the host arrays below hold */
    float *q;          /* device: cap_q floats of q rows, or NULL */
    size_t cap_q;
    specd_cuda_verify_seq *seqs;      /* host: cap_seqs */
    specd_cuda_verify_out *host_out;  /* host: cap_seqs */
    int32_t *batch_at;                /* host: cap_seqs, a launched sequence's batch entry */
    int unavailable;
    /* the dense logit bias of each biased sequence, by sequence id (session/spec_device.h) */
    struct seq_bias *bias;
    int32_t cap_bias;
    float *bias_stage; /* host: n_vocab floats, the dense row being built */
    int32_t stage_vocab;
};

/* A sequence's dense bias on the device, and the sparse list it was built from: rebuilt and
 * uploaded only when the sequence's list differs (a sequence opened again under the same id). */
struct seq_bias {
    float *dev;                  /* device: n_vocab floats */
    int32_t n_vocab;
    specd_logit_bias *list;      /* host copy of the engine's list */
    size_t n;
};

static atomic_uint_fast64_t n_device_steps, n_device_launches, n_bias_uploads;
static atomic_int warned_unavailable;

uint64_t specd_device_verify_count(void) { return (uint64_t)atomic_load(&n_device_steps); }
uint64_t specd_device_verify_launches(void) { return (uint64_t)atomic_load(&n_device_launches); }
uint64_t specd_device_verify_bias_uploads(void) {
    return (uint64_t)atomic_load(&n_bias_uploads);
}

static void free_buffers(specd_device_verify *d) {
    if (d->rt && d->q) d->rt->free(d->q);
    d->q = NULL;
    d->cap_q = 0;
    specd_free(d->seqs);
    specd_free(d->host_out);
    specd_free(d->batch_at);
    d->seqs = NULL;
    d->host_out = NULL;
    d->batch_at = NULL;
    d->cap_seqs = 0;
}

static void free_bias(specd_device_verify *d) {
    for (int32_t i = 0; i < d->cap_bias; i++) {
        if (d->bias[i].dev && d->rt) d->rt->free(d->bias[i].dev);
        specd_free(d->bias[i].list);
    }
    specd_free(d->bias);
    specd_free(d->bias_stage);
    d->bias = NULL;
    d->bias_stage = NULL;
    d->cap_bias = d->stage_vocab = 0;
}

void specd_device_verify_free(specd_device_verify *d) {
    if (!d) return;
    free_buffers(d);
    free_bias(d);
    specd_verify_device_close(d->drv);
    specd_free(d);
}

/* Buffers for n sequences (grown, never shrunk); 0 when memory runs out. */
static int reserve_seqs(specd_device_verify *d, int32_t n) {
    if (n <= d->cap_seqs) return 1;
    free_buffers(d);
    d->seqs = specd_alloc_array((size_t)n, sizeof *d->seqs);
    d->host_out = specd_alloc_array((size_t)n, sizeof *d->host_out);
    d->batch_at = specd_alloc_array((size_t)n, sizeof *d->batch_at);
    if (!d->seqs || !d->host_out || !d->batch_at || !specd_verify_device_reserve(d->drv, n)) {
        free_buffers(d);
        return 0;
    }
    d->cap_seqs = n;
    return 1;
}

static int reserve_q(specd_device_verify *d, size_t floats) {
    if (floats <= d->cap_q) return 1;
    if (d->q) d->rt->free(d->q);
    d->q = NULL;
    d->cap_q = 0;
    void *p = NULL;
    if (d->rt->malloc(&p, floats * sizeof(float)) != SPECD_CUDA_SUCCESS) {
        (void)d->rt->get_last_error();
        return 0;
    }
    d->q = p;
    d->cap_q = floats;
    return 1;
}

/* The kernel library and buffers, or d->unavailable with the reason said once per process. */
static void open_device(specd_device_verify *d) {
    specd_error e;
    const char *why = NULL;
    if (specd_verify_device_open(-1, 1, &d->drv, &e) != SPECD_OK) {
        why = e.message;
    } else {
        d->rt = specd_verify_device_runtime(d->drv);
        if (!reserve_seqs(d, 1)) why = "no memory for its buffers";
    }
    if (!why) return;
    d->unavailable = 1;
    if (!atomic_exchange(&warned_unavailable, 1))
        specd_log(SPECD_LOG_WARN,
                  "spec: CUDA logits are copied to the host and verified there: the device "
                  "verify kernel is unavailable (%s) (said once per process)", why);
}

static specd_device_verify *device_of(specd_device_verify **dev, specd_error *err) {
    if (!*dev) {
        *dev = specd_alloc_array(1, sizeof **dev);
        if (!*dev) {
            specd_fail(err, SPECD_E_NOMEM, "spec: device verify state");
            return NULL;
        }
        open_device(*dev);
    }
    return *dev;
}

/* q's dense bias on the device (*out; NULL when q has none), built from the engine's own list
 * (verifier/accept/accept_bias.h) as verifier/accept/xform.c applies it: the kernel adds bias[x]
 * to the masked logit of every token, the engine adds the value of each listed token (no token
 * twice: the engine refuses duplicates when the sequence opens), -inf banning. Tokens without a
 * value get -0.0f, not 0.0f: l + -0.0f is l for every float l, while l + 0.0f would turn a -0.0
 * logit into +0.0. Uploaded when the sequence's list first differs from the one on the device,
 * not per step. 0 when memory or the upload fails (the copy path decides). */
static int bias_of(specd_device_verify *d, const spec_seq *q, int32_t n_vocab, const float **out) {
    const specd_logit_bias *list;
    size_t n;
    *out = NULL;
    specd_accept_bias(q->accept, &list, &n);
    if (n == 0) return 1;
    if (q->id < 0) return 0;
    if (q->id >= d->cap_bias) {
        struct seq_bias *grown = specd_alloc_array((size_t)q->id + 1, sizeof *grown);
        if (!grown) return 0;
        if (d->cap_bias) memcpy(grown, d->bias, (size_t)d->cap_bias * sizeof *grown);
        specd_free(d->bias);
        d->bias = grown;
        d->cap_bias = q->id + 1;
    }
    struct seq_bias *b = &d->bias[q->id];
    if (b->dev && b->n_vocab == n_vocab && b->n == n &&
        memcmp(b->list, list, n * sizeof *list) == 0) {
        *out = b->dev;
        return 1;
    }
    b->n = 0; /* rebuilt below: nothing matches until it is uploaded */
    if (b->dev && b->n_vocab != n_vocab) {
        d->rt->free(b->dev);
        b->dev = NULL;
    }
    if (!b->dev) {
        void *p = NULL;
        if (d->rt->malloc(&p, (size_t)n_vocab * sizeof(float)) != SPECD_CUDA_SUCCESS) {
            (void)d->rt->get_last_error();
            return 0;
        }
        b->dev = p;
        b->n_vocab = n_vocab;
    }
    specd_free(b->list);
    b->list = specd_alloc_array(n, sizeof *list);
    if (d->stage_vocab < n_vocab) {
        specd_free(d->bias_stage);
        d->bias_stage = specd_alloc_array((size_t)n_vocab, sizeof(float));
        d->stage_vocab = d->bias_stage ? n_vocab : 0;
    }
    if (!b->list || !d->bias_stage) return 0;
    for (int32_t x = 0; x < n_vocab; x++) d->bias_stage[x] = -0.0f;
    for (size_t i = 0; i < n; i++) {
        if (list[i].token < 0 || list[i].token >= n_vocab) return 0; /* the engine refuses it */
        d->bias_stage[list[i].token] = list[i].bias;
    }
    if (d->rt->memcpy(b->dev, d->bias_stage, (size_t)n_vocab * sizeof(float),
                      SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) != SPECD_CUDA_SUCCESS) {
        (void)d->rt->get_last_error();
        return 0;
    }
    memcpy(b->list, list, n * sizeof *list);
    b->n = n;
    atomic_fetch_add(&n_bias_uploads, 1);
    *out = b->dev;
    return 1;
}

static int eligible(const spec_seq *q, const specd_logits *lg) {
    if (lg->device != SPECD_DEVICE_CUDA) return 0;
    if (!(q->ops->propose || q->plain_step)) return 0;
    if (q->rule != SPECD_ACCEPT_GREEDY && q->rule != SPECD_ACCEPT_COUPLED &&
        q->rule != SPECD_ACCEPT_REJECTION)
        return 0;
    if (q->tau != 0.0f && q->rule != SPECD_ACCEPT_REJECTION) return 0; /* the engine refuses it */
    if (q->n_draft > SPECD_CUDA_VERIFY_MAX_K || q->n_step_rows != q->n_draft + 1) return 0;
    if (q->tree && q->n_draft < 1) return 0;
    for (int32_t r = 0; r < q->n_step_rows; r++)
        if (q->step_gated[r]) return 0;
    const char *force = getenv("SPECD_CUDA_VERIFY");
    return !(force && strcmp(force, "host") == 0);
}

/* q's step as the kernel's sequence, or 0 when it is not one for the device. qdev: where its q
 * rows go on the device (n_draft rows of n_vocab), used when it has them. */
static int describe(const spec_seq *q, int32_t n_vocab, const specd_logits *lg, int32_t row0,
                    float *qdev, specd_cuda_verify_seq *s) {
    if (!lg || !lg->data || !eligible(q, lg)) return 0;
    if (lg->dtype != SPECD_DTYPE_F32 && lg->dtype != SPECD_DTYPE_F16 &&
        lg->dtype != SPECD_DTYPE_BF16)
        return 0; /* the copy path refuses it with its message */
    if (lg->row_stride < n_vocab || row0 < 0 || (int64_t)row0 + q->n_step_rows > lg->n_rows)
        return 0;
    memset(s, 0, sizeof *s);
    s->rule = q->rule == SPECD_ACCEPT_GREEDY     ? SPECD_CUDA_VERIFY_GREEDY
              : q->rule == SPECD_ACCEPT_COUPLED ? SPECD_CUDA_VERIFY_COUPLED
                                                : SPECD_CUDA_VERIFY_REJECTION;
    s->temperature = q->sampling.temperature;
    s->top_k = q->sampling.top_k;
    s->top_p = q->sampling.top_p;
    s->min_p = q->sampling.min_p;
    s->relaxed_tau = q->tau;
    s->seed = q->key.seed;
    s->sequence = q->key.sequence;
    s->k = q->n_draft;
    s->tree = q->tree ? 1 : 0;
    for (int32_t i = 0; i < q->n_draft; i++) {
        s->draft[i] = q->draft[i];
        s->parent[i] = q->tree ? q->tree_parent[i] : 0;
    }
    /* slot i scores the position after node i - 1: the engine keys it at n_history + its depth */
    for (int32_t i = 0; i <= q->n_draft; i++) {
        uint32_t depth = 0;
        if (q->tree)
            for (int32_t v = i - 1; v >= 0; v = q->tree_parent[v]) depth++;
        else
            depth = (uint32_t)i;
        s->row[i] = row0 + i;
        s->pos[i] = (uint32_t)q->n_history + depth;
    }
    if (q->has_q && q->n_draft > 0) {
        s->draft_probs = q->q_dev ? q->q_dev : qdev; /* the drafter's rows in place */
        s->q_stride = n_vocab;
    }
    return 1;
}

/* q rows to copy to the device: none when they are there already */
static int q_rows(const spec_seq *q) { return q->has_q && !q->q_dev ? q->n_draft : 0; }

/* Launches the described sequences; SPECD_CUDA_OK with their outcomes in d->host_out. */
static int launch(specd_device_verify *d, const specd_logits *lg, int32_t n_vocab, int32_t n) {
    specd_cuda_verify_args a = {.logits = lg->data, .dtype = (int32_t)lg->dtype,
                                .row_stride = lg->row_stride, .n_rows = lg->n_rows,
                                .n_vocab = n_vocab, .mask_at = specd_dtype_lowest(lg->dtype),
                                .n_seqs = n, .seqs = d->seqs};
    int rc = specd_verify_device_run(d->drv, &a, d->host_out);
    if (rc == SPECD_CUDA_OK) atomic_fetch_add(&n_device_launches, 1);
    return rc;
}

/* Copies q's q rows to the device at qdev. */
static int put_q(specd_device_verify *d, const spec_seq *q, int32_t n_vocab, float *qdev) {
    if (!q_rows(q)) return SPECD_CUDA_OK;
    return d->rt->memcpy(qdev, q->q, (size_t)q_rows(q) * (size_t)n_vocab * sizeof(float),
                         SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
}

/* A decided step into q's arrays. */
static int take(spec_seq *q, const specd_cuda_verify_out *o, int32_t *n_emitted,
                int32_t *n_accepted) {
    if (o->status != SPECD_CUDA_VERIFY_OK) return 0; /* the copy path says what is wrong */
    memcpy(q->emitted, o->tokens, (size_t)o->n_emitted * sizeof *q->emitted);
    if (q->tree) memcpy(q->tree_path, o->path, (size_t)o->n_accepted * sizeof *q->tree_path);
    *n_emitted = o->n_emitted;
    *n_accepted = o->n_accepted;
    atomic_fetch_add(&n_device_steps, 1);
    return 1;
}

void specd_spec_device_decide_batch(specd_spec *spec, const specd_logits *lg,
                                   spec_decided *decided) {
    for (int32_t i = 0; i < spec->n_batch; i++) decided[i] = (spec_decided){SPEC_UNDECIDED, 0, 0};
    if (!spec->device) {
        if (!lg || lg->device != SPECD_DEVICE_CUDA) return;
        if (!device_of(&spec->device, NULL)) return;
    }
    specd_device_verify *d = spec->device;
    if (d->unavailable || !lg || !lg->data || lg->device != SPECD_DEVICE_CUDA || spec->rv) return;
    const int32_t n_vocab = spec->params.n_vocab;
    if (!reserve_seqs(d, spec->n_batch)) return;
    /* the batch's q rows, one region per sequence that has them */
    size_t q_floats = 0;
    for (int32_t i = 0; i < spec->n_batch; i++)
        q_floats += (size_t)q_rows(&spec->seqs[spec->batch[i].seq]) * (size_t)n_vocab;
    if (q_floats && !reserve_q(d, q_floats)) return;
    int32_t n = 0;
    size_t q_at = 0;
    for (int32_t i = 0; i < spec->n_batch; i++) {
        const specd_batch_seq *b = &spec->batch[i];
        const spec_seq *q = &spec->seqs[b->seq];
        /* the steps the device backend's own verify would take to the device */
        if (!q->open || !q->laid_out || q->step_gen != spec->batch_gen[i] ||
            q->n_step_rows < 1 || q->verifier != &specd_verifier_device || q->n_proc)
            continue;
        float *qdev = d->q ? d->q + q_at : NULL;
        if (!describe(q, n_vocab, lg, b->row_offset, qdev, &d->seqs[n])) continue;
        if (!bias_of(d, q, n_vocab, &d->seqs[n].bias)) continue;
        if (put_q(d, q, n_vocab, qdev) != SPECD_CUDA_OK) {
            (void)d->rt->get_last_error();
            return;
        }
        q_at += (size_t)q_rows(q) * (size_t)n_vocab;
        d->batch_at[n++] = i;
    }
    if (n == 0) return;
    if (launch(d, lg, n_vocab, n) != SPECD_CUDA_OK) {
        (void)d->rt->get_last_error(); /* each sequence's own launch reports it */
        return;
    }
    for (int32_t j = 0; j < n; j++) {
        spec_decided *o = &decided[d->batch_at[j]];
        spec_seq *q = &spec->seqs[spec->batch[d->batch_at[j]].seq];
        o->state = take(q, &d->host_out[j], &o->n_emitted, &o->n_accepted) ? SPEC_DECIDED
                                                                            : SPEC_TO_HOST;
    }
}

specd_status specd_spec_device_verify(specd_device_verify **dev, spec_seq *q, int32_t n_vocab,
                                      const specd_logits *lg, int32_t row0, int *done,
                                      int32_t *n_emitted, int32_t *n_accepted,
                                      specd_error *err) {
    *done = 0;
    if (!lg || !lg->data || lg->device != SPECD_DEVICE_CUDA) return SPECD_OK;
    specd_device_verify *d = *dev;
    specd_cuda_verify_seq s;
    if (!describe(q, n_vocab, lg, row0, NULL, &s)) return SPECD_OK;
    if (!(d = device_of(dev, err))) return SPECD_E_NOMEM;
    if (d->unavailable) return SPECD_OK;
    if (!bias_of(d, q, n_vocab, &s.bias)) return SPECD_OK; /* the copy path decides */
    int rc = SPECD_CUDA_OK;
    if (q_rows(q)) {
        if (!reserve_q(d, (size_t)q_rows(q) * (size_t)n_vocab))
            return specd_fail(err, SPECD_E_INVALID_ARG, "spec: sequence %d: no device memory "
                              "for its q rows", (int)q->id);
        s.draft_probs = d->q;
        rc = put_q(d, q, n_vocab, d->q);
    }
    d->seqs[0] = s;
    if (rc == SPECD_CUDA_OK) rc = launch(d, lg, n_vocab, 1);
    if (rc == SPECD_CUDA_E_ARGUMENT) return SPECD_OK; /* not a step for the device after all */
    if (rc != SPECD_CUDA_OK) {
        (void)d->rt->get_last_error();
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: sequence %d: verifying on the CUDA "
                          "device failed: %s", (int)q->id, d->rt->get_error_string(rc));
    }
    *done = take(q, &d->host_out[0], n_emitted, n_accepted);
    return SPECD_OK;
}

/* ---- the device backend of the session's verifier table (session/spec_verifier.h) ---- */

static specd_status device_backend_verify(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                          int32_t row0, const spec_decided *decided,
                                          specd_step_outcome *out, const float **rows,
                                          specd_error *err) {
    int done = decided && decided->state == SPEC_DECIDED;
    int32_t n_emitted = done ? decided->n_emitted : 0, n_accepted = done ? decided->n_accepted : 0;
    if (decided && decided->state == SPEC_TO_HOST) /* the kernel refused it: the engine says why */
        return specd_verifier_cpu.verify(spec, q, lg, row0, NULL, out, rows, err);
    if (!done && q->n_step_rows > 0 && lg && lg->device == SPECD_DEVICE_CUDA && !q->n_proc)
        SPECD_TRY(specd_spec_device_verify(&spec->device, q, spec->params.n_vocab, lg, row0,
                                           &done, &n_emitted, &n_accepted, err));
    if (!done) return specd_verifier_cpu.verify(spec, q, lg, row0, NULL, out, rows, err);
    *rows = NULL;
    /* lossy as the engine says of a drafted step under relaxed tau */
    specd_spec_chain_outcome(q, n_emitted, n_accepted, q->n_draft > 0 && q->tau > 0.0f, out);
    return SPECD_OK;
}

const spec_verifier_ops specd_verifier_device = {.name = "device",
                                                 .verify = device_backend_verify};
