#include "ipc/seq_store.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/frame.h"

struct specd_seq_store {
    size_t max_seqs, max_tokens, n;
    size_t owner_max_seqs, owner_max_tokens; /* 0 = no limit */
    specd_seq *seqs;
    specd_seq_engine_free_fn engine_free;
};

void specd_seq_store_set_quota(specd_seq_store *s, size_t max_seqs, size_t max_tokens) {
    s->owner_max_seqs = max_seqs;
    s->owner_max_tokens = max_tokens;
}

void specd_seq_store_set_engine_free(specd_seq_store *s, specd_seq_engine_free_fn fn) {
    s->engine_free = fn;
}

static void release(specd_seq_store *s, specd_seq *q) {
    specd_free(q->tokens);
    if (q->engine && s->engine_free) s->engine_free(q->engine);
    q->tokens = NULL;
    q->engine = NULL;
}

specd_status specd_seq_store_create(size_t max_seqs, size_t max_tokens, specd_seq_store **out,
                                    specd_error *err) {
    if (!out || max_seqs == 0 || max_tokens == 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "seq_store_create: bad arguments");
    specd_seq_store *s = specd_alloc_array(1, sizeof *s);
    specd_seq *q = specd_alloc_array(max_seqs, sizeof *q);
    if (!s || !q) {
        specd_free(s);
        specd_free(q);
        return specd_fail(err, SPECD_E_NOMEM, "seq_store_create: out of memory");
    }
    s->max_seqs = max_seqs;
    s->max_tokens = max_tokens;
    s->seqs = q;
    *out = s;
    return SPECD_OK;
}

void specd_seq_store_destroy(specd_seq_store *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n; i++)
        release(s, &s->seqs[i]);
    specd_free(s->seqs);
    specd_free(s);
}

size_t specd_seq_store_count(const specd_seq_store *s) {
    return s->n;
}

static specd_seq *find(specd_seq_store *s, uint64_t owner, uint64_t id) {
    for (size_t i = 0; i < s->n; i++)
        if (s->seqs[i].seq_id == id && s->seqs[i].owner == owner) return &s->seqs[i];
    return NULL;
}

/* What owner holds: sequences and history tokens (skipping `except`, which is being replaced). */
static void owner_usage(const specd_seq_store *s, uint64_t owner, const specd_seq *except,
                        size_t *n_seqs, size_t *n_tokens) {
    *n_seqs = *n_tokens = 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->seqs[i].owner == owner && &s->seqs[i] != except) {
            (*n_seqs)++;
            *n_tokens += s->seqs[i].n;
        }
}

static specd_status check_tokens_quota(const specd_seq_store *s, uint64_t owner,
                                       const specd_seq *except, size_t more, specd_error *err) {
    if (!s->owner_max_tokens) return SPECD_OK;
    size_t seqs, tokens;
    owner_usage(s, owner, except, &seqs, &tokens);
    if (tokens + more > s->owner_max_tokens)
        return specd_fail(err, SPECD_E_STATE,
                          "quota: this peer's sequences would hold %zu history tokens, at most %zu",
                          tokens + more, s->owner_max_tokens);
    return SPECD_OK;
}

specd_seq *specd_seq_store_get(specd_seq_store *s, uint64_t owner, uint64_t id, specd_error *err) {
    specd_seq *q = find(s, owner, id);
    if (!q) specd_fail(err, SPECD_E_STATE, "sequence %llu is not open", (unsigned long long)id);
    return q;
}

static specd_status reserve(specd_seq_store *s, specd_seq *q, size_t need, specd_error *err) {
    if (need > s->max_tokens)
        return specd_fail(err, SPECD_E_INVALID_ARG, "sequence %llu: %zu tokens, at most %zu",
                          (unsigned long long)q->seq_id, need, s->max_tokens);
    if (need <= q->cap) return SPECD_OK;
    size_t cap = q->cap ? q->cap : 256;
    while (cap < need)
        cap *= 2;
    uint32_t *t = specd_alloc_array(cap, sizeof *t);
    if (!t) return specd_fail(err, SPECD_E_NOMEM, "sequence history of %zu tokens", cap);
    if (q->n) memcpy(t, q->tokens, q->n * sizeof *t);
    specd_free(q->tokens);
    q->tokens = t;
    q->cap = cap;
    return SPECD_OK;
}

