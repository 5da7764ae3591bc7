/* What the daemons' services (drafter/drafter_service.c, verifier/daemon/verifier_service.c)
 * share: their sequence store, made with the per-peer quotas (ipc/seq_store.h), and the handlers
 * that only read or close it. A service's state begins with a specd_daemon_seqs, so that its
 * handlers' user pointer serves these handlers too. */
#ifndef SPECD_IPC_DAEMON_SEQS_H
#define SPECD_IPC_DAEMON_SEQS_H

#include "ipc/seq_store.h"
#include "ipc/service.h"

typedef struct specd_daemon_seqs {
    specd_seq_store *store;
} specd_daemon_seqs;

/* The store (4096 sequences of up to 2^20 tokens, the per-peer quotas); engine_free frees a
 * sequence's engine when it closes. */
specd_status specd_daemon_seqs_create(specd_daemon_seqs *s, specd_seq_engine_free_fn engine_free,
                                      specd_error *err);
void specd_daemon_seqs_destroy(specd_daemon_seqs *s);

/* Handlers with user = s and close_seq, seq_info and sequences_open set; the service adds its
 * own (open_seq, commit, propose or verify, peer_gone). s must be the first member of the
 * service's state when the service's handlers take user as that state. */
specd_ipc_handlers specd_daemon_seqs_handlers(specd_daemon_seqs *s);

#endif
