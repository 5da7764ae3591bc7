/* The host library API (specd/spec.h): per-sequence speculative decoding state around a policy
 * and the acceptance engine. Drafter-shaped policies get the standard chain step; self-speculative
 * ones lay out and verify their own steps. */
#include "specd/spec.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/builtin.h"
#include "session/spec_internal.h"
#include "session/spec_processor.h"
#include "specd/runtime.h"
#include "session/spec_device.h"
#include "session/spec_verifier.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t prior_key(const specd_policy_ops *ops, const char *options) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)(uintptr_t)ops;
    h *= 1099511628211ULL;
    for (const char *c = options ? options : ""; *c; c++) {
        h ^= (uint8_t)*c;
        h *= 1099511628211ULL;
    }
    return h ? h : 1;
}

static const specd_adaptive_model *prior_find(const specd_spec *spec, uint64_t key) {
    for (int32_t i = 0; i < N_PRIORS; i++)
        if (spec->priors[i].key == key) return &spec->priors[i].model;
    return NULL;
}

static void prior_store(specd_spec *spec, uint64_t key, const specd_adaptive_model *m) {
    int32_t slot = -1;
    for (int32_t i = 0; i < N_PRIORS && slot < 0; i++)
        if (spec->priors[i].key == key || spec->priors[i].key == 0) slot = i;
    if (slot < 0) {
        slot = spec->next_prior;
        spec->next_prior = (spec->next_prior + 1) % N_PRIORS;
    }
    spec->priors[slot] = (guard_prior){.key = key, .model = *m};
}

/* Hands what the sequence's guard learned to the spec (only if it learned anything). */
static void seq_learned(specd_spec *spec, const spec_seq *q) {
    const specd_adaptive *g = &q->guard;
    if (!q->open || !g->enabled || g->m.w_plain <= 0) return;
    prior_store(spec, q->prior_key, &g->m);
}

specd_spec_params specd_spec_default_params(void) {
    specd_context_params cp = specd_context_default_params(); /* SPECD_DEVICE's device */
    specd_spec_params p = {.n_vocab = 0, .max_draft = 8, .max_seqs = 64,
                           .verifier_timeout_ms = 1000, .device = cp.device,
                           .device_index = cp.device_index};
    return p;
}

specd_seq_params specd_seq_default_params(void) {
    specd_seq_params p;
    memset(&p, 0, sizeof p);
    p.policy = "none";
    p.sampling = specd_sampling_default_params();
    p.rule = SPECD_ACCEPT_COUPLED;
    p.adaptive = 1;
    p.max_tokens = 256;
    p.stream_key = SPECD_STREAM_KEY_SLOT;
    p.penalties.repetition_penalty = 1.0f;
    return p;
}

specd_status specd_spec_create(const specd_spec_params *params, specd_spec **out,
                               specd_error *err) {
    if (!params || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    if (params->n_vocab < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: n_vocab %d must be >= 1",
                          params->n_vocab);
    if (params->max_draft < 1 || params->max_draft > SPECD_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: max_draft %d is outside [1, %d]",
                          params->max_draft, SPECD_MAX_DRAFT);
    if (params->max_step_rows != 0 &&
        (params->max_step_rows < 2 * params->max_draft + 1 ||
         params->max_step_rows > SPECD_MAX_STEP_ROWS))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: max_step_rows %d is outside [2 * max_draft + 1, %d]",
                          params->max_step_rows, SPECD_MAX_STEP_ROWS);
    if (params->n_embd < 0 || params->n_embd > (1 << 20))
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: n_embd %d is invalid", params->n_embd);
    if (params->max_seqs < 1 || params->max_seqs > (1 << 20))
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: max_seqs %d is outside [1, 2^20]",
                          params->max_seqs);
    if (params->device == -1) /* specd_context_default_params' mark for an unparsable variable */
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: SPECD_DEVICE '%s' is not one of cpu, cuda, cuda:N",
                          getenv("SPECD_DEVICE") ? getenv("SPECD_DEVICE") : "");
    if ((params->device != SPECD_DEVICE_CPU && params->device != SPECD_DEVICE_CUDA) ||
        params->device_index < 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: device %d:%d is not cpu or cuda:N",
                          params->device, params->device_index);
    specd_spec *s = specd_alloc_array(1, sizeof *s); /* zeroed: no priors yet */
    spec_seq *seqs = specd_alloc_array((size_t)params->max_seqs, sizeof *seqs);
    if (!s || !seqs) {
        specd_free(s);
        specd_free(seqs);
        return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
    }
    s->params = *params;
    s->params.verifier_endpoint = NULL; /* not kept: the client copied it */
    if (!s->params.max_step_rows) s->params.max_step_rows = 2 * params->max_draft + 1;
    s->seqs = seqs;
    size_t n = (size_t)params->max_seqs;
    s->batch = specd_alloc_array(n, sizeof *s->batch);
    s->batch_gen = specd_alloc_array(n, sizeof *s->batch_gen);
    s->batch_ids = specd_alloc_array(n, sizeof *s->batch_ids);
    s->batch_out = specd_alloc_array(n, sizeof *s->batch_out);
    s->batch_status = specd_alloc_array(n, sizeof *s->batch_status);
    s->batch_decided = specd_alloc_array(n, sizeof *s->batch_decided);
    if (!s->batch || !s->batch_gen || !s->batch_ids || !s->batch_out || !s->batch_status ||
        !s->batch_decided) {
        specd_spec_destroy(s);
        return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
    }
    if (params->verifier_endpoint) {
        specd_status st = specd_rverify_create(params, &s->rv, err);
        if (st != SPECD_OK) {
            specd_spec_destroy(s);
            return st;
        }
    }
    *out = s;
    return SPECD_OK;
}

