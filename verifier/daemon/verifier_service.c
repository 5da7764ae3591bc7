/* specd-verifier's handlers: the sequences it verifies for. Target logits arrive by reference to
 * a shared buffer and are resolved and bounds/staleness-checked by the service loop before a
 * verify handler sees them. The decision itself belongs to the acceptance engine
 * (verifier/accept, include/specd/accept.h); until that engine is linked in, Verify is answered
 * SPECD_E_UNSUPPORTED (the host then accepts in-process) rather than with a made-up result. */
#include "verifier/daemon/verifier_service.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/frame.h"
#include "ipc/seq_store.h"

typedef struct verifier {
    specd_seq_store *seqs;
} verifier;

static specd_status on_open(void *user, const SpecdWire__OpenSeq *m, specd_error *err) {
    verifier *v = user;
    return specd_seq_store_open(v->seqs, m, err);
}

static specd_status on_close(void *user, uint64_t seq_id, specd_error *err) {
    verifier *v = user;
    return specd_seq_store_close(v->seqs, seq_id, err);
}

static specd_status on_commit(void *user, uint64_t seq_id, const uint32_t *tokens, size_t n,
                              int has_rollback, uint64_t rollback_to, specd_error *err) {
    verifier *v = user;
    return specd_seq_store_commit(v->seqs, seq_id, tokens, n, has_rollback, rollback_to, err);
}

static specd_status on_verify(void *user, const SpecdWire__Verify *m, const specd_ipc_view *logits,
                              specd_ipc_verify_result *out, specd_error *err) {
    verifier *v = user;
    if (!specd_seq_store_get(v->seqs, m->seq_id, err)) return err ? err->status : SPECD_E_STATE;
    (void)logits;
    (void)out;
    return specd_fail(err, SPECD_E_UNSUPPORTED,
                      "verify: the acceptance engine is not linked into this verifier build");
}

static specd_status on_info(void *user, uint64_t seq_id, uint64_t *length, uint64_t *hash,
                            specd_error *err) {
    verifier *v = user;
    const specd_seq *q = specd_seq_store_get(v->seqs, seq_id, err);
    if (!q) return err ? err->status : SPECD_E_STATE;
    *length = q->n;
    *hash = specd_ipc_tokens_hash(q->tokens, q->n);
    return SPECD_OK;
}

static uint64_t on_count(void *user) {
    verifier *v = user;
    return specd_seq_store_count(v->seqs);
}

specd_status specd_verifier_handlers_create(const specd_ipc_service_params *p,
                                            specd_ipc_handlers *h, specd_error *err) {
    (void)p;
    verifier *v = specd_alloc_array(1, sizeof *v);
    if (!v) return specd_fail(err, SPECD_E_NOMEM, "verifier: out of memory");
    specd_status st = specd_seq_store_create(4096, (size_t)1 << 20, &v->seqs, err);
    if (st != SPECD_OK) {
        specd_free(v);
        return st;
    }
    specd_ipc_handlers x = {.user = v,
                            .open_seq = on_open,
                            .close_seq = on_close,
                            .commit = on_commit,
                            .verify = on_verify,
                            .seq_info = on_info,
                            .sequences_open = on_count};
    *h = x;
    return SPECD_OK;
}

void specd_verifier_handlers_destroy(specd_ipc_handlers *h) {
    if (!h || !h->user) return;
    verifier *v = h->user;
    specd_seq_store_destroy(v->seqs);
    specd_free(v);
    h->user = NULL;
}
