/* specd-verifier's handlers: the sequences it verifies for, each with its own acceptance engine
 * (verifier/accept, include/specd/accept.h; made on the first Verify with the sequence's sampling
 * parameters and rule). Target logits (and q) arrive by reference to a shared buffer and are
 * resolved and bounds/staleness-checked by the service loop before they get here. The emitted
 * tokens are appended to the sequence's history, which gives the next draft's position. */
#include "verifier/daemon/verifier_service.h"

#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/daemon/daemon_seqs.h"
#include "ipc/frame.h"
#include "ipc/seq_store.h"
#include "specd/accept.h"
#include "specd/device.h"
#include "verifier/daemon/verifier_device.h"

typedef struct verifier {
    specd_daemon_seqs seqs; /* first: the shared handlers' user (ipc/daemon/daemon_seqs.h) */
    uint32_t vocab;
    specd_verifier_device *device; /* --device cuda[:N]; NULL: host memory only */
    /* scratch for one call: ids as the engine wants them, and its outputs */
    int32_t draft[SPECD_IPC_MAX_DRAFT], parent[SPECD_IPC_MAX_DRAFT];
    int32_t tokens[SPECD_IPC_MAX_DRAFT + 1], path[SPECD_IPC_MAX_DRAFT];
    float accept_prob[SPECD_IPC_MAX_DRAFT];
} verifier;

static void engine_free(void *e) {
    specd_accept_destroy(e);
}

static specd_status on_open(void *user, uint64_t owner, const SpecdWire__OpenSeq *m,
                            specd_error *err) {
    verifier *v = user;
    return specd_seq_store_open(v->seqs.store, owner, m, err);
}

static void on_peer_gone(void *user, uint64_t owner) {
    verifier *v = user;
    specd_seq_store_close_owner(v->seqs.store, owner);
}

static specd_status on_commit(void *user, uint64_t owner, uint64_t seq_id, const uint32_t *tokens,
                              size_t n, int has_rollback, uint64_t rollback_to, specd_error *err) {
    verifier *v = user;
    return specd_seq_store_commit(v->seqs.store, owner, seq_id, tokens, n, has_rollback,
                                  rollback_to, err);
}

static specd_status engine_for(verifier *v, specd_seq *q, specd_error *err) {
    if (q->engine) return SPECD_OK;
    specd_accept_params p = specd_accept_default_params();
    p.rule = q->rule;
    p.sampling.temperature = q->temperature;
    p.sampling.top_k = (int32_t)q->top_k;
    p.sampling.top_p = q->top_p;
    p.sampling.min_p = q->min_p;
    p.max_k = SPECD_IPC_MAX_DRAFT;
    p.max_vocab = (int32_t)v->vocab;
    specd_accept *a = NULL;
    SPECD_TRY(specd_accept_create(&p, &a, err));
    q->engine = a;
    return SPECD_OK;
}

/* Advances the history by the decided tokens, then fills out (nothing is decided if that fails). */
static specd_status record(verifier *v, uint64_t owner, uint64_t seq_id, const int32_t *tokens,
                           int32_t n_emitted, int32_t n_accepted, specd_ipc_verify_result *out,
                           specd_error *err) {
    uint32_t emitted[SPECD_IPC_MAX_DRAFT + 1];
    for (int32_t i = 0; i < n_emitted; i++)
        emitted[i] = (uint32_t)tokens[i];
    SPECD_TRY(specd_seq_store_commit(v->seqs.store, owner, seq_id, emitted, (size_t)n_emitted, 0, 0,
                                     err));
    memcpy(out->emitted, emitted, (size_t)n_emitted * sizeof *emitted);
    out->n_emitted = (size_t)n_emitted;
    out->accepted = (uint32_t)n_accepted;
    return SPECD_OK;
}

/* Logits in a CUDA IPC buffer: decided where they lie, by the device kernel, whose decisions are
 * the engine's bit for bit; what it cannot decide is refused, and the host decides it. */
static specd_status verify_on_device(verifier *v, uint64_t owner, const SpecdWire__Verify *m,
                                     specd_seq *q, const specd_ipc_view *logits,
                                     const specd_ipc_view *qv, specd_ipc_verify_result *out,
                                     specd_error *err) {
    if (!v->device)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "verify: logits on a CUDA device, and this daemon was started "
                          "without --device cuda");
    specd_cuda_verify_seq s;
    SPECD_TRY(specd_verifier_device_plan(q, m->seq_id, logits, v->vocab, m->draft_tokens,
                                         m->n_draft_tokens, m->n_parents != 0, qv, &s,
                                         err));
    int32_t n_emitted, n_accepted;
    SPECD_TRY(specd_verifier_device_chain(v->device, &s, logits, v->vocab, v->tokens, &n_emitted,
                                          &n_accepted, err));
    /* GREEDY and COUPLED decide with certainty: a position examined is accepted or not (the
     * kernel does not return REJECTION's acceptance probabilities: its stats are the outcome) */
    size_t k = m->n_draft_tokens;
    size_t examined = (size_t)n_accepted < k ? (size_t)n_accepted + 1 : k;
    for (size_t i = 0; i < examined; i++) {
        out->accept_prob[i] = i < (size_t)n_accepted ? 1.0f : 0.0f;
        out->position_accepted[i] = i < (size_t)n_accepted;
    }
    out->n_stats = examined;
    return record(v, owner, m->seq_id, v->tokens, n_emitted, n_accepted, out, err);
}

