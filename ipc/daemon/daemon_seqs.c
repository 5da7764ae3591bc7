#include "ipc/daemon/daemon_seqs.h"

#include "common/status_internal.h"
#include "ipc/frame.h"

specd_status specd_daemon_seqs_create(specd_daemon_seqs *s, specd_seq_engine_free_fn engine_free,
                                      specd_error *err) {
    SPECD_TRY(specd_seq_store_create(4096, (size_t)1 << 20, &s->store, err));
    specd_seq_store_set_engine_free(s->store, engine_free);
    specd_seq_store_set_quota(s->store, SPECD_DAEMON_SEQS_PER_PEER, SPECD_DAEMON_TOKENS_PER_PEER);
    return SPECD_OK;
}

void specd_daemon_seqs_destroy(specd_daemon_seqs *s) {
    specd_seq_store_destroy(s->store);
    s->store = NULL;
}

static specd_status on_close(void *user, uint64_t owner, uint64_t seq_id, specd_error *err) {
    specd_daemon_seqs *s = user;
    return specd_seq_store_close(s->store, owner, seq_id, err);
}

static specd_status on_info(void *user, uint64_t owner, uint64_t seq_id, uint64_t *length,
                            uint64_t *hash, specd_error *err) {
    specd_daemon_seqs *s = user;
    const specd_seq *q = specd_seq_store_get(s->store, owner, seq_id, err);
    if (!q) return err ? err->status : SPECD_E_STATE;
    *length = q->n;
    *hash = specd_ipc_tokens_hash(q->tokens, q->n);
    return SPECD_OK;
}

static uint64_t on_count(void *user) {
    specd_daemon_seqs *s = user;
    return specd_seq_store_count(s->store);
}

specd_ipc_handlers specd_daemon_seqs_handlers(specd_daemon_seqs *s) {
    return (specd_ipc_handlers){
        .user = s, .close_seq = on_close, .seq_info = on_info, .sequences_open = on_count};
}
