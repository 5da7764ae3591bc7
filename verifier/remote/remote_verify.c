#include "verifier/remote/remote_verify.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "kernels/cuda/cudart.h"
#include "kernels/cuda/verify_plan.h"
#include "specd/ipc.h"
#include "specd/sampling.h"

#include <stdatomic.h>
#include <string.h>

/* What the host needs to check the daemon's answers for one sequence: the keyed sample of the row
 * the daemon decided at (its emitted token there is a keyed sample under this seed and position),
 * and whether the sequence still verifies remotely. */
typedef struct rseq {
    int32_t seq;
    uint64_t seed;
    specd_sampler *sampler;
    int distrusted; /* the daemon answered inconsistently: decided here from then on */
    int device_ok;  /* rule and transform the daemon's device kernel decides */
    int sampled_check; /* its answers are checked against the keyed sample (not REJECTION at
                        * T > 0, whose tokens come from the residual or the bonus draw) */
} rseq;

struct specd_rverify {
    specd_ipc_client *client;
    rseq *seqs;
    size_t n_seqs, cap_seqs;
    specd_ipc_buffer *buf; /* max_rows logits rows, then max_rows - 1 q rows, f32 */
    int32_t n_vocab, max_rows;
    int was_down;
    uint32_t ids[SPECD_MAX_DRAFT + 1];
    specd_ipc_verify_result res;
    /* CUDA logits: the IPC pool (the layout of buf: max_rows rows of n_vocab 4-byte elements,
     * then the q rows), made and attached on first use; pool_off once it cannot be used with
     * this daemon (said once) */
    specd_ipc_buffer *pool;
    int pool_device, pool_off;
};

static atomic_uint_fast64_t n_cuda_steps;

uint64_t specd_rverify_cuda_steps(void) { return (uint64_t)atomic_load(&n_cuda_steps); }

/* Both buffers: the logits rows, then (at q_offset) room for max_draft q rows, f32. One
 * allocation, so one handle and one mapping on the daemon's side. */
static size_t q_offset(const specd_rverify *r) {
    return (size_t)r->max_rows * (size_t)r->n_vocab * sizeof(float);
}
static size_t buffer_bytes(const specd_rverify *r) {
    return q_offset(r) + (size_t)(r->max_rows - 1) * (size_t)r->n_vocab * sizeof(float);
}

static void went_down(specd_rverify *r, const specd_error *e) {
    if (!r->was_down)
        specd_log(SPECD_LOG_WARN, "spec: verifier unavailable (%s); verifying in-process",
                  e->message);
    r->was_down = 1;
}

void specd_rverify_destroy(specd_rverify *r) {
    if (!r) return;
    /* the daemon unmaps the pool before it is freed: never freed while mapped */
    if (r->pool && r->client)
        specd_ipc_client_detach_buffer(r->client, specd_ipc_buffer_id(r->pool), NULL);
    specd_ipc_client_destroy(r->client); /* before the buffers it borrows */
    for (size_t i = 0; i < r->n_seqs; i++) specd_sampler_destroy(r->seqs[i].sampler);
    specd_free(r->seqs);
    specd_ipc_buffer_destroy(r->buf);
    specd_ipc_buffer_destroy(r->pool);
    specd_free(r);
}

specd_status specd_rverify_create(const specd_spec_params *sp, specd_rverify **out,
                                  specd_error *err) {
    if (sp->verifier_timeout_ms < 1 || sp->verifier_timeout_ms > 60000)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: verifier_timeout_ms %d is outside [1, 60000]",
                          sp->verifier_timeout_ms);
    specd_rverify *r = specd_alloc_array(1, sizeof *r);
    if (!r) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory for the verifier client");
    r->n_vocab = sp->n_vocab;
    r->max_rows = sp->max_draft + 1;
    r->pool_device = sp->device == SPECD_DEVICE_CUDA ? sp->device_index : 0;
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = sp->verifier_endpoint;
    p.name = "verifier";
    p.timeout_ms = sp->verifier_timeout_ms;
    p.retry_ms = 500;
    size_t bytes = buffer_bytes(r);
    if (bytes + 4096 > p.max_frame) p.max_frame = bytes + 4096;
    specd_ipc_fingerprint fp = {.vocab_size = (uint32_t)sp->n_vocab,
                                .tokenizer_hash = sp->verifier_tokenizer_hash};
    specd_error e;
    specd_status st = specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &fp, &r->client, &e);
    if (st == SPECD_OK) st = specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, bytes, 0, &r->buf, &e);
    if (st != SPECD_OK) {
        specd_rverify_destroy(r);
        return specd_fail(err, st, "spec: verifier endpoint %s: %s",
                          sp->verifier_endpoint ? sp->verifier_endpoint : "(default)", e.message);
    }
    /* Attaching connects. A daemon that is not up, or that refuses our Hello (a daemon for
     * another model), is a dead peer: steps are decided here until a matching one answers (the
     * buffer is shared on connect). One that refuses the buffer itself is a setup error. */
    st = specd_ipc_client_attach_buffer(r->client, r->buf, &e);
    if (st == SPECD_E_INVALID_ARG || st == SPECD_E_UNSUPPORTED) {
        specd_rverify_destroy(r);
        return specd_fail(err, st, "spec: verifier at %s refused the session: %s",
                          sp->verifier_endpoint ? sp->verifier_endpoint : "(default)", e.message);
    }
    if (st != SPECD_OK) went_down(r, &e);
    *out = r;
    return SPECD_OK;
}