static void seq_release(spec_seq *q) {
    if (q->ops && q->ops->destroy) q->ops->destroy(q->policy);
    specd_accept_destroy(q->accept);
    specd_sampler_destroy(q->sampler);
    specd_seq_proc_release(q);
    specd_free(q->stop);
    specd_free(q->bias_banned);
    specd_free(q->history);
    specd_free(q->draft);
    specd_free(q->q);
    specd_free(q->step_tokens);
    specd_free(q->step_pos);
    specd_free(q->step_rows);
    specd_free(q->step_gated);
    specd_free(q->emitted);
    specd_free(q->keep);
    specd_free(q->accept_prob);
    specd_free(q->tree_parent);
    specd_free(q->tree_path);
    specd_free(q->visible);
    specd_spec_shadow_free(q);
    memset(q, 0, sizeof *q);
}

void specd_spec_destroy(specd_spec *spec) {
    if (!spec) return;
    for (int32_t i = 0; i < spec->params.max_seqs && spec->seqs; i++) seq_release(&spec->seqs[i]);
    specd_rverify_destroy(spec->rv);
    specd_logits_scratch_free(&spec->scratch);
    specd_logits_scratch_free(&spec->hidden_scratch);
    specd_logits_scratch_free(&spec->rv_check);
    specd_logits_scratch_free(&spec->proc_scratch);
    specd_free(spec->proc_dead);
    specd_device_verify_free(spec->device);
    for (int32_t i = 0; i < N_SHARED; i++)
        if (spec->shared[i].ops) {
            spec->shared[i].ops->shared_destroy(spec->shared[i].state);
            specd_free(spec->shared[i].options);
        }
    specd_free(spec->batch);
    specd_free(spec->batch_gen);
    specd_free(spec->batch_ids);
    specd_free(spec->batch_out);
    specd_free(spec->batch_status);
    specd_free(spec->batch_decided);
    specd_free(spec->seqs);
    specd_free(spec);
}

specd_status specd_spec_find_seq(const specd_spec *spec, int32_t seq, spec_seq **out,
                                 specd_error *err) {
    if (!spec) return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL handle");
    if (seq < 0 || seq >= spec->params.max_seqs || !spec->seqs[seq].open)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: sequence %d is not open", seq);
    *out = &spec->seqs[seq];
    return SPECD_OK;
}

static const specd_policy_ops *resolve_policy(const specd_seq_params *p, specd_error *err) {
    const specd_policy_ops *ops = p->policy_ops ? p->policy_ops
                                                : specd_policy_find(p->policy ? p->policy : "none");
    if (!ops) {
        specd_fail(err, SPECD_E_INVALID_ARG, "spec: unknown policy '%s'", p->policy);
        return NULL;
    }
    int drafter = ops->propose != NULL;
    int self_spec = ops->layout != NULL && ops->verify != NULL;
    int v2 = ops->abi_version >= 2;
    if (ops->abi_version < 1 || ops->abi_version > SPECD_POLICY_ABI_VERSION || !ops->create ||
        !ops->destroy || drafter == self_spec ||
        (v2 && (ops->shared_create != NULL) != (ops->shared_destroy != NULL)) ||
        (v2 && (ops->flags & SPECD_POLICY_WANTS_HIDDEN) && (!self_spec || !ops->verify_hidden)) ||
        (v2 && (ops->flags & SPECD_POLICY_WANTS_PREFILL_HIDDEN) &&
         (!(ops->flags & SPECD_POLICY_WANTS_HIDDEN) || !ops->prefill_hidden)) ||
        (v2 && (ops->flags & SPECD_POLICY_HIDDEN_CATCH_UP) &&
         !(ops->flags & SPECD_POLICY_WANTS_PREFILL_HIDDEN)) ||
        (ops->abi_version >= 3 && (ops->device_q != NULL) != (ops->fetch_q != NULL))) {
        specd_fail(err, SPECD_E_MISMATCH,
                   "spec: policy '%s' has ABI %u (want 1..%u) or lacks required slots",
                   ops->name ? ops->name : "?", ops->abi_version, SPECD_POLICY_ABI_VERSION);
        return NULL;
    }
    return ops;
}

static specd_status seq_alloc(spec_seq *q, const specd_spec_params *sp, int64_t n_prompt,
                              const specd_seq_params *p) {
    int32_t k1 = sp->max_step_rows; /* the most rows a step may have */
    int tree = specd_policy_has_tree(q->ops);
    int32_t n_drafts = tree ? k1 - 1 : sp->max_draft; /* proposals: tree nodes or a chain */
    int64_t cap = n_prompt + p->max_tokens + k1;
    q->cap_history = cap;
    q->history = specd_alloc_array((size_t)cap, sizeof *q->history);
    q->draft = specd_alloc_array((size_t)n_drafts, sizeof *q->draft);
    q->step_tokens = specd_alloc_array((size_t)k1, sizeof(int32_t));
    q->step_pos = specd_alloc_array((size_t)k1, sizeof(int32_t));
    q->step_rows = specd_alloc_array((size_t)k1, sizeof(int32_t));
    q->step_gated = specd_alloc_array((size_t)k1, 1);
    q->emitted = specd_alloc_array((size_t)k1, sizeof(int32_t));
    q->keep = specd_alloc_array((size_t)k1, sizeof(int32_t));
    q->accept_prob = specd_alloc_array((size_t)sp->max_draft, sizeof(float));
    if (tree) {
        q->tree_parent = specd_alloc_array((size_t)k1, sizeof(int32_t));
        q->tree_path = specd_alloc_array((size_t)k1, sizeof(int32_t));
        q->visible = specd_alloc_array((size_t)(cap + k1) * (size_t)k1, 1);
        if (!q->tree_parent || !q->tree_path || !q->visible) return SPECD_E_NOMEM;
    }
    size_t q_floats;
    int needs_q = q->ops->propose && (specd_policy_flags(q->ops) & SPECD_POLICY_NEEDS_Q);
    if (needs_q && specd_mul_ok((size_t)n_drafts, (size_t)sp->n_vocab, &q_floats) &&
        specd_mul_ok(q_floats, sizeof(float), &q_floats))
        q->q = specd_alloc(q_floats); /* written by the policy before it is read: not zeroed */
    if (p->n_stop_tokens > 0) q->stop = specd_alloc_array((size_t)p->n_stop_tokens, sizeof(int32_t));
    int ok = q->history && q->draft && q->step_tokens && q->step_pos && q->step_rows &&
             q->step_gated &&
             q->emitted && q->keep && q->accept_prob && (!needs_q || q->q) &&
             (p->n_stop_tokens <= 0 || q->stop);
    return ok ? SPECD_OK : SPECD_E_NOMEM;
}

