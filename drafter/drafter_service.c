/* specd-drafter's handlers: the sequences it drafts for (prompt + committed tokens, sampling
 * parameters, seed), each with its own instance of a drafter-shaped proposal policy from the
 * registry (specd/policy.h). OpenSeq's policy field is "name" or "name:options" ("" = ngram).
 * Self-speculative policies (layout/verify) run inside the host's target step, not here, and are
 * refused at OpenSeq. Draft distributions q are not sent yet: the host verifies with a rule that
 * does not need them (COUPLED, GREEDY). */
#include "drafter/drafter_service.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/frame.h"
#include "ipc/seq_store.h"
#include "specd/policy.h"

#define DEFAULT_MAX_DRAFT 8

typedef struct policy_inst {
    const specd_policy_ops *ops;
    void *state;
    int32_t max_draft;
} policy_inst;

typedef struct drafter {
    specd_seq_store *seqs;
    int32_t vocab;
    int32_t *hist; /* the history as the policy ABI wants it */
    size_t hist_cap;
    int32_t draft[SPECD_IPC_MAX_DRAFT];
} drafter;

static void policy_free(void *p) {
    policy_inst *inst = p;
    if (!inst) return;
    inst->ops->destroy(inst->state);
    specd_free(inst);
}

static specd_status make_policy(const drafter *d, const SpecdWire__OpenSeq *m, policy_inst **out,
                                specd_error *err) {
    char name[65] = "ngram";
    const char *options = NULL;
    if (m->policy && m->policy[0]) {
        snprintf(name, sizeof name, "%s", m->policy);
        char *colon = strchr(name, ':');
        if (colon) {
            *colon = '\0';
            options = m->policy + (colon - name) + 1;
        }
    }
    const specd_policy_ops *ops = specd_policy_find(name);
    if (!ops) return specd_fail(err, SPECD_E_INVALID_ARG, "open_seq: no policy named '%s'", name);
    if (ops->abi_version != SPECD_POLICY_ABI_VERSION || !ops->propose)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "open_seq: policy '%s' is self-speculative: it runs in the host's "
                          "target step, not in a drafter",
                          name);
    int32_t max_draft =
        m->has_max_draft && m->max_draft ? (int32_t)m->max_draft : DEFAULT_MAX_DRAFT;
    specd_policy_env env = {.n_vocab = d->vocab,
                            .max_draft = max_draft,
                            .seed = m->seed,
                            .seq_key = (uint32_t)m->seq_id};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = m->sampling->temperature;
    env.sampling.top_k = m->sampling->has_top_k ? (int32_t)m->sampling->top_k : 0;
    env.sampling.top_p = m->sampling->has_top_p ? m->sampling->top_p : 1.0f;
    env.sampling.min_p = m->sampling->has_min_p ? m->sampling->min_p : 0.0f;
    env.rule = !m->has_rule || m->rule == SPECD_WIRE__ACCEPT_RULE__ACCEPT_COUPLED
                   ? SPECD_ACCEPT_COUPLED
               : m->rule == SPECD_WIRE__ACCEPT_RULE__ACCEPT_GREEDY ? SPECD_ACCEPT_GREEDY
                                                                   : SPECD_ACCEPT_REJECTION;
    policy_inst *inst = specd_alloc_array(1, sizeof *inst);
    if (!inst) return specd_fail(err, SPECD_E_NOMEM, "open_seq: out of memory");
    specd_status st = ops->create(&env, options, &inst->state, err);
    if (st != SPECD_OK) {
        specd_free(inst);
        return st;
    }
    inst->ops = ops;
    inst->max_draft = max_draft;
    *out = inst;
    return SPECD_OK;
}

static specd_status history_of(drafter *d, const specd_seq *q, specd_error *err) {
    if (q->n > d->hist_cap) {
        size_t cap = d->hist_cap ? d->hist_cap : 1024;
        while (cap < q->n)
            cap *= 2;
        int32_t *h = specd_alloc_array(cap, sizeof *h);
        if (!h) return specd_fail(err, SPECD_E_NOMEM, "history of %zu tokens", cap);
        specd_free(d->hist);
        d->hist = h;
        d->hist_cap = cap;
    }
    for (size_t i = 0; i < q->n; i++)
        d->hist[i] = (int32_t)q->tokens[i];
    return SPECD_OK;
}

static specd_status on_open(void *user, uint64_t owner, const SpecdWire__OpenSeq *m,
                            specd_error *err) {
    drafter *d = user;
    policy_inst *inst = NULL;
    SPECD_TRY(make_policy(d, m, &inst, err));
    specd_status st = specd_seq_store_open(d->seqs, owner, m, err);
    if (st != SPECD_OK) {
        policy_free(inst);
        return st;
    }
    specd_seq *q = specd_seq_store_get(d->seqs, owner, m->seq_id, NULL);
    q->engine = inst;
    return SPECD_OK;
}

