/* specd-drafter's handlers: the sequences it drafts for (prompt + committed tokens, sampling
 * parameters, seed), each with its own instance of a drafter-shaped proposal policy from the
 * registry (specd/policy.h). The policies served, with their options (model paths, ...), are fixed
 * by the operator at start (--policy NAME=SPEC); OpenSeq's policy field names one of them ("" =
 * the first), so a peer can neither make us open files nor pick options. Self-speculative
 * policies (layout/verify) run inside the host's target step, and `remote` would make us a client
 * of another drafter (or of ourselves): both are refused at start.
 *
 * Draft distributions: a policy that may sample (SPECD_POLICY_NEEDS_Q) writes q straight into a
 * shared buffer this drafter owns, one per peer session (sized for the largest max_draft asked,
 * replaced when a larger one is needed, released when the peer leaves); the Draft then carries a
 * reference to the rows and the buffer's descriptor, and the host copies the rows out before its
 * next request (requests on one connection are answered one at a time, so one buffer per peer
 * suffices). A deterministic draft carries no q.
 * With --q-device cuda[:N] the peers' buffers are CUDA IPC buffers on device N instead: the
 * policy writes q into a host staging area, the rows are copied to the peer's buffer and its
 * interprocess event recorded after the copy, so a host on that device reads q there without a
 * copy of its own (the buffer is rewritten only by that peer's next Propose, which it sends once
 * it is done reading). */
#include "drafter/drafter_service.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "ipc/cuda_buffer.h"
#include "ipc/daemon/daemon_seqs.h"
#include "ipc/frame.h"
#include "ipc/seq_store.h"
#include "kernels/cuda/cudart.h"
#include "specd/policy.h"
#include "specd/runtime.h"

#define DEFAULT_MAX_DRAFT 8

typedef struct policy_inst {
    const specd_policy_ops *ops;
    void *state;
    int32_t max_draft;
    int needs_q; /* the policy may sample and report q */
} policy_inst;

/* A peer session's buffer for draft distributions. */
typedef struct q_slot {
    uint64_t owner;
    specd_ipc_buffer *buf;
} q_slot;

typedef struct served {
    char name[65];
    const specd_policy_ops *ops;
    char options[512];
    /* the policy's shared state (ABI 2 shared_create), one per served name for the process: every
     * host's sequences share it (suffix's global cache, a draft model's weights), or NULL */
    void *shared;
} served;

typedef struct drafter {
    specd_daemon_seqs seqs; /* first: the shared handlers' user (ipc/daemon/daemon_seqs.h) */
    served policies[SPECD_DAEMON_MAX_POLICIES];
    int32_t device, device_index; /* where the policies' own contexts live (--device) */
    size_t n_policies;
    int32_t vocab;
    int32_t draft[SPECD_IPC_MAX_DRAFT];
    q_slot *qs;
    size_t n_qs, cap_qs;
    int q_cuda;          /* --q-device cuda[:N]: the q buffers are CUDA IPC buffers */
    int32_t q_device;    /* ... of this device */
    float *q_stage;      /* where the policy writes q before the copy to the device */
    size_t q_stage_floats;
} drafter;

static void policy_free(void *p) {
    policy_inst *inst = p;
    if (!inst) return;
    inst->ops->destroy(inst->state);
    specd_free(inst);
}

static const served *find_served(const drafter *d, const char *name) {
    if (!name || !*name) return &d->policies[0];
    for (size_t i = 0; i < d->n_policies; i++)
        if (!strcmp(d->policies[i].name, name)) return &d->policies[i];
    return NULL;
}