/* The spec's shared state for (ops, options), made on first use (policy ABI 2). */
static specd_status shared_state(specd_spec *spec, const specd_policy_ops *ops,
                                 const specd_policy_env *env, const char *options, void **out,
                                 specd_error *err) {
    *out = NULL;
    if (ops->abi_version < 2 || !ops->shared_create) return SPECD_OK;
    const char *opts = options ? options : "";
    int32_t free_slot = -1;
    for (int32_t i = 0; i < N_SHARED; i++) {
        policy_shared *s = &spec->shared[i];
        if (!s->ops) {
            if (free_slot < 0) free_slot = i;
        } else if (s->ops == ops && !strcmp(s->options, opts)) {
            *out = s->state;
            return SPECD_OK;
        }
    }
    if (free_slot < 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: more than %d policy/options pairs with shared state in one spec",
                          N_SHARED);
    size_t len = strlen(opts) + 1;
    char *copy = specd_alloc(len);
    if (!copy) return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory");
    memcpy(copy, opts, len);
    void *state = NULL;
    specd_status st = ops->shared_create(env, options, &state, err);
    if (st != SPECD_OK) {
        specd_free(copy);
        return st;
    }
    spec->shared[free_slot] = (policy_shared){.ops = ops, .options = copy, .state = state};
    *out = state;
    return SPECD_OK;
}

/* What the logits intake needs to make masked tokens unreachable under q's transform. */
static specd_status mask_rule_init(spec_seq *q, const specd_seq_params *p) {
    specd_mask_rule *m = &q->mask;
    m->temperature = p->rule == SPECD_ACCEPT_GREEDY ? 0.0f : p->sampling.temperature;
    int32_t n_banned = 0;
    for (size_t i = 0; i < p->sampling.n_bias; i++) {
        float b = p->sampling.bias[i].bias;
        if (b == -INFINITY) n_banned++;
        else if (isfinite(b)) {
            m->bias_min = b < m->bias_min ? b : m->bias_min;
            m->bias_max = b > m->bias_max ? b : m->bias_max;
        }
    }
    if (n_banned > 0) {
        q->bias_banned = specd_alloc_array((size_t)n_banned, sizeof(int32_t));
        if (!q->bias_banned) return SPECD_E_NOMEM;
        for (size_t i = 0; i < p->sampling.n_bias; i++)
            if (p->sampling.bias[i].bias == -INFINITY)
                q->bias_banned[m->n_banned++] = p->sampling.bias[i].token;
        m->banned = q->bias_banned;
    }
    return SPECD_OK;
}

specd_status specd_spec_seq_open(specd_spec *spec, int32_t seq, const int32_t *prompt,
                                 int64_t n_prompt, const specd_seq_params *params,
                                 specd_error *err) {
    if (!spec || !params || !prompt)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    const specd_spec_params *sp = &spec->params;
    if (seq < 0 || seq >= sp->max_seqs)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: sequence id %d is outside [0, %d)",
                          seq, sp->max_seqs);
    if (spec->seqs[seq].open)
        return specd_fail(err, SPECD_E_STATE, "spec: sequence %d is already open", seq);
    if (n_prompt < 1 || n_prompt > (int64_t)1 << 30)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: prompt length %lld is invalid",
                          (long long)n_prompt);
    if (params->max_tokens < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: max_tokens %d must be >= 1",
                          params->max_tokens);
    if (params->n_stop_tokens < 0 || (params->n_stop_tokens > 0 && !params->stop_tokens))
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: bad stop token list");
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= sp->n_vocab)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "spec: prompt token %lld is id %d, outside the vocabulary [0, %d)",
                              (long long)i, prompt[i], sp->n_vocab);
    const specd_policy_ops *ops = resolve_policy(params, err);
    if (!ops) return err ? err->status : SPECD_E_INVALID_ARG;
    if (ops->abi_version >= 2 && (ops->flags & SPECD_POLICY_WANTS_HIDDEN) && sp->n_embd < 1)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: policy %s verifies with hidden states: set "
                          "specd_spec_params.n_embd", ops->name);
    if (spec->rv && !ops->propose)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: policy %s verifies its own steps; a remote verifier needs a "
                          "drafter-shaped policy", ops->name);

    uint64_t stream = params->stream_key == SPECD_STREAM_KEY_SLOT ? (uint64_t)seq
                                                                  : params->stream_key;
    if (spec->rv && stream != (uint64_t)seq)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "spec: a remote verifier keys sampling on the sequence id; stream key "
                          "%llu needs the verify protocol to carry it",
                          (unsigned long long)stream);

    spec_seq *q = &spec->seqs[seq];
    memset(q, 0, sizeof *q);
    q->ops = ops;
    q->id = seq;
    q->rule = params->rule;
    q->tau = params->tau;
    q->seed = params->seed;
    q->stream_key = stream;
    q->key = specd_stream_sample_key(params->seed, stream, 0);
    q->max_tokens = params->max_tokens;
    q->sampling = params->sampling;
    q->sampling.bias = NULL; /* borrowed for the open call only */
    specd_status st = seq_alloc(q, sp, n_prompt, params);
    if (st == SPECD_OK) st = mask_rule_init(q, params);
    if (st != SPECD_OK) {
        seq_release(q);
        return specd_fail(err, st, "spec: out of memory opening sequence %d", seq);
    }
    if ((st = specd_seq_proc_open(spec, q, prompt, n_prompt, params, err)) != SPECD_OK) {
        q->ops = NULL; /* no policy yet: nothing for destroy */
        seq_release(q);
        return st;
    }

    specd_accept_params ap = specd_accept_default_params();
    ap.rule = params->rule;
    ap.sampling = params->sampling;
    /* a tree may have as many nodes as a step has rows after the pending token's */
    ap.max_k = specd_policy_has_tree(ops) ? sp->max_step_rows - 1 : sp->max_draft;
    ap.max_vocab = sp->n_vocab;
    ap.relaxed_tau = params->tau;
    specd_sampling_params plain = params->sampling;
    if (params->rule == SPECD_ACCEPT_GREEDY) plain.temperature = 0.0f;
    specd_policy_env env = {.n_vocab = sp->n_vocab, .max_draft = sp->max_draft,
                            .target = sp->target, .target_path = sp->target_path,
                            .sampling = params->sampling, .rule = params->rule,
                            .tau = params->tau, .seed = q->key.seed, .seq_key = q->key.sequence,
                            .user = params->policy_user, .max_step_rows = sp->max_step_rows,
                            .device_set = 1, .device = sp->device,
                            .device_index = sp->device_index};
    if ((st = specd_accept_create(&ap, &q->accept, err)) != SPECD_OK ||
        (st = specd_sampler_create(&plain, sp->n_vocab, &q->sampler, err)) != SPECD_OK ||
        (st = shared_state(spec, ops, &env, params->policy_options, &env.shared, err)) != SPECD_OK ||
        (st = ops->create(&env, params->policy_options, &q->policy, err)) != SPECD_OK) {
        q->ops = NULL; /* create failed or never ran: nothing for destroy */
        seq_release(q);
        return st;
    }
    q->verifier = specd_spec_verifier_choose(spec, params);
    if (q->verifier->open &&
        (st = q->verifier->open(spec, q, prompt, n_prompt, params, err)) != SPECD_OK) {
        seq_release(q);
        return st;
    }
    memcpy(q->history, prompt, (size_t)n_prompt * sizeof *prompt);
    q->n_history = q->n_prompt = n_prompt;
    if (params->n_stop_tokens > 0)
        memcpy(q->stop, params->stop_tokens, (size_t)params->n_stop_tokens * sizeof(int32_t));
    q->n_stop = params->n_stop_tokens;
    q->prior_key = prior_key(ops, params->policy_options);
    /* a policy that reads every row's hidden state lays out every step itself unless plain
     * steps' rows can catch it up (policy.h) */
    uint32_t flags = specd_policy_flags(ops);
    int guarded = params->adaptive && (!(flags & SPECD_POLICY_WANTS_HIDDEN) ||
                                       (flags & SPECD_POLICY_HIDDEN_CATCH_UP));
    specd_adaptive_init(&q->guard, guarded, ops->propose == NULL, sp->max_draft,
                        prior_find(spec, q->prior_key));
    if (guarded && !specd_spec_shadow_alloc(q, sp->max_step_rows - 1)) {
        seq_release(q);
        return specd_fail(err, SPECD_E_NOMEM, "spec: out of memory opening sequence %d", seq);
    }
    /* the policy's first step catches up on the prompt; the guard weighs probes by steps left */
    specd_adaptive_set_text(&q->guard, n_prompt, params->max_tokens);
    q->open = 1;
    return SPECD_OK;
}