specd_status specd_seq_store_open(specd_seq_store *s, uint64_t owner, const SpecdWire__OpenSeq *m,
                                  specd_error *err) {
    specd_seq *old = find(s, owner, m->seq_id);
    if (!old && s->owner_max_seqs) {
        size_t seqs, tokens;
        owner_usage(s, owner, NULL, &seqs, &tokens);
        if (seqs >= s->owner_max_seqs)
            return specd_fail(err, SPECD_E_STATE,
                              "quota: this peer has %zu sequences open, at most %zu", seqs,
                              s->owner_max_seqs);
    }
    SPECD_TRY(check_tokens_quota(s, owner, old, m->n_prompt, err));
    specd_seq fresh = {0};
    fresh.owner = owner;
    fresh.seq_id = m->seq_id;
    fresh.temperature = m->sampling->temperature;
    fresh.top_k = m->sampling->has_top_k ? m->sampling->top_k : 0;
    fresh.top_p = m->sampling->has_top_p ? m->sampling->top_p : 1.0f;
    fresh.min_p = m->sampling->has_min_p ? m->sampling->min_p : 0.0f;
    fresh.seed = m->seed;
    fresh.max_draft = m->has_max_draft ? m->max_draft : 0;
    fresh.rule = specd_ipc_rule_from_wire(m);
    if (m->policy) snprintf(fresh.policy, sizeof fresh.policy, "%s", m->policy);
    SPECD_TRY(reserve(s, &fresh, m->n_prompt ? m->n_prompt : 1, err));
    if (m->n_prompt) memcpy(fresh.tokens, m->prompt, m->n_prompt * sizeof *fresh.tokens);
    fresh.n = m->n_prompt;
    if (old) {
        release(s, old);
        *old = fresh;
        return SPECD_OK;
    }
    if (s->n == s->max_seqs) {
        specd_free(fresh.tokens);
        return specd_fail(err, SPECD_E_STATE, "open_seq: %zu sequences open already", s->n);
    }
    s->seqs[s->n++] = fresh;
    return SPECD_OK;
}

specd_status specd_seq_store_close(specd_seq_store *s, uint64_t owner, uint64_t id,
                                   specd_error *err) {
    specd_seq *q = find(s, owner, id);
    if (!q)
        return specd_fail(err, SPECD_E_STATE, "close_seq: sequence %llu is not open",
                          (unsigned long long)id);
    release(s, q);
    *q = s->seqs[--s->n];
    return SPECD_OK;
}

size_t specd_seq_store_close_owner(specd_seq_store *s, uint64_t owner) {
    size_t closed = 0;
    for (size_t i = 0; i < s->n;) {
        if (s->seqs[i].owner != owner) {
            i++;
            continue;
        }
        release(s, &s->seqs[i]);
        s->seqs[i] = s->seqs[--s->n];
        closed++;
    }
    return closed;
}

specd_status specd_seq_store_commit(specd_seq_store *s, uint64_t owner, uint64_t id,
                                    const uint32_t *tokens, size_t n, int has_rollback,
                                    uint64_t rollback_to, specd_error *err) {
    specd_seq *q = find(s, owner, id);
    if (!q)
        return specd_fail(err, SPECD_E_STATE, "commit: sequence %llu is not open",
                          (unsigned long long)id);
    size_t base = q->n;
    if (has_rollback) {
        if (rollback_to > q->n)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "commit: rollback to %llu past the end (%zu tokens)",
                              (unsigned long long)rollback_to, q->n);
        base = (size_t)rollback_to;
    }
    if (base + n > q->n) SPECD_TRY(check_tokens_quota(s, owner, NULL, base + n - q->n, err));
    SPECD_TRY(reserve(s, q, base + n, err));
    if (n) memcpy(q->tokens + base, tokens, n * sizeof *tokens);
    q->n = base + n;
    return SPECD_OK;
}