static specd_status make_policy(const drafter *d, const SpecdWire__OpenSeq *m, policy_inst **out,
                                specd_error *err) {
    const served *sv = find_served(d, m->policy);
    if (!sv) {
        char names[SPECD_DAEMON_MAX_POLICIES * 66] = "";
        for (size_t i = 0; i < d->n_policies; i++) {
            if (i) strcat(names, ", ");
            strcat(names, d->policies[i].name);
        }
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "open_seq: policy '%.80s' is not served here (served: %s); policies and "
                          "their options are fixed by the drafter's operator",
                          m->policy, names);
    }
    const specd_policy_ops *ops = sv->ops;
    const char *options = sv->options[0] ? sv->options : NULL;
    int32_t max_draft =
        m->has_max_draft && m->max_draft ? (int32_t)m->max_draft : DEFAULT_MAX_DRAFT;
    specd_policy_env env = {.n_vocab = d->vocab,
                            .max_draft = max_draft,
                            .shared = sv->shared,
                            .seed = m->seed,
                            .seq_key = (uint32_t)m->seq_id,
                            .device_set = 1,
                            .device = d->device,
                            .device_index = d->device_index};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = m->sampling->temperature;
    env.sampling.top_k = m->sampling->has_top_k ? (int32_t)m->sampling->top_k : 0;
    env.sampling.top_p = m->sampling->has_top_p ? m->sampling->top_p : 1.0f;
    env.sampling.min_p = m->sampling->has_min_p ? m->sampling->min_p : 0.0f;
    env.rule = specd_ipc_rule_from_wire(m);
    policy_inst *inst = specd_alloc_array(1, sizeof *inst);
    if (!inst) return specd_fail(err, SPECD_E_NOMEM, "open_seq: out of memory");
    specd_status st = ops->create(&env, options, &inst->state, err);
    if (st != SPECD_OK) {
        specd_free(inst);
        return st;
    }
    inst->ops = ops;
    inst->max_draft = max_draft;
    /* only rejection sampling reads q: greedy and coupled verification never do */
    inst->needs_q = (ops->flags & SPECD_POLICY_NEEDS_Q) && env.rule == SPECD_ACCEPT_REJECTION;
    *out = inst;
    return SPECD_OK;
}

/* The policy ABI's view of a sequence's history: the stored ids themselves (they are < vocab <=
 * INT32_MAX, so the int32_t and uint32_t views agree), never a copy per request. */
static const int32_t *history_of(const specd_seq *q) {
    return (const int32_t *)q->tokens;
}

static specd_status on_open(void *user, uint64_t owner, const SpecdWire__OpenSeq *m,
                            specd_error *err) {
    drafter *d = user;
    policy_inst *inst = NULL;
    SPECD_TRY(make_policy(d, m, &inst, err));
    specd_status st = specd_seq_store_open(d->seqs.store, owner, m, err);
    if (st != SPECD_OK) {
        policy_free(inst);
        return st;
    }
    specd_seq *q = specd_seq_store_get(d->seqs.store, owner, m->seq_id, NULL);
    q->engine = inst;
    return SPECD_OK;
}

static void q_release(drafter *d, uint64_t owner) {
    for (size_t i = 0; i < d->n_qs; i++)
        if (d->qs[i].owner == owner) {
            specd_ipc_buffer_destroy(d->qs[i].buf);
            d->qs[i] = d->qs[--d->n_qs];
            return;
        }
}

/* The owner's q buffer, with room for rows x vocab floats (made or replaced as needed). */
static specd_status q_buffer_for(drafter *d, uint64_t owner, int32_t rows, specd_ipc_buffer **out,
                                 specd_error *err) {
    size_t bytes = (size_t)rows * (size_t)d->vocab * sizeof(float);
    q_slot *slot = NULL;
    for (size_t i = 0; i < d->n_qs && !slot; i++)
        if (d->qs[i].owner == owner) slot = &d->qs[i];
    if (slot && specd_ipc_buffer_size(slot->buf) >= bytes) {
        *out = slot->buf;
        return SPECD_OK;
    }
    specd_ipc_buffer *b = NULL;
    SPECD_TRY(specd_ipc_buffer_create(d->q_cuda ? SPECD_IPC_BUFFER_CUDA : SPECD_IPC_BUFFER_SHM,
                                      bytes, d->q_device, &b, err));
    if (!slot) {
        if (d->n_qs == d->cap_qs) {
            size_t cap = d->cap_qs ? 2 * d->cap_qs : 4;
            q_slot *n = specd_alloc_array(cap, sizeof *n);
            if (!n) {
                specd_ipc_buffer_destroy(b);
                return specd_fail(err, SPECD_E_NOMEM, "propose: out of memory");
            }
            if (d->n_qs) memcpy(n, d->qs, d->n_qs * sizeof *n);
            specd_free(d->qs);
            d->qs = n;
            d->cap_qs = cap;
        }
        slot = &d->qs[d->n_qs++];
        slot->owner = owner;
    } else {
        specd_ipc_buffer_destroy(slot->buf);
    }
    slot->buf = b;
    *out = b;
    return SPECD_OK;
}

/* Where the policy writes q for a CUDA buffer: room for rows x vocab floats on the host. */
static specd_status q_stage_for(drafter *d, int32_t rows, float **out, specd_error *err) {
    size_t floats = (size_t)rows * (size_t)d->vocab;
    if (floats > d->q_stage_floats) {
        float *n = specd_alloc_array(floats, sizeof *n);
        if (!n) return specd_fail(err, SPECD_E_NOMEM, "propose: out of memory for q");
        specd_free(d->q_stage);
        d->q_stage = n;
        d->q_stage_floats = floats;
    }
    *out = d->q_stage;
    return SPECD_OK;
}