int specd_spec_seq_wants_prefill_hidden(const specd_spec *spec, int32_t seq) {
    spec_seq *q = NULL;
    if (specd_spec_find_seq(spec, seq, &q, NULL) != SPECD_OK) return 0;
    return (specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_PREFILL_HIDDEN) != 0;
}

specd_status specd_spec_seq_prefill_hidden(specd_spec *spec, int32_t seq, const float *hidden,
                                           int64_t row0, int32_t n_rows, specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    if (!(specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_PREFILL_HIDDEN)) return SPECD_OK;
    if (!hidden || n_rows < 1 || row0 < 0 || row0 + n_rows > q->n_prompt - 1)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "spec: sequence %d: prefill hidden rows [%lld, %lld) are not prompt "
                          "rows [0, %lld)", seq, (long long)row0, (long long)(row0 + n_rows),
                          (long long)(q->n_prompt - 1));
    if (q->n_history != q->n_prompt || q->stats.n_steps > 0)
        return specd_fail(err, SPECD_E_STATE,
                          "spec: sequence %d: prefill hidden states come before the first step",
                          seq);
    uint64_t t0 = specd_now_ns();
    specd_status st = q->ops->prefill_hidden(q->policy, q->history, q->n_prompt, hidden, row0,
                                             n_rows, spec->params.n_embd, err);
    q->stats.propose_ns += specd_now_ns() - t0;
    return st;
}

void specd_spec_seq_close(specd_spec *spec, int32_t seq) {
    if (!spec || seq < 0 || seq >= spec->params.max_seqs || !spec->seqs[seq].open) return;
    spec_seq *q = &spec->seqs[seq];
    seq_learned(spec, q);
    if (q->verifier->close) q->verifier->close(spec, q);
    seq_release(q);
}

int specd_spec_seq_done(const specd_spec *spec, int32_t seq) {
    spec_seq *q = NULL;
    if (specd_spec_find_seq(spec, seq, &q, NULL) != SPECD_OK) return 1;
    return q->done;
}

const int32_t *specd_spec_seq_output(const specd_spec *spec, int32_t seq, int64_t *n_out) {
    spec_seq *q = NULL;
    if (specd_spec_find_seq(spec, seq, &q, NULL) != SPECD_OK) {
        if (n_out) *n_out = 0;
        return NULL;
    }
    if (n_out) *n_out = q->n_history - q->n_prompt;
    return q->history + q->n_prompt;
}

const int32_t *specd_spec_seq_prompt(const specd_spec *spec, int32_t seq, int64_t *n_prompt) {
    spec_seq *q = NULL;
    if (specd_spec_find_seq(spec, seq, &q, NULL) != SPECD_OK) {
        if (n_prompt) *n_prompt = 0;
        return NULL;
    }
    if (n_prompt) *n_prompt = q->n_prompt;
    return q->history;
}

float *specd_spec_verifier_logits(const specd_spec *spec) {
    return spec && spec->rv ? specd_rverify_logits(spec->rv) : NULL;
}

int32_t specd_spec_max_draft(const specd_spec *spec) { return spec ? spec->params.max_draft : 0; }

int32_t specd_spec_max_step_rows(const specd_spec *spec) {
    return spec ? spec->params.max_step_rows : 0;
}

