/* specd-drafter's handlers: the sequences it drafts for (prompt + committed tokens, sampling
 * parameters, seed, policy name). Proposing needs a proposal policy from policy/; none is linked
 * into this daemon yet, so Propose is answered SPECD_E_UNSUPPORTED rather than with made-up
 * tokens (the host then decodes without drafts). */
#include "drafter/drafter_service.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/frame.h"
#include "ipc/seq_store.h"

typedef struct drafter {
    specd_seq_store *seqs;
} drafter;

static specd_status on_open(void *user, const SpecdWire__OpenSeq *m, specd_error *err) {
    drafter *d = user;
    return specd_seq_store_open(d->seqs, m, err);
}

static specd_status on_close(void *user, uint64_t seq_id, specd_error *err) {
    drafter *d = user;
    return specd_seq_store_close(d->seqs, seq_id, err);
}

static specd_status on_commit(void *user, uint64_t seq_id, const uint32_t *tokens, size_t n,
                              int has_rollback, uint64_t rollback_to, specd_error *err) {
    drafter *d = user;
    return specd_seq_store_commit(d->seqs, seq_id, tokens, n, has_rollback, rollback_to, err);
}

static specd_status on_propose(void *user, const SpecdWire__Propose *m, specd_ipc_draft_out *out,
                               specd_error *err) {
    drafter *d = user;
    const specd_seq *q = specd_seq_store_get(d->seqs, m->seq_id, err);
    if (!q) return err ? err->status : SPECD_E_STATE;
    (void)out;
    return specd_fail(err, SPECD_E_UNSUPPORTED,
                      "propose: policy '%s' is not available in this drafter build", q->policy);
}

static specd_status on_info(void *user, uint64_t seq_id, uint64_t *length, uint64_t *hash,
                            specd_error *err) {
    drafter *d = user;
    const specd_seq *q = specd_seq_store_get(d->seqs, seq_id, err);
    if (!q) return err ? err->status : SPECD_E_STATE;
    *length = q->n;
    *hash = specd_ipc_tokens_hash(q->tokens, q->n);
    return SPECD_OK;
}

static uint64_t on_count(void *user) {
    drafter *d = user;
    return specd_seq_store_count(d->seqs);
}

specd_status specd_drafter_handlers_create(const specd_ipc_service_params *p,
                                           specd_ipc_handlers *h, specd_error *err) {
    (void)p;
    drafter *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "drafter: out of memory");
    specd_status st = specd_seq_store_create(4096, (size_t)1 << 20, &d->seqs, err);
    if (st != SPECD_OK) {
        specd_free(d);
        return st;
    }
    specd_ipc_handlers x = {.user = d,
                            .open_seq = on_open,
                            .close_seq = on_close,
                            .commit = on_commit,
                            .propose = on_propose,
                            .seq_info = on_info,
                            .sequences_open = on_count};
    *h = x;
    return SPECD_OK;
}

void specd_drafter_handlers_destroy(specd_ipc_handlers *h) {
    if (!h || !h->user) return;
    drafter *d = h->user;
    specd_seq_store_destroy(d->seqs);
    specd_free(d);
    h->user = NULL;
}