/* The staged rows into the peer's CUDA buffer; publishing then records its event after them. */
static specd_status q_upload(drafter *d, specd_ipc_buffer *qb, int32_t rows, specd_error *err) {
    const specd_cudart *rt = specd_cudart_get(NULL); /* loaded: checked at start */
    size_t bytes = (size_t)rows * (size_t)d->vocab * sizeof(float);
    int rc = rt->set_device(d->q_device);
    if (rc == SPECD_CUDA_SUCCESS)
        rc = rt->memcpy(specd_ipc_buffer_data(qb), d->q_stage, bytes,
                        SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    if (rc != SPECD_CUDA_SUCCESS) {
        (void)rt->get_last_error();
        return specd_fail(err, SPECD_E_IO, "propose: copying q to CUDA device %d: %s",
                          d->q_device, rt->get_error_string(rc));
    }
    return SPECD_OK;
}

static void on_peer_gone(void *user, uint64_t owner) {
    drafter *d = user;
    specd_seq_store_close_owner(d->seqs.store, owner);
    q_release(d, owner);
}

static specd_status on_commit(void *user, uint64_t owner, uint64_t seq_id, const uint32_t *tokens,
                              size_t n, int has_rollback, uint64_t rollback_to, specd_error *err) {
    drafter *d = user;
    SPECD_TRY(specd_seq_store_commit(d->seqs.store, owner, seq_id, tokens, n, has_rollback,
                                     rollback_to, err));
    specd_seq *q = specd_seq_store_get(d->seqs.store, owner, seq_id, NULL);
    policy_inst *inst = q->engine;
    if (has_rollback && inst->ops->rollback) inst->ops->rollback(inst->state, (int64_t)rollback_to);
    if (inst->ops->advance) inst->ops->advance(inst->state, history_of(q), (int64_t)q->n);
    return SPECD_OK;
}

static specd_status on_propose(void *user, uint64_t owner, const SpecdWire__Propose *m,
                               specd_ipc_draft_out *out, specd_error *err) {
    drafter *d = user;
    specd_seq *q = specd_seq_store_get(d->seqs.store, owner, m->seq_id, err);
    if (!q) return SPECD_E_STATE;
    policy_inst *inst = q->engine;
    int32_t max_draft = inst->max_draft;
    if (m->has_max_draft && m->max_draft && (int32_t)m->max_draft < max_draft)
        max_draft = (int32_t)m->max_draft;
    int32_t nd = 0;
    int has_q = 0;
    specd_ipc_buffer *qb = NULL;
    float *qw = NULL;
    if (inst->needs_q) {
        SPECD_TRY(q_buffer_for(d, owner, max_draft, &qb, err));
        /* SHM: the policy writes q where the host will read it, no copy */
        if (d->q_cuda)
            SPECD_TRY(q_stage_for(d, max_draft, &qw, err));
        else
            qw = specd_ipc_buffer_data(qb);
    }
    SPECD_TRY(inst->ops->propose(inst->state, history_of(q), (int64_t)q->n, max_draft, d->draft, &nd,
                                 qw, &has_q, err));
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
    if (qb && has_q && nd > 0) {
        if (d->q_cuda) SPECD_TRY(q_upload(d, qb, nd, err));
        SPECD_TRY(specd_ipc_buffer_publish(qb, NULL, &out->q_seq, err));
        out->q_buffer = qb;
    }
    return SPECD_OK;
}

/* One "NAME=SPEC" of the operator's: checked now (the policy exists, drafts from a drafter, and
 * its options are valid: one instance is made and dropped), so a bad one stops the start. */
static specd_status add_served(drafter *d, const char *item, specd_error *err) {
    served *sv = &d->policies[d->n_policies];
    const char *eq = strchr(item, '=');
    const char *spec = eq ? eq + 1 : item;
    size_t name_len = eq ? (size_t)(eq - item) : strcspn(item, ":");
    if (name_len == 0 || name_len >= sizeof sv->name)
        return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: bad name", item);
    memcpy(sv->name, item, name_len);
    sv->name[name_len] = '\0';
    if (strchr(sv->name, ':'))
        return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: a name has no ':'", item);
    char policy[65];
    size_t plen = strcspn(spec, ":");
    if (plen == 0 || plen >= sizeof policy)
        return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: bad policy", item);
    memcpy(policy, spec, plen);
    policy[plen] = '\0';
    const char *options = spec[plen] == ':' ? spec + plen + 1 : "";
    if (strlen(options) >= sizeof sv->options)
        return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: options too long", item);
    snprintf(sv->options, sizeof sv->options, "%s", options);
    sv->ops = specd_policy_find(policy);
    if (!sv->ops) return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: no policy named '%s'", item, policy);
    if (sv->ops->abi_version != SPECD_POLICY_ABI_VERSION || !sv->ops->propose)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "--policy %s: '%s' is self-speculative: it runs in the host's target "
                          "step, not in a drafter",
                          item, policy);
    if (!strcmp(policy, "remote"))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "--policy %s: a drafter does not forward to another drafter", item);
    for (size_t i = 0; i < d->n_policies; i++)
        if (!strcmp(d->policies[i].name, sv->name))
            return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: name given twice", item);
    specd_policy_env env = {.n_vocab = d->vocab, .max_draft = DEFAULT_MAX_DRAFT,
                            .device_set = 1, .device = d->device,
                            .device_index = d->device_index};
    env.sampling = specd_sampling_default_params();
    const char *opts = sv->options[0] ? sv->options : NULL;
    void *state = NULL;
    specd_error e;
    sv->shared = NULL;
    specd_status st = SPECD_OK;
    if (sv->ops->shared_create) st = sv->ops->shared_create(&env, opts, &sv->shared, &e);
    env.shared = sv->shared;
    if (st == SPECD_OK) st = sv->ops->create(&env, opts, &state, &e);
    if (st != SPECD_OK) {
        if (sv->shared) sv->ops->shared_destroy(sv->shared);
        sv->shared = NULL;
        return specd_fail(err, SPECD_E_INVALID_ARG, "--policy %s: %s", item, e.message);
    }
    sv->ops->destroy(state);
    d->n_policies++;
    return SPECD_OK;
}

