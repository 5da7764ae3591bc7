/* Per-sequence state a daemon keeps: sampling parameters, seed, policy name and the token history
 * (prompt + commits). A sequence belongs to the peer session that opened it (owner, given by the
 * service loop): sequence ids are the host's own numbering, so two hosts both using id 0 have two
 * sequences, and a peer can neither read, replace nor close another's. Opening an id that the
 * same owner has open replaces it: a host replaying its session after a timeout may find the
 * daemon alive, and its history is the truth. Quotas per owner bound what one peer can hold. */
#ifndef SPECD_IPC_SEQ_STORE_H
#define SPECD_IPC_SEQ_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "ipc/specd.pb-c.h"
#include "specd/accept.h"
#include "specd/status.h"

/* The daemons' per-peer quotas: sequences, and history tokens over all of them (64 MiB). */
#define SPECD_DAEMON_SEQS_PER_PEER 256
#define SPECD_DAEMON_TOKENS_PER_PEER ((size_t)16 << 20)

typedef struct specd_seq {
    uint64_t owner;
    uint64_t seq_id;
    float temperature, top_p, min_p;
    uint32_t top_k;
    uint64_t seed;
    char policy[65];
    uint32_t max_draft;
    specd_accept_rule rule;
    void *engine; /* owner's per-sequence state (the verifier's acceptance engine), or NULL */
    uint32_t *tokens;
    size_t n, cap;
} specd_seq;

typedef struct specd_seq_store specd_seq_store;

/* Releases a sequence's engine when the sequence is closed, replaced or the store destroyed. */
typedef void (*specd_seq_engine_free_fn)(void *engine);

/* max_seqs / max_tokens: the whole store's sequences and one sequence's history length. */
specd_status specd_seq_store_create(size_t max_seqs, size_t max_tokens, specd_seq_store **out,
                                    specd_error *err);
/* Per owner: at most max_seqs sequences and max_tokens history tokens in all (0 = no limit). */
void specd_seq_store_set_quota(specd_seq_store *s, size_t max_seqs, size_t max_tokens);
void specd_seq_store_set_engine_free(specd_seq_store *s, specd_seq_engine_free_fn fn);
void specd_seq_store_destroy(specd_seq_store *s);
specd_status specd_seq_store_open(specd_seq_store *s, uint64_t owner, const SpecdWire__OpenSeq *m,
                                  specd_error *err);
specd_status specd_seq_store_close(specd_seq_store *s, uint64_t owner, uint64_t seq_id,
                                   specd_error *err);
/* Closes every sequence of owner (a peer that left); returns how many. */
size_t specd_seq_store_close_owner(specd_seq_store *s, uint64_t owner);
/* Truncates to rollback_to (when has_rollback) and appends; all or nothing. */
specd_status specd_seq_store_commit(specd_seq_store *s, uint64_t owner, uint64_t seq_id,
                                    const uint32_t *tokens,
                                    size_t n, int has_rollback, uint64_t rollback_to,
                                    specd_error *err);
/* Borrowed; NULL (and err filled) if unknown. */
specd_seq *specd_seq_store_get(specd_seq_store *s, uint64_t owner, uint64_t seq_id,
                               specd_error *err);
size_t specd_seq_store_count(const specd_seq_store *s);

#endif