specd_status specd_spec_seq_stats(const specd_spec *spec, int32_t seq, specd_seq_stats *out,
                                  specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    *out = q->stats;
    out->n_backoffs = q->guard.n_backoffs;
    out->n_guard_plain = q->guard.n_plain_steps;
    return SPECD_OK;
}

/* A tree of proposals from propose_tree: [pending | nodes], each node seeing the cache, the
 * pending token and its ancestors, at the position of its depth. A chain-shaped tree is laid out
 * (and verified) as a chain. */
static specd_status layout_tree(const specd_spec *spec, spec_seq *q, int32_t k,
                                specd_step_layout *out, specd_error *err) {
    int32_t max_nodes = specd_spec_max_step_rows(spec) - 1, n = 0;
    uint64_t t0 = specd_now_ns();
    specd_policy_tell_cost(q->ops, q->policy, &q->guard);
    SPECD_TRY(q->ops->propose_tree(q->policy, q->history, q->n_history, max_nodes, k,
                                   q->tree_parent, q->draft, &n, q->q, &q->has_q, err));
    q->stats.propose_ns += specd_now_ns() - t0;
    if (n < 0 || n > max_nodes)
        return specd_fail(err, SPECD_E_INTERNAL, "policy %s proposed %d nodes (max %d)",
                          q->ops->name, n, max_nodes);
    for (int32_t i = 0; i < n; i++) {
        int32_t par = q->tree_parent[i];
        if (par < -1 || par >= i || q->draft[i] < 0 || q->draft[i] >= spec->params.n_vocab)
            return specd_fail(err, SPECD_E_INTERNAL,
                              "policy %s: node %d has parent %d, token %d (not a tree over the "
                              "vocabulary)", q->ops->name, i, par, q->draft[i]);
    }
    specd_seq_proc_admit_tree(q, spec->params.n_vocab, &n); /* nodes a row processor forbids */
    int chain = 1;
    const int32_t cached = (int32_t)(q->n_history - 1), width = cached + n + 1;
    for (int32_t i = 0; i < n; i++) {
        int32_t par = q->tree_parent[i];
        int32_t depth = par < 0 ? 1 : q->step_pos[1 + par] - cached + 1;
        if (depth > k)
            return specd_fail(err, SPECD_E_INTERNAL, "policy %s: node %d is deeper than %d",
                              q->ops->name, i, k);
        chain &= par == i - 1;
        q->step_tokens[1 + i] = q->draft[i];
        q->step_pos[1 + i] = cached + depth;
    }
    q->n_draft = n;
    q->tree = n > 0 && !chain;
    q->step_tokens[0] = q->history[q->n_history - 1];
    q->step_pos[0] = cached;
    for (int32_t i = 0; i <= n; i++) q->step_rows[i] = i;
    *out = (specd_step_layout){.n_tokens = n + 1, .tokens = q->step_tokens, .pos = q->step_pos,
                               .n_rows = n + 1, .rows = q->step_rows};
    if (!q->tree) return SPECD_OK;
    /* row r sees the cache, then itself and its ancestors among the step's tokens */
    memset(q->visible, 0, (size_t)width * (size_t)(n + 1));
    for (int32_t r = 0; r <= n; r++) {
        uint8_t *row = q->visible + (size_t)r * (size_t)width;
        memset(row, 1, (size_t)cached);
        row[cached] = 1;
        for (int32_t a = r - 1; a >= 0; a = q->tree_parent[a]) row[cached + 1 + a] = 1;
    }
    out->visible = q->visible;
    return SPECD_OK;
}

/* [pending | up to k drafts] under causal attention; k = 0 is a plain step. */
static specd_status layout_chain(const specd_spec *spec, spec_seq *q, int32_t k,
                                 specd_step_layout *out, specd_error *err) {
    int64_t remaining = q->max_tokens - (q->n_history - q->n_prompt);
    if (k > remaining - 1) k = (int32_t)(remaining - 1);
    q->n_draft = 0;
    q->has_q = 0;
    q->q_dev = NULL;
    q->tree = 0;
    if (k > 0 && specd_policy_has_tree(q->ops)) {
        SPECD_TRY(layout_tree(spec, q, k, out, err));
        if (q->n_draft > 0 || q->n_proc == 0) return SPECD_OK;
        /* an empty tree: a chain of the row processors' forced drafts, if any */
    } else if (k > 0) {
        uint64_t t0 = specd_now_ns();
        specd_policy_tell_cost(q->ops, q->policy, &q->guard);
        SPECD_TRY(q->ops->propose(q->policy, q->history, q->n_history, k, q->draft, &q->n_draft,
                                  q->q, &q->has_q, err));
        q->stats.propose_ns += specd_now_ns() - t0;
        if (q->has_q) q->q_dev = specd_policy_device_q(q->ops, q->policy);
        if (q->n_draft < 0 || q->n_draft > k)
            return specd_fail(err, SPECD_E_INTERNAL, "policy %s proposed %d tokens (max %d)",
                              q->ops->name, q->n_draft, k);
        for (int32_t i = 0; i < q->n_draft; i++)
            if (q->draft[i] < 0 || q->draft[i] >= spec->params.n_vocab)
                return specd_fail(err, SPECD_E_INTERNAL, "policy %s proposed id %d (vocab %d)",
                                  q->ops->name, q->draft[i], spec->params.n_vocab);
        specd_seq_proc_admit_chain(q);
    }
    /* forced drafts are the processors', not the policy's: made even when the guard says plain */
    if (q->n_proc > 0 && remaining > 1)
        specd_seq_proc_force(q, remaining - 1 < spec->params.max_draft ? (int32_t)(remaining - 1)
                                                                       : spec->params.max_draft,
                             spec->params.n_vocab);
    int32_t n = q->n_draft + 1;
    q->step_tokens[0] = q->history[q->n_history - 1];
    for (int32_t i = 0; i < n; i++) {
        if (i > 0) q->step_tokens[i] = q->draft[i - 1];
        q->step_pos[i] = (int32_t)(q->n_history - 1 + i);
        q->step_rows[i] = i;
    }
    *out = (specd_step_layout){.n_tokens = n, .tokens = q->step_tokens, .pos = q->step_pos,
                               .n_rows = n, .rows = q->step_rows};
    return SPECD_OK;
}