/* After the sequences that borrow them. */
static void served_release(drafter *d) {
    for (size_t i = 0; i < d->n_policies; i++)
        if (d->policies[i].shared) d->policies[i].ops->shared_destroy(d->policies[i].shared);
}

specd_status specd_drafter_handlers_create(const specd_ipc_service_params *p,
                                           const specd_daemon_config *c, specd_ipc_handlers *h,
                                           specd_error *err) {
    if (p->model.vocab_size > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "drafter: vocab %u", p->model.vocab_size);
    drafter *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "drafter: out of memory");
    d->vocab = (int32_t)p->model.vocab_size;
    specd_status st = SPECD_OK;
    if (c) {
        d->device = c->device;
        d->device_index = c->device_index;
        d->q_cuda = c->q_device == SPECD_DEVICE_CUDA;
        d->q_device = c->q_device_index;
        char what[48];
        snprintf(what, sizeof what, "--q-device cuda:%d", d->q_device);
        /* refused now, not at the first sampled draft: the operator asked for device q */
        if (d->q_cuda) st = specd_ipc_cuda_check(d->q_device, what, err);
    }
    for (size_t i = 0; st == SPECD_OK && i < (c ? c->n_policies : 0); i++)
        st = add_served(d, c->policies[i], err);
    if (st == SPECD_OK && d->n_policies == 0) st = add_served(d, "ngram=ngram", err);
    if (st != SPECD_OK) {
        served_release(d);
        specd_free(d);
        return st;
    }
    char device[32] = "cpu";
    if (d->device == SPECD_DEVICE_CUDA) snprintf(device, sizeof device, "cuda:%d", d->device_index);
    for (size_t i = 0; i < d->n_policies; i++)
        specd_log(SPECD_LOG_INFO, "serving policy %s = %s%s%s (device %s)", d->policies[i].name,
                  d->policies[i].ops->name, d->policies[i].options[0] ? ":" : "",
                  d->policies[i].options, device);
    if (d->q_cuda)
        specd_log(SPECD_LOG_INFO, "draft distributions go to hosts in CUDA IPC buffers of device %d",
                  d->q_device);
    st = specd_daemon_seqs_create(&d->seqs, policy_free, err);
    if (st != SPECD_OK) {
        served_release(d);
        specd_free(d);
        return st;
    }
    *h = specd_daemon_seqs_handlers(&d->seqs);
    h->open_seq = on_open;
    h->commit = on_commit;
    h->propose = on_propose;
    h->peer_gone = on_peer_gone;
    return SPECD_OK;
}

void specd_drafter_handlers_destroy(specd_ipc_handlers *h) {
    if (!h || !h->user) return;
    drafter *d = h->user;
    specd_daemon_seqs_destroy(&d->seqs);
    served_release(d);
    for (size_t i = 0; i < d->n_qs; i++) specd_ipc_buffer_destroy(d->qs[i].buf);
    specd_free(d->qs);
    specd_free(d->q_stage);
    specd_free(d);
    h->user = NULL;
}