static specd_status on_verify(void *user, uint64_t owner, const SpecdWire__Verify *m,
                              const specd_ipc_view *logits, const specd_ipc_view *qv,
                              specd_ipc_verify_result *out, specd_error *err) {
    verifier *v = user;
    specd_seq *q = specd_seq_store_get(v->seqs.store, owner, m->seq_id, err);
    if (!q) return SPECD_E_STATE;
    if (m->n_draft_tokens == 0) return specd_fail(err, SPECD_E_INVALID_ARG, "verify: empty draft");
    if (logits->on_device) return verify_on_device(v, owner, m, q, logits, qv, out, err);
    if (logits->dtype != SPECD_IPC_F32 || logits->on_device ||
        (qv && (qv->dtype != SPECD_IPC_F32 || qv->on_device)))
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "verify: this engine reads f32 logits in host memory");
    if (q->n > UINT32_MAX - SPECD_IPC_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INVALID_ARG, "verify: position past 2^32");
    SPECD_TRY(engine_for(v, q, err));
    size_t k = m->n_draft_tokens;
    for (size_t i = 0; i < k; i++)
        v->draft[i] = (int32_t)m->draft_tokens[i];
    specd_sample_key key = {
        .seed = q->seed, .sequence = (uint32_t)m->seq_id, .position = (uint32_t)q->n};
    int32_t n_emitted, n_accepted;
    if (m->n_parents == 0) {
        specd_chain_input in = {.k = (int32_t)k,
                                .draft = v->draft,
                                .draft_probs = qv ? qv->data : NULL,
                                .q_vocab = (int32_t)v->vocab,
                                .target_logits = logits->data,
                                .n_vocab = (int32_t)v->vocab,
                                .key = key};
        specd_chain_result res = {.tokens = v->tokens, .accept_prob = v->accept_prob};
        SPECD_TRY(specd_accept_chain(q->engine, &in, &res, err));
        n_emitted = res.n_emitted;
        n_accepted = res.n_accepted;
        size_t examined = (size_t)n_accepted < k ? (size_t)n_accepted + 1 : k;
        for (size_t i = 0; i < examined; i++) {
            out->accept_prob[i] = v->accept_prob[i];
            out->position_accepted[i] = i < (size_t)n_accepted;
        }
        out->n_stats = examined;
    } else {
        for (size_t i = 0; i < k; i++)
            v->parent[i] = m->parents[i];
        specd_tree_input in = {.n_nodes = (int32_t)k,
                               .parent = v->parent,
                               .token = v->draft,
                               .draft_probs = qv ? qv->data : NULL,
                               .q_vocab = (int32_t)v->vocab,
                               .target_logits = logits->data,
                               .n_vocab = (int32_t)v->vocab,
                               .key = key};
        specd_tree_result res = {.path = v->path, .tokens = v->tokens};
        SPECD_TRY(specd_accept_tree(q->engine, &in, &res, err));
        n_emitted = res.n_emitted;
        n_accepted = res.n_accepted;
        out->n_stats = 0;
    }
    return record(v, owner, m->seq_id, v->tokens, n_emitted, n_accepted, out, err);
}

specd_status specd_verifier_handlers_create(const specd_ipc_service_params *p,
                                            const specd_daemon_config *c, specd_ipc_handlers *h,
                                            specd_error *err) {
    verifier *v = specd_alloc_array(1, sizeof *v);
    if (!v) return specd_fail(err, SPECD_E_NOMEM, "verifier: out of memory");
    v->vocab = p->model.vocab_size;
    specd_status st = SPECD_OK;
    if (c && c->device == SPECD_DEVICE_CUDA)
        st = specd_verifier_device_open(c->device_index, &v->device, err);
    if (st == SPECD_OK) st = specd_daemon_seqs_create(&v->seqs, engine_free, err);
    if (st != SPECD_OK) {
        specd_verifier_device_close(v->device);
        specd_free(v);
        return st;
    }
    *h = specd_daemon_seqs_handlers(&v->seqs);
    h->open_seq = on_open;
    h->commit = on_commit;
    h->verify = on_verify;
    h->peer_gone = on_peer_gone;
    return SPECD_OK;
}

void specd_verifier_handlers_destroy(specd_ipc_handlers *h) {
    if (!h || !h->user) return;
    verifier *v = h->user;
    specd_daemon_seqs_destroy(&v->seqs);
    specd_verifier_device_close(v->device);
    specd_free(v);
    h->user = NULL;
}