/* Checks a keyed chain a self-speculative layout declared (policy ABI 2) and takes it over. */
static specd_status take_keyed_chain(const specd_spec *spec, spec_seq *q,
                                     const specd_step_layout *l, specd_error *err) {
    const char *name = q->ops->name;
    int32_t n = l->n_chain;
    if (n < 0 || n > spec->params.max_draft || !l->chain_draft || !l->chain_key || !l->chain_keep)
        return specd_fail(err, SPECD_E_INTERNAL,
                          "policy %s: keyed chain of %d drafts (max %d) lacks its arrays", name, n,
                          spec->params.max_draft);
    if (l->chain_bonus != SPECD_CHAIN_NO_BONUS &&
        (l->chain_bonus < 0 || l->chain_bonus >= l->n_rows))
        return specd_fail(err, SPECD_E_INTERNAL,
                          "policy %s: keyed chain's bonus row %d is not a scored row (%d)", name,
                          l->chain_bonus, l->n_rows);
    for (int32_t i = 0; i < n; i++) {
        if (l->chain_draft[i] < 0 || l->chain_draft[i] >= spec->params.n_vocab ||
            l->chain_key[i] < 0 || l->chain_key[i] >= l->n_rows)
            return specd_fail(err, SPECD_E_INTERNAL,
                              "policy %s: keyed chain draft %d is id %d with key row %d (vocab "
                              "%d, %d scored rows)", name, i, l->chain_draft[i], l->chain_key[i],
                              spec->params.n_vocab, l->n_rows);
    }
    /* the keep list the step may produce must be distinct rows of the step */
    for (int32_t i = 0; i <= n; i++) {
        int32_t r = l->chain_keep[i];
        if (r < -1 || r >= l->n_tokens)
            return specd_fail(err, SPECD_E_INTERNAL,
                              "policy %s: keyed chain keeps row %d of a %d-token step", name, r,
                              l->n_tokens);
        for (int32_t j = 0; j < i && r >= 0; j++)
            if (l->chain_keep[j] == r)
                return specd_fail(err, SPECD_E_INTERNAL,
                                  "policy %s: keyed chain keeps row %d twice", name, r);
    }
    q->n_chain = n;
    q->chain_draft = l->chain_draft;
    q->chain_key = l->chain_key;
    q->chain_keep = l->chain_keep;
    q->chain_q = l->chain_q;
    q->chain_bonus = l->chain_bonus;
    return SPECD_OK;
}

specd_status specd_spec_seq_layout_step(specd_spec *spec, spec_seq *q, specd_step_layout *out,
                                        specd_error *err) {
    if (q->done) return specd_fail(err, SPECD_E_STATE, "spec: sequence %d has finished", q->id);
    q->laid_out = 0;
    q->step_gen++;
    q->t_step = specd_now_ns();
    memset(out, 0, sizeof *out); /* fields a v1 policy does not know stay NULL */
    /* The guard governs both shapes: a drafter gets a draft length, a self-speculative policy
     * either lays out its own step or the session makes it a plain one. */
    int32_t k = specd_adaptive_budget(&q->guard);
    q->plain_step = !q->ops->propose && k == 0;
    q->n_chain = 0;
    if (q->ops->propose || q->plain_step) {
        SPECD_TRY(layout_chain(spec, q, k, out, err));
        if (k > 0) specd_spec_shadow_drop(q);
        else specd_spec_shadow_propose(spec, q);
    } else {
        uint64_t t0 = specd_now_ns();
        SPECD_TRY(q->ops->layout(q->policy, q->history, q->n_history, out, err));
        q->stats.propose_ns += specd_now_ns() - t0;
        int32_t most = specd_spec_max_step_rows(spec);
        int32_t least = specd_policy_flags(q->ops) & SPECD_POLICY_MAY_EMIT_NONE ? 0 : 1;
        if (out->n_tokens < 1 || out->n_tokens > most || out->n_rows < least ||
            out->n_rows > most)
            return specd_fail(err, SPECD_E_INTERNAL, "policy %s laid out %d rows, %d scored (max %d)",
                              q->ops->name, out->n_tokens, out->n_rows, most);
        if (q->ops->abi_version >= 2 && out->n_chain != 0)
            SPECD_TRY(take_keyed_chain(spec, q, out, err));
    }
    for (int32_t r = 0; r < out->n_rows; r++)
        q->step_gated[r] = out->lora_gate && out->rows && out->rows[r] >= 0 &&
                           out->rows[r] < out->n_tokens && out->lora_gate[out->rows[r]] != 0.0f;
    q->n_step_tokens = out->n_tokens;
    q->n_step_rows = out->n_rows;
    q->laid_out = 1;
    q->own_ns = specd_now_ns() - q->t_step;
    return SPECD_OK;
}

specd_status specd_spec_seq_layout(specd_spec *spec, int32_t seq, specd_step_layout *out,
                                   specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL layout");
    return specd_spec_seq_layout_step(spec, q, out, err);
}

/* (spec_internal.h) The device kernel's own check of unusable rows (BAD_Q) sends the step to the
 * copy path, whose verify_chain calls this first: the same rows fail here, so the step is the
 * plain one the host path makes of unusable q. */
void specd_spec_seq_q_to_host(spec_seq *q) {
    if (!q->has_q || !q->q_dev) return;
    specd_error e;
    specd_status st = q->ops->fetch_q(q->policy, q->q, &e);
    q->q_dev = NULL;
    if (st == SPECD_OK) return;
    if (!q->warned_bad_q)
        specd_log(SPECD_LOG_WARN, "spec: sequence %d: the drafter's draft distributions are "
                  "unusable, its drafts dropped: %s (said once per sequence)", (int)q->id,
                  e.message);
    q->warned_bad_q = 1;
    q->n_draft = 0;
    q->has_q = 0;
    q->tree = 0;
}

/* A self-speculative layout's keyed chain (specd_step_layout.n_chain): verified here on the
 * rows the policy named; the pending row and the emitted drafts that are not the new pending
 * token keep their KV. */