static specd_status on_close(void *user, uint64_t owner, uint64_t seq_id, specd_error *err) {
    drafter *d = user;
    return specd_seq_store_close(d->seqs, owner, seq_id, err);
}

static void on_peer_gone(void *user, uint64_t owner) {
    drafter *d = user;
    specd_seq_store_close_owner(d->seqs, owner);
}

static specd_status on_commit(void *user, uint64_t owner, uint64_t seq_id, const uint32_t *tokens,
                              size_t n, int has_rollback, uint64_t rollback_to, specd_error *err) {
    drafter *d = user;
    SPECD_TRY(specd_seq_store_commit(d->seqs, owner, seq_id, tokens, n, has_rollback, rollback_to,
                                     err));
    specd_seq *q = specd_seq_store_get(d->seqs, owner, seq_id, NULL);
    policy_inst *inst = q->engine;
    if (has_rollback && inst->ops->rollback) inst->ops->rollback(inst->state, (int64_t)rollback_to);
    if (inst->ops->advance) {
        SPECD_TRY(history_of(d, q, err));
        inst->ops->advance(inst->state, d->hist, (int64_t)q->n);
    }
    return SPECD_OK;
}

static specd_status on_propose(void *user, uint64_t owner, const SpecdWire__Propose *m,
                               specd_ipc_draft_out *out, specd_error *err) {
    drafter *d = user;
    specd_seq *q = specd_seq_store_get(d->seqs, owner, m->seq_id, err);
    if (!q) return SPECD_E_STATE;
    policy_inst *inst = q->engine;
    int32_t max_draft = inst->max_draft;
    if (m->has_max_draft && m->max_draft && (int32_t)m->max_draft < max_draft)
        max_draft = (int32_t)m->max_draft;
    SPECD_TRY(history_of(d, q, err));
    int32_t nd = 0;
    int has_q = 0;
    SPECD_TRY(inst->ops->propose(inst->state, d->hist, (int64_t)q->n, max_draft, d->draft, &nd,
                                 NULL, &has_q, err));
    if (nd < 0 || nd > max_draft)
        return specd_fail(err, SPECD_E_INTERNAL, "policy %s proposed %d tokens (max %d)",
                          inst->ops->name, nd, max_draft);
    for (int32_t i = 0; i < nd; i++) {
        if (d->draft[i] < 0 || d->draft[i] >= d->vocab)
            return specd_fail(err, SPECD_E_INTERNAL, "policy %s proposed token %d", inst->ops->name,
                              d->draft[i]);
        out->tokens[i] = (uint32_t)d->draft[i];
    }
    out->n = (size_t)nd;
    return SPECD_OK;
}

static specd_status on_info(void *user, uint64_t owner, uint64_t seq_id, uint64_t *length,
                            uint64_t *hash, specd_error *err) {
    drafter *d = user;
    const specd_seq *q = specd_seq_store_get(d->seqs, owner, seq_id, err);
    if (!q) return err ? err->status : SPECD_E_STATE;
    *length = q->n;
    *hash = specd_ipc_tokens_hash(q->tokens, q->n);
    return SPECD_OK;
}

static uint64_t on_count(void *user) {
    drafter *d = user;
    return specd_seq_store_count(d->seqs);
}

specd_status specd_drafter_handlers_create(const specd_ipc_service_params *p, specd_ipc_handlers *h,
                                           specd_error *err) {
    if (p->model.vocab_size > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "drafter: vocab %u", p->model.vocab_size);
    drafter *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "drafter: out of memory");
    d->vocab = (int32_t)p->model.vocab_size;
    specd_status st = specd_seq_store_create(4096, (size_t)1 << 20, &d->seqs, err);
    if (st != SPECD_OK) {
        specd_free(d);
        return st;
    }
    specd_seq_store_set_engine_free(d->seqs, policy_free);
    specd_seq_store_set_quota(d->seqs, SPECD_DAEMON_SEQS_PER_PEER, SPECD_DAEMON_TOKENS_PER_PEER);
    specd_ipc_handlers x = {.user = d,
                            .open_seq = on_open,
                            .close_seq = on_close,
                            .commit = on_commit,
                            .propose = on_propose,
                            .seq_info = on_info,
                            .sequences_open = on_count,
                            .peer_gone = on_peer_gone};
    *h = x;
    return SPECD_OK;
}

void specd_drafter_handlers_destroy(specd_ipc_handlers *h) {
    if (!h || !h->user) return;
    drafter *d = h->user;
    specd_seq_store_destroy(d->seqs);
    specd_free(d->hist);
    specd_free(d);
    h->user = NULL;
}