float *specd_rverify_logits(const specd_rverify *r) { return specd_ipc_buffer_data(r->buf); }

static rseq *find_rseq(specd_rverify *r, int32_t seq) {
    for (size_t i = 0; i < r->n_seqs; i++)
        if (r->seqs[i].seq == seq) return &r->seqs[i];
    return NULL;
}

specd_status specd_rverify_open(specd_rverify *r, int32_t seq, const int32_t *prompt,
                                int64_t n_prompt, const specd_seq_params *p, specd_error *err) {
    if (p->tau != 0.0f)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: a remote verifier decides exact rules only (relaxed rejection, "
                          "tau %g, is not sent)", (double)p->tau);
    if (p->sampling.n_bias > 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: a remote verifier cannot apply a logit bias");
    specd_ipc_seq_params sq = {
        .seq_id = (uint64_t)seq,
        .prompt = (const uint32_t *)prompt,
        .n_prompt = (size_t)n_prompt,
        .sampling = {.temperature = p->rule == SPECD_ACCEPT_GREEDY ? 0.0f
                                                                   : p->sampling.temperature,
                     .top_k = (uint32_t)p->sampling.top_k,
                     .top_p = p->sampling.top_p,
                     .min_p = p->sampling.min_p},
        .seed = p->seed,
        .max_draft = (uint32_t)(r->max_rows - 1),
        .rule = p->rule};
    rseq *rs = find_rseq(r, seq);
    if (!rs) {
        if (r->n_seqs == r->cap_seqs) {
            size_t cap = r->cap_seqs ? 2 * r->cap_seqs : 8;
            rseq *ns = specd_alloc_array(cap, sizeof *ns);
            if (!ns) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
            if (r->n_seqs) memcpy(ns, r->seqs, r->n_seqs * sizeof *ns);
            specd_free(r->seqs);
            r->seqs = ns;
            r->cap_seqs = cap;
        }
        rs = &r->seqs[r->n_seqs++];
        *rs = (rseq){.seq = seq};
    }
    specd_sampler_destroy(rs->sampler);
    rs->sampler = NULL;
    rs->distrusted = 0;
    rs->seed = p->seed;
    /* the device kernel takes top-p since it reproduces the engine's sorted running sum, and
     * REJECTION with or without q */
    rs->device_ok = p->rule == SPECD_ACCEPT_GREEDY || p->rule == SPECD_ACCEPT_COUPLED ||
                    p->rule == SPECD_ACCEPT_REJECTION;
    rs->sampled_check = p->rule != SPECD_ACCEPT_REJECTION || p->sampling.temperature == 0.0f;
    specd_sampling_params check = p->sampling;
    if (p->rule == SPECD_ACCEPT_GREEDY) check.temperature = 0.0f;
    SPECD_TRY(specd_sampler_create(&check, r->n_vocab, &rs->sampler, err));
    specd_error e;
    specd_status st = specd_ipc_client_open_seq(r->client, &sq, &e);
    /* recorded by the client even when the daemon is down or refuses our Hello: opened there on
     * reconnect to a matching daemon */
    if (st != SPECD_OK && st != SPECD_E_PEER && st != SPECD_E_TIMEOUT && st != SPECD_E_MISMATCH)
        return specd_fail(err, st, "spec: verifier: %s", e.message);
    if (st != SPECD_OK) went_down(r, &e);
    return SPECD_OK;
}

void specd_rverify_close(specd_rverify *r, int32_t seq) {
    if (!r) return;
    rseq *rs = find_rseq(r, seq);
    if (rs && !rs->distrusted) specd_ipc_client_close_seq(r->client, (uint64_t)seq, NULL);
    if (rs) {
        specd_sampler_destroy(rs->sampler);
        *rs = r->seqs[--r->n_seqs];
    }
}

/* The daemon's answer does not agree with what this host can check itself: the sequence leaves
 * the daemon (its history there, and the client's copy, took the answer) and every later step of
 * it is decided here, with the same keyed engine, so the output stays the plain one. */
static void distrust(specd_rverify *r, rseq *rs, const char *why) {
    specd_log(SPECD_LOG_WARN,
              "spec: the verifier's answer for sequence %d is inconsistent (%s); verifying it "
              "in-process from now on",
              rs->seq, why);
    rs->distrusted = 1;
    specd_ipc_client_close_seq(r->client, (uint64_t)rs->seq, NULL);
}

/* What both paths check before sending: the draft fits, the sequence verifies remotely, and its
 * history length (the first draft's sampling position). */
static specd_status prologue(specd_rverify *r, int32_t seq, const int32_t *draft, int32_t k,
                             rseq **out,
                             uint64_t *n_hist, specd_error *err) {
    if (k < 1 || k + 1 > r->max_rows)
        return specd_fail(err, SPECD_E_INTERNAL, "spec: %d drafts for the verifier", k);
    rseq *rs = find_rseq(r, seq);
    if (!rs) return specd_fail(err, SPECD_E_STATE, "spec: sequence %d is not open remotely", seq);
    if (rs->distrusted)
        return specd_fail(err, SPECD_E_PROTOCOL, "spec: sequence %d verifies in-process", seq);
    uint64_t hist_hash;
    if (specd_ipc_client_history(r->client, (uint64_t)seq, n_hist, &hist_hash, NULL) != SPECD_OK)
        return specd_fail(err, SPECD_E_STATE, "spec: sequence %d has no remote history", seq);
    for (int32_t i = 0; i < k; i++) r->ids[i] = (uint32_t)draft[i];
    *out = rs;
    return SPECD_OK;
}

/* The daemon's answer (r->res) checked: a possible outcome, and its token at the first row not
 * accepted is that row's keyed sample under this sequence's seed and position; row_of gives that
 * row as f32 (one row's sample, cheap beside a step). */
typedef specd_status (*row_fn)(specd_rverify *r, const void *ctx, uint32_t row, const float **out,
                               specd_error *err);

static specd_status check_answer(specd_rverify *r, rseq *rs, int32_t k, uint64_t n_hist,
                                 row_fn row_of, const void *ctx, int32_t *emitted,
                                 int32_t *n_emitted, int32_t *n_accepted, specd_error *err) {
    const specd_ipc_verify_result *v = &r->res;
    int ok = v->accepted <= (uint32_t)k && v->n_emitted == (size_t)v->accepted + 1;
    for (size_t i = 0; ok && i < v->n_emitted; i++)
        ok = v->emitted[i] < (uint32_t)r->n_vocab && (i >= v->accepted || v->emitted[i] == r->ids[i]);
    if (!ok) {
        distrust(r, rs, "an impossible outcome");
        return specd_fail(err, SPECD_E_PROTOCOL, "spec: verifier answered an impossible outcome "
                          "(%u of %d drafts accepted, %zu tokens)", v->accepted, k, v->n_emitted);
    }
    /* REJECTION at T > 0 draws its last token from the residual of p and q (or p's bonus draw),
     * which the host could only check by deciding the step itself: its answers get the checks
     * above */
    if (rs->sampled_check) {
        int32_t keyed;
        specd_error e;
        const float *row = NULL;
        specd_sample_key key = {.seed = rs->seed, .sequence = (uint32_t)rs->seq,
                                .position = (uint32_t)(n_hist + v->accepted)};
        specd_status cst = row_of(r, ctx, v->accepted, &row, &e);
        if (cst == SPECD_OK)
            cst = specd_sampler_sample(rs->sampler, row, r->n_vocab, key, &keyed, &e);
        if (cst != SPECD_OK || (uint32_t)keyed != v->emitted[v->accepted]) {
            distrust(r, rs, "its token disagrees with the keyed sample");
            return specd_fail(err, SPECD_E_PROTOCOL,
                              "spec: verifier's answer fails the keyed check");
        }
    }
    if (r->was_down) specd_log(SPECD_LOG_WARN, "spec: verifier is back; verifying remotely");
    r->was_down = 0;
    for (size_t i = 0; i < v->n_emitted; i++) emitted[i] = (int32_t)v->emitted[i];
    *n_emitted = (int32_t)v->n_emitted;
    *n_accepted = (int32_t)v->accepted;
    return SPECD_OK;
}

/* Verify(logits rows at 0, q rows at q_offset when has_q) from buf, published as pub. */
static specd_status send_verify(specd_rverify *r, specd_ipc_buffer *buf, int32_t seq,
                                uint64_t step, int32_t k, specd_ipc_dtype dtype, int has_q,
                                uint64_t pub, specd_error *err) {
    specd_ipc_ref ref, qref;
    uint64_t shape[2] = {(uint64_t)k + 1, (uint64_t)r->n_vocab};
    uint64_t qshape[2] = {(uint64_t)k, (uint64_t)r->n_vocab};
    SPECD_TRY(specd_ipc_buffer_ref(buf, 0, 2, shape, dtype, pub, &ref, err));
    if (has_q)
        SPECD_TRY(specd_ipc_buffer_ref(buf, q_offset(r), 2, qshape, SPECD_IPC_F32, pub, &qref,
                                       err));
    return specd_ipc_client_verify_q(r->client, (uint64_t)seq, step, r->ids, (size_t)k, &ref,
                                     has_q ? &qref : NULL, &r->res, err);
}

static specd_status host_row(specd_rverify *r, const void *ctx, uint32_t row, const float **out,
                             specd_error *err) {
    (void)ctx, (void)err;
    *out = (const float *)specd_ipc_buffer_data(r->buf) + (size_t)row * (size_t)r->n_vocab;
    return SPECD_OK;
}

specd_status specd_rverify_chain(specd_rverify *r, int32_t seq, uint64_t step,
                                 const int32_t *draft, int32_t k, const float *logits,
                                 const float *q, int32_t *emitted, int32_t *n_emitted,
                                 int32_t *n_accepted, int *fatal, specd_error *err) {
    *fatal = 0;
    rseq *rs = NULL;
    uint64_t n_hist = 0;
    SPECD_TRY(prologue(r, seq, draft, k, &rs, &n_hist, err));
    float *data = specd_ipc_buffer_data(r->buf);
    size_t row_bytes = (size_t)r->n_vocab * sizeof(float);
    if (logits != data) memcpy(data, logits, (size_t)(k + 1) * row_bytes);
    if (q) memcpy((char *)data + q_offset(r), q, (size_t)k * row_bytes);
    specd_error e;
    uint64_t pub;
    specd_status st = specd_ipc_buffer_publish(r->buf, NULL, &pub, &e);
    if (st == SPECD_OK)
        st = send_verify(r, r->buf, seq, step, k, SPECD_IPC_F32, q != NULL, pub, &e);
    if (st != SPECD_OK) {
        went_down(r, &e);
        return specd_fail(err, st, "spec: verifier: %s", e.message);
    }
    return check_answer(r, rs, k, n_hist, host_row, NULL, emitted, n_emitted, n_accepted, err);
}

/* ---- CUDA logits through the IPC pool ---- */

typedef struct device_rows {
    specd_rverify_row_reader read;
    void *ctx;
} device_rows;

static specd_status device_row(specd_rverify *r, const void *ctx, uint32_t row, const float **out,
                               specd_error *err) {
    (void)r;
    const device_rows *d = ctx;
    return d->read(d->ctx, row, out, err);
}

static void pool_unusable(specd_rverify *r, const char *why) {
    specd_log(SPECD_LOG_WARN, "spec: CUDA logits reach the verifier through host memory: its "
              "CUDA IPC pool cannot be used (%s) (said once per spec)", why);
    r->pool_off = 1;
}

/* The pool, made and shared on first use. */
static specd_status pool_ready(specd_rverify *r, specd_error *err) {
    if (r->pool) return SPECD_OK;
    size_t bytes = buffer_bytes(r);
    specd_error e;
    specd_status st =
        specd_ipc_buffer_create(SPECD_IPC_BUFFER_CUDA, bytes, r->pool_device, &r->pool, &e);
    if (st != SPECD_OK) {
        pool_unusable(r, e.message);
        return specd_fail(err, st, "spec: %s", e.message);
    }
    /* down now: recorded by the client and shared when it connects */
    st = specd_ipc_client_attach_buffer(r->client, r->pool, &e);
    if (st != SPECD_OK && specd_ipc_client_connected(r->client)) {
        pool_unusable(r, e.message);
        return specd_fail(err, st, "spec: verifier refused the CUDA pool: %s", e.message);
    }
    return SPECD_OK;
}

specd_status specd_rverify_chain_device(specd_rverify *r, int32_t seq, uint64_t step,
                                        const int32_t *draft, int32_t k, const specd_logits *lg,
                                        int32_t row0, specd_rverify_row_reader read_row,
                                        void *read_ctx, const float *q, int q_on_device,
                                        int32_t *emitted, int32_t *n_emitted,
                                        int32_t *n_accepted, specd_error *err) {
    if (r->pool_off)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "spec: the verifier's CUDA pool is off");
    if (!lg || lg->device != SPECD_DEVICE_CUDA || !lg->data ||
        (lg->dtype != SPECD_DTYPE_F32 && lg->dtype != SPECD_DTYPE_F16 &&
         lg->dtype != SPECD_DTYPE_BF16) ||
        lg->row_stride < r->n_vocab || row0 < 0 || (int64_t)row0 + k + 1 > lg->n_rows ||
        k > SPECD_CUDA_VERIFY_MAX_K)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "spec: not a step for the verifier's device");
    rseq *rs = NULL;
    uint64_t n_hist = 0;
    SPECD_TRY(prologue(r, seq, draft, k, &rs, &n_hist, err));
    if (!rs->device_ok)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: sequence %d's rule or transform is not on the device", seq);
    SPECD_TRY(pool_ready(r, err));
    const specd_cudart *rt = specd_cudart_get(NULL); /* the pool exists: the runtime is loaded */
    size_t es = lg->dtype == SPECD_DTYPE_F32 ? 4 : 2;
    size_t width = (size_t)r->n_vocab * es;
    const char *src = (const char *)lg->data + (size_t)row0 * (size_t)lg->row_stride * es;
    /* on the legacy default stream, like the event recorded next: the daemon's wait orders its
     * kernel after this copy */
    int rc = rt->memcpy_2d(specd_ipc_buffer_data(r->pool), width, src,
                           (size_t)lg->row_stride * es, width, (size_t)k + 1,
                           SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE);
    /* q beside them, from the host (pageable: the copy is done when the call returns) or from
     * a CUDA drafter's rows on this device */
    if (rc == SPECD_CUDA_SUCCESS && q)
        rc = rt->memcpy((char *)specd_ipc_buffer_data(r->pool) + q_offset(r), q,
                        (size_t)k * (size_t)r->n_vocab * sizeof(float),
                        q_on_device ? SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE
                                    : SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    if (rc != SPECD_CUDA_SUCCESS) {
        (void)rt->get_last_error();
        return specd_fail(err, SPECD_E_IO, "spec: copying %s into the CUDA pool: %s",
                          q ? "logits and q" : "logits", rt->get_error_string(rc));
    }
    specd_error e;
    uint64_t pub;
    specd_ipc_dtype dt = lg->dtype == SPECD_DTYPE_F32   ? SPECD_IPC_F32
                         : lg->dtype == SPECD_DTYPE_F16 ? SPECD_IPC_F16
                                                        : SPECD_IPC_BF16;
    specd_status st = specd_ipc_buffer_publish(r->pool, NULL, &pub, &e);
    if (st == SPECD_OK) st = send_verify(r, r->pool, seq, step, k, dt, q != NULL, pub, &e);
    if (st != SPECD_OK) {
        /* answered and refused: this daemon cannot verify from the pool (a bad row, of logits
         * or of q, is the step's own, and the host path says what is wrong with it) */
        if (specd_ipc_client_connected(r->client) && st != SPECD_E_NUMERIC)
            pool_unusable(r, e.message);
        else if (!specd_ipc_client_connected(r->client))
            went_down(r, &e);
        return specd_fail(err, st, "spec: verifier: %s", e.message);
    }
    device_rows ctx = {.read = read_row, .ctx = read_ctx};
    SPECD_TRY(check_answer(r, rs, k, n_hist, device_row, &ctx, emitted, n_emitted, n_accepted,
                           err));
    atomic_fetch_add(&n_cuda_steps, 1);
    return SPECD_OK;
}

void specd_rverify_commit(specd_rverify *r, int32_t seq, const int32_t *tokens, int32_t n) {
    rseq *rs = find_rseq(r, seq);
    if (!rs || rs->distrusted) return;
    for (int32_t i = 0; i < n && i <= SPECD_MAX_DRAFT; i++) r->ids[i] = (uint32_t)tokens[i];
    specd_error e;
    if (specd_ipc_client_commit(r->client, (uint64_t)seq, r->ids, (size_t)n, &e) != SPECD_OK)
        went_down(r, &e);
}