static specd_status verify_keyed_chain(specd_spec *spec, spec_seq *q, const float *logits,
                                       specd_step_outcome *out, specd_error *err) {
    int32_t n_vocab = spec->params.n_vocab;
    specd_sample_key key = q->key;
    key.position = (uint32_t)q->n_history;
    specd_chain_input in = {.k = q->n_chain, .draft = q->chain_draft, .draft_probs = q->chain_q,
                            .q_vocab = n_vocab, .target_logits = logits, .n_vocab = n_vocab,
                            .key = key};
    specd_chain_keys keys = {.n_rows = q->n_step_rows, .key_row = q->chain_key,
                             .bonus_row = q->chain_bonus};
    specd_chain_result res = {.tokens = q->emitted, .accept_prob = q->accept_prob};
    SPECD_TRY(specd_accept_chain_keyed(q->accept, &in, &keys, &res, err));
    int32_t n_keep = 0;
    if (q->chain_keep[0] >= 0) q->keep[n_keep++] = q->chain_keep[0];
    for (int32_t i = 0; i < res.n_accepted && i + 1 < res.n_emitted; i++)
        if (q->chain_keep[1 + i] >= 0) q->keep[n_keep++] = q->chain_keep[1 + i];
    for (int32_t i = 1; i < n_keep; i++) /* ascending, as hosts expect (rows may be permuted) */
        for (int32_t j = i; j > 0 && q->keep[j - 1] > q->keep[j]; j--) {
            int32_t t = q->keep[j];
            q->keep[j] = q->keep[j - 1];
            q->keep[j - 1] = t;
        }
    *out = (specd_step_outcome){.n_emitted = res.n_emitted, .emitted = q->emitted,
                                .n_keep = n_keep, .keep = q->keep, .n_drafted = q->n_chain,
                                .n_accepted = res.n_accepted, .lossy = res.lossy};
    return SPECD_OK;
}

/* A plain step of a policy that catches up (SPECD_POLICY_HIDDEN_CATCH_UP): its row (the
 * pending token's, whose next token the step just decided) goes to the policy. The tokens are
 * decided already, so a policy that cannot take the row only loses its drafts' context: said
 * once, the step stands. */
static void catch_up_row(const specd_spec *spec, spec_seq *q, const float *hidden,
                         int64_t row) {
    uint64_t t0 = specd_now_ns();
    specd_error e;
    specd_status st = q->ops->prefill_hidden(q->policy, q->history, q->n_history, hidden, row, 1,
                                             spec->params.n_embd, &e);
    q->stats.propose_ns += specd_now_ns() - t0;
    if (st != SPECD_OK && !q->warned_catch_up) {
        q->warned_catch_up = 1;
        specd_log(SPECD_LOG_WARN, "spec: sequence %d: policy %s did not take a plain step's "
                  "hidden state: %s (said once per sequence)", (int)q->id, q->ops->name,
                  e.message);
    }
}

/* A drafter that learns from the target (policy ABI 3) sees every scored row of the step just
 * decided, rejected drafts' rows included: a drafter-shaped step scores rows 0..n_step_rows in
 * token order, so step_tokens are the rows' inputs. logits are the host rows verify read (a step
 * decided on the device has none, and is not observed). */
static void observe_rows(const specd_spec *spec, spec_seq *q, const float *logits) {
    uint64_t t0 = specd_now_ns();
    q->ops->observe_rows(q->policy, q->step_tokens, q->n_step_rows, logits, spec->params.n_vocab,
                         spec->params.n_vocab);
    q->stats.propose_ns += specd_now_ns() - t0;
}

/* A plain step's hidden row for a policy that catches up (SPECD_POLICY_HIDDEN_CATCH_UP), or
 * NULL: only the policy's context needs it, so a bad one is left out and the step stands. */
static const float *catch_up_hidden(specd_spec *spec, spec_seq *q, const specd_logits *hidden,
                                    int32_t row0) {
    if (!(specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_HIDDEN) || !q->plain_step || !hidden ||
        q->n_step_rows < 1 || !specd_policy_catches_up(q->ops))
        return NULL;
    char what[32];
    snprintf(what, sizeof what, "sequence %d hidden", (int)q->id);
    const float *hid = NULL;
    if (specd_logits_intake(&spec->hidden_scratch, specd_spec_max_step_rows(spec),
                            spec->params.n_embd, hidden, row0, q->n_step_rows, NULL, what, NULL,
                            NULL, &hid, NULL) != SPECD_OK)
        return NULL;
    return hid;
}

/* A self-speculative policy's own step: a keyed chain the engine decides, or the policy's
 * verify (with the rows' hidden states when it wants them). *logits: the host rows read. */
static specd_status verify_own(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                               const specd_logits *hidden, int32_t row0, specd_step_outcome *o,
                               const float **logits, specd_error *err) {
    SPECD_TRY(specd_spec_seq_host_rows(spec, q, lg, row0, logits, err));
    const float *hid = NULL;
    int wants_hidden = specd_policy_flags(q->ops) & SPECD_POLICY_WANTS_HIDDEN;
    if (wants_hidden && q->n_step_rows > 0 && q->n_chain == 0) {
        if (!hidden)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "spec: sequence %d: policy %s verifies with hidden states and "
                              "none were given", q->id, q->ops->name);
        char what[32];
        snprintf(what, sizeof what, "sequence %d hidden", (int)q->id);
        SPECD_TRY(specd_logits_intake(&spec->hidden_scratch, specd_spec_max_step_rows(spec),
                                      spec->params.n_embd, hidden, row0, q->n_step_rows, NULL,
                                      what, NULL, NULL, &hid, err));
    }
    if (q->n_chain > 0) return verify_keyed_chain(spec, q, *logits, o, err);
    /* the policy's verify is its own work too (a residual head drafts there) */
    uint64_t p0 = specd_now_ns();
    if (wants_hidden)
        SPECD_TRY(q->ops->verify_hidden(q->policy, *logits, hid, spec->params.n_embd, o, err));
    else
        SPECD_TRY(q->ops->verify(q->policy, *logits, o, err));
    q->stats.propose_ns += specd_now_ns() - p0;
    return SPECD_OK;
}

/* What the step's verification returned fits the step (a policy's own verify may not). */
static specd_status check_outcome(const specd_spec *spec, const spec_seq *q,
                                  const specd_step_outcome *o, specd_error *err) {
    int32_t most = specd_spec_max_step_rows(spec);
    int may_emit_none = specd_policy_flags(q->ops) & SPECD_POLICY_MAY_EMIT_NONE;
    if (o->n_emitted < (may_emit_none ? 0 : 1) || o->n_emitted > most)
        return specd_fail(err, SPECD_E_INTERNAL, "policy %s emitted %d tokens", q->ops->name,
                          o->n_emitted);
    /* hosts copy the keep list into max_step_rows slots and index the step's rows with it */
    if (o->n_keep < 0 || o->n_keep > most || o->n_keep > q->n_step_tokens)
        return specd_fail(err, SPECD_E_INTERNAL, "policy %s kept %d of %d rows", q->ops->name,
                          o->n_keep, q->n_step_tokens);
    for (int32_t i = 0; i < o->n_keep; i++)
        if (o->keep[i] < 0 || o->keep[i] >= q->n_step_tokens ||
            (i > 0 && o->keep[i] <= o->keep[i - 1]))
            return specd_fail(err, SPECD_E_INTERNAL,
                              "policy %s: keep list is not ascending rows of the step",
                              q->ops->name);
    return SPECD_OK;
}

/* The step's counters. */
static void count_step(spec_seq *q, const specd_step_outcome *o, int32_t n) {
    specd_seq_stats *s = &q->stats;
    s->n_steps++;
    s->n_emitted += n;
    s->n_rows += q->n_step_rows;
    s->n_tokens_run += q->n_step_tokens;
    s->n_empty_steps += n == 0;
    s->n_commit_steps += q->n_step_rows == 0;
    if (o->n_drafted > 0) {
        s->n_drafts++;
        s->n_draft_tokens += o->n_drafted;
        s->n_accepted += o->n_accepted;
        for (int32_t i = 0; i < o->n_drafted && i < SPECD_MAX_DRAFT; i++) {
            s->drafted_at[i]++;
            if (i < o->n_accepted) s->accepted_at[i]++;
        }
    }
    if (o->lossy) s->lossy = 1;
}

specd_status specd_spec_seq_verify_step(specd_spec *spec, spec_seq *q, const specd_logits *lg,
                                        const specd_logits *hidden, int32_t row0,
                                        specd_step_outcome *out, specd_error *err) {
    return specd_spec_seq_verify_decided(spec, q, lg, hidden, row0, NULL, out, err);
}

specd_status specd_spec_seq_verify_decided(specd_spec *spec, spec_seq *q,
                                           const specd_logits *lg, const specd_logits *hidden,
                                           int32_t row0, const spec_decided *decided,
                                           specd_step_outcome *out, specd_error *err) {
    if (!q->laid_out)
        return specd_fail(err, SPECD_E_STATE, "spec: sequence %d has no step laid out", q->id);
    uint64_t t0 = specd_now_ns();
    const float *logits = NULL, *hid = NULL; /* the host rows read, if any */
    specd_step_outcome o;
    if (q->ops->propose || q->plain_step) { /* the sequence's verifier (spec_verifier.h) */
        SPECD_TRY(q->verifier->verify(spec, q, lg, row0, decided, &o, &logits, err));
        hid = catch_up_hidden(spec, q, hidden, row0);
    } else {
        SPECD_TRY(verify_own(spec, q, lg, hidden, row0, &o, &logits, err));
    }
    SPECD_TRY(check_outcome(spec, q, &o, err));

    /* Stop at the first stop token and at max_tokens; the step's other tokens are dropped. */
    int64_t remaining = q->max_tokens - (q->n_history - q->n_prompt);
    int32_t n = 0;
    while (n < o.n_emitted && n < remaining) {
        int32_t t = o.emitted[n++];
        if (specd_seq_is_stop(q, t)) {
            q->done = 1;
            break;
        }
    }
    if (n >= remaining) q->done = 1;
    memcpy(q->history + q->n_history, o.emitted, (size_t)n * sizeof(int32_t));
    q->n_history += n;
    o.n_emitted = n;
    q->laid_out = 0;
    specd_seq_proc_commit(q, o.emitted, n);
    if (q->ops->advance) q->ops->advance(q->policy, q->history, q->n_history);
    specd_spec_shadow_check(q, o.emitted, n);
    if (hid && q->plain_step && n > 0) catch_up_row(spec, q, hid, q->n_history - 1 - n);
    if (logits && specd_policy_observes_rows(q->ops)) observe_rows(spec, q, logits);

    count_step(q, &o, n);
    uint64_t dt = specd_now_ns() - t0;
    q->stats.verify_ns += dt;
    q->own_ns += dt;
    *out = o;
    return SPECD_OK;
}

specd_status specd_spec_seq_verify_logits(specd_spec *spec, int32_t seq,
                                          const specd_logits *logits, specd_step_outcome *out,
                                          specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    if ((!logits && q->n_step_rows > 0) || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    SPECD_TRY(specd_spec_seq_verify_step(spec, q, logits, NULL, 0, out, err));
    /* one sequence's step: its wall clock from layout to here is its cost */
    specd_adaptive_observe(&q->guard, out->n_drafted, out->n_accepted, out->n_emitted,
                           specd_now_ns() - q->t_step);
    return SPECD_OK;
}

specd_status specd_spec_seq_verify(specd_spec *spec, int32_t seq, const float *logits,
                                   specd_step_outcome *out, specd_error *err) {
    spec_seq *q = NULL;
    SPECD_TRY(specd_spec_find_seq(spec, seq, &q, err));
    if (!logits && q->n_step_rows > 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "spec: NULL argument");
    specd_logits lg = {.data = logits, .row_stride = spec->params.n_vocab,
                       .n_rows = q->n_step_rows, .dtype = SPECD_DTYPE_F32,
                       .device = SPECD_DEVICE_HOST};
    return specd_spec_seq_verify_logits(spec, seq, &lg, out, err);
}
