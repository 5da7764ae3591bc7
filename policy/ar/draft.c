/* Draft-model drafting: a smaller model with the target's vocabulary proposes k tokens
 * autoregressively. Its KV cache mirrors the sequence and is trimmed back to the common prefix
 * after every verified step, so a rejection costs no re-prefill. The same machinery with the
 * target's own weights cut after L layers is the layerskip policy. */
#include "policy/ar/draft_model.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/builtin.h"
#include "policy/options.h"
#include "policy/ar/vocab_compat.h"
#include "specd/runtime.h"
#include "policy/policy_device.h"

#include <stddef.h>
#include <string.h>

struct specd_drafter {
    specd_model *own_model;   /* loaded by the policy (draft), NULL when borrowed (layerskip) */
    specd_context *ctx;
    specd_sampler *sampler;   /* the drafter's sampling: the target's transform */
    float *logits;            /* n_vocab */
    int32_t *mirror;          /* tokens whose KV rows the drafter holds */
    int32_t n_mirror, cap;
    int32_t n_vocab, k;
    int sample;               /* 1 = sample drafts and report q (rejection sampling) */
    int32_t branch;           /* tree proposals: chains from the root's best tokens */
    uint64_t seed;
    uint32_t seq_key;
};

specd_status specd_drafter_create(const specd_policy_env *env, const specd_model *borrowed,
                                  const char *path, int32_t n_layers, int32_t k, int sample,
                                  specd_drafter **out, specd_error *err) {
    specd_drafter *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "draft: out of memory");
    const specd_model *model = borrowed;
    specd_status st = SPECD_OK;
    if (!model) {
        specd_gguf *g = NULL;
        if ((st = specd_gguf_create(path, &g, err)) == SPECD_OK && env->target)
            st = specd_vocab_compat_check(specd_model_gguf(env->target), g, err);
        specd_gguf_destroy(g);
        if (st == SPECD_OK) st = specd_model_create(path, &d->own_model, err);
        model = d->own_model;
    }
    if (st == SPECD_OK && specd_model_get_info(model)->n_vocab != env->n_vocab)
        st = specd_fail(err, SPECD_E_MISMATCH, "draft: vocabulary size %d differs from the target's %d",
                        specd_model_get_info(model)->n_vocab, env->n_vocab);
    d->n_vocab = env->n_vocab;
    d->k = k;
    d->sample = sample;
    d->seed = env->seed;
    d->seq_key = env->seq_key;
    d->cap = 4096;
    if (st == SPECD_OK) {
        specd_context_params cp = specd_policy_context_params(env);
        cp.n_ctx = d->cap;
        cp.n_batch = 128;
        cp.n_layers = n_layers;
        st = specd_context_create(model, &cp, &d->ctx, err);
    }
    specd_sampling_params sp = env->sampling;
    if (!sample) sp.temperature = 0.0f;
    if (st == SPECD_OK) st = specd_sampler_create(&sp, env->n_vocab, &d->sampler, err);
    if (st == SPECD_OK) {
        d->logits = specd_alloc_array((size_t)env->n_vocab, sizeof(float));
        d->mirror = specd_alloc_array((size_t)d->cap, sizeof(int32_t));
        if (!d->logits || !d->mirror) st = specd_fail(err, SPECD_E_NOMEM, "draft: out of memory");
    }
    if (st != SPECD_OK) {
        specd_drafter_destroy(d);
        return st;
    }
    *out = d;
    return SPECD_OK;
}

void specd_drafter_destroy(specd_drafter *d) {
    if (!d) return;
    specd_sampler_destroy(d->sampler);
    specd_context_destroy(d->ctx);
    specd_model_destroy(d->own_model);
    specd_free(d->logits);
    specd_free(d->mirror);
    specd_free(d);
}

/* Brings the drafter's cache to history[0..n-1): keep the common prefix, feed the rest. */
static specd_status sync(specd_drafter *d, const int32_t *history, int64_t n, specd_error *err) {
    int32_t common = 0;
    while (common < d->n_mirror && common < n - 1 && d->mirror[common] == history[common])
        common++;
    SPECD_TRY(specd_context_kv_truncate(d->ctx, 0, common, err));
    d->n_mirror = common;
    for (int64_t at = common; at < n - 1;) {
        int32_t chunk = (int32_t)(n - 1 - at < 128 ? n - 1 - at : 128);
        specd_seq_batch b = {.seq = 0, .n_tokens = chunk, .tokens = history + at};
        SPECD_TRY(specd_context_extend(d->ctx, &b, 1, NULL, err));
        memcpy(d->mirror + at, history + at, (size_t)chunk * sizeof(int32_t));
        at += chunk;
        d->n_mirror = (int32_t)at;
    }
    return SPECD_OK;
}

specd_status specd_drafter_propose(specd_drafter *d, const int32_t *history, int64_t n,
                                   int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                   int *has_q, specd_error *err) {
    *n_draft = 0;
    *has_q = 0;
    int32_t k = d->k < max_draft ? d->k : max_draft;
    if (n + k >= d->cap) return SPECD_OK; /* out of drafter context: plain steps from here */
    SPECD_TRY(sync(d, history, n, err));
    int32_t token = history[n - 1];
    for (int32_t i = 0; i < k; i++) {
        SPECD_TRY(specd_context_decode(d->ctx, 0, token, d->logits, err));
        d->mirror[d->n_mirror++] = token;
        specd_sample_key key = {.seed = d->seed, .sequence = d->seq_key,
                                .position = (uint32_t)(n + i)};
        SPECD_TRY(specd_sampler_sample_draft(d->sampler, d->logits, d->n_vocab, key, &token, err));
        if (d->sample && q)
            SPECD_TRY(specd_sampler_probs(d->sampler, d->logits, d->n_vocab,
                                          q + (size_t)i * (size_t)d->n_vocab, err));
        draft[i] = token;
    }
    *n_draft = k;
    *has_q = d->sample && q;
    return SPECD_OK;
}

void specd_drafter_set_branch(specd_drafter *d, int32_t branch) { d->branch = branch; }

/* The w best tokens of the root's logits other than `first`, best first (ties: lower index). */
static int32_t root_alternatives(const specd_drafter *d, int32_t first, int32_t w, int32_t *out) {
    int32_t n = 0;
    for (int32_t x = 0; x < d->n_vocab; x++) {
        if (x == first) continue;
        int32_t at;
        if (n < w) at = n++;
        else if (d->logits[x] > d->logits[out[w - 1]]) at = w - 1;
        else continue;
        while (at > 0 && d->logits[x] > d->logits[out[at - 1]]) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = x;
    }
    return n;
}

specd_status specd_drafter_propose_tree(specd_drafter *d, const int32_t *history, int64_t n,
                                        int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                        int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                        specd_error *err) {
    *n_nodes = 0;
    *has_q = 0;
    int32_t k = d->k < max_depth ? d->k : max_depth;
    if (d->branch <= 1 || max_nodes <= k) {
        SPECD_TRY(specd_drafter_propose(d, history, n, k < max_nodes ? k : max_nodes, token,
                                        n_nodes, q, has_q, err));
        for (int32_t i = 0; i < *n_nodes; i++) parent[i] = i - 1;
        return SPECD_OK;
    }
    if (n + k >= d->cap) return SPECD_OK;
    SPECD_TRY(sync(d, history, n, err));
    SPECD_TRY(specd_context_decode(d->ctx, 0, history[n - 1], d->logits, err));
    d->mirror[d->n_mirror++] = history[n - 1];
    int32_t firsts[8];
    specd_sample_key key = {.seed = d->seed, .sequence = d->seq_key, .position = (uint32_t)n};
    SPECD_TRY(specd_sampler_sample_draft(d->sampler, d->logits, d->n_vocab, key, &firsts[0], err));
    int32_t w = d->branch < 8 ? d->branch : 8;
    int32_t alt_depth = (max_nodes - k) / (w - 1);
    if (alt_depth > k) alt_depth = k;
    if (alt_depth < 1) w = 1;
    w = 1 + root_alternatives(d, firsts[0], w - 1, firsts + 1);
    int32_t m = 0;
    for (int32_t b = 0; b < w; b++) {
        int32_t depth = b == 0 ? k : alt_depth, tok = firsts[b];
        for (int32_t i = 0; i < depth; i++) {
            if (i > 0) {
                SPECD_TRY(specd_context_decode(d->ctx, 0, tok, d->logits, err));
                d->mirror[d->n_mirror++] = tok;
                key.position = (uint32_t)(n + i);
                SPECD_TRY(specd_sampler_sample_draft(d->sampler, d->logits, d->n_vocab, key, &tok,
                                                     err));
            }
            parent[m] = i == 0 ? -1 : m - 1;
            token[m++] = tok;
        }
        /* back to [history]: the next chain starts from the root again */
        SPECD_TRY(specd_context_kv_truncate(d->ctx, 0, (int32_t)n, err));
        d->n_mirror = (int32_t)n;
    }
    *n_nodes = m;
    return SPECD_OK;
}

/* --- the draft policy ---------------------------------------------------------------------- */
typedef struct draft_opts {
    char model[1024];
    int32_t k, sample, branch;
} draft_opts;

static const specd_policy_option draft_rows[] = {
    {.key = "model", .kind = SPECD_OPTION_PATH, .offset = offsetof(draft_opts, model),
     .size = sizeof((draft_opts *)0)->model, .flags = SPECD_OPTION_REQUIRED,
     .help = "GGUF of the draft model, same vocabulary as the target"},
    {.key = "k", .kind = SPECD_OPTION_INT, .offset = offsetof(draft_opts, k),
     .dflt = "min(4, max_draft)", .min = 1,
     .flags = SPECD_OPTION_MAX_IS_DRAFT | SPECD_OPTION_DEFAULT_DERIVED,
     .help = "tokens proposed per step"},
    {.key = "sample", .kind = SPECD_OPTION_BOOL, .offset = offsetof(draft_opts, sample),
     .dflt = "0",
     .help = "1: draw the drafts from the draft model's q and return q (else greedy, q one-hot)"},
    {.key = "branch", .kind = SPECD_OPTION_INT, .offset = offsetof(draft_opts, branch),
     .dflt = "1", .min = 1, .max = 8,
     .help = "> 1: a tree whose chains start from the root's branch best tokens; needs sample=0"},
};
const specd_option_table specd_draft_options = SPECD_OPTION_TABLE(draft_rows);

static specd_status draft_options(const specd_policy_env *env, const char *options,
                                  draft_opts *o, specd_error *err) {
    o->k = env->max_draft < 4 ? env->max_draft : 4;
    const specd_option_bounds bounds = {.max_draft = env->max_draft};
    SPECD_TRY(specd_options_parse_table("draft", &specd_draft_options, &bounds, options, o, err));
    if (o->branch > 1 && o->sample)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy draft: branch=%d needs sample=0 (the branches are the root's "
                          "best tokens, not draws from q)", o->branch);
    if (!o->model[0])
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy draft: needs model=PATH, a GGUF with the target's vocabulary");
    return SPECD_OK;
}

/* The draft model, loaded once per spec and shared by its sequences (policy ABI 2). */
static specd_status draft_shared_create(const specd_policy_env *env, const char *options,
                                        void **shared, specd_error *err) {
    draft_opts o;
    SPECD_TRY(draft_options(env, options, &o, err));
    const char *path = o.model;
    specd_gguf *g = NULL;
    specd_status st = specd_gguf_create(path, &g, err);
    if (st == SPECD_OK && env->target)
        st = specd_vocab_compat_check(specd_model_gguf(env->target), g, err);
    specd_gguf_destroy(g);
    specd_model *m = NULL;
    if (st == SPECD_OK) st = specd_model_create(path, &m, err);
    if (st == SPECD_OK) *shared = m;
    return st;
}

static void draft_shared_destroy(void *shared) { specd_model_destroy(shared); }

static specd_status draft_create(const specd_policy_env *env, const char *options, void **state,
                                 specd_error *err) {
    draft_opts o;
    SPECD_TRY(draft_options(env, options, &o, err));
    /* without a spec's shared model (a caller creating the policy directly) it loads its own */
    SPECD_TRY(specd_drafter_create(env, env->shared, o.model, 0, o.k, o.sample,
                                   (specd_drafter **)state, err));
    specd_drafter_set_branch(*state, o.branch);
    return SPECD_OK;
}

typedef struct layerskip_opts {
    int32_t layers, k, sample;
} layerskip_opts;

static const specd_policy_option layerskip_rows[] = {
    {.key = "layers", .kind = SPECD_OPTION_INT, .offset = offsetof(layerskip_opts, layers),
     .dflt = "n_layer / 2", .min = 1,
     .flags = SPECD_OPTION_MAX_IS_LAYERS | SPECD_OPTION_DEFAULT_DERIVED,
     .help = "target layers the drafter runs"},
    {.key = "k", .kind = SPECD_OPTION_INT, .offset = offsetof(layerskip_opts, k),
     .dflt = "min(4, max_draft)", .min = 1,
     .flags = SPECD_OPTION_MAX_IS_DRAFT | SPECD_OPTION_DEFAULT_DERIVED,
     .help = "tokens proposed per step"},
    {.key = "sample", .kind = SPECD_OPTION_BOOL, .offset = offsetof(layerskip_opts, sample),
     .dflt = "0", .help = "as for draft"},
};
const specd_option_table specd_layerskip_options = SPECD_OPTION_TABLE(layerskip_rows);

static specd_status layerskip_create(const specd_policy_env *env, const char *options,
                                     void **state, specd_error *err) {
    if (!env->target)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy layerskip: needs the target model (run it on specd's runtime)");
    int32_t n_layer = specd_model_get_info(env->target)->n_layer;
    layerskip_opts o = {.layers = n_layer / 2 > 0 ? n_layer / 2 : 1,
                        .k = env->max_draft < 4 ? env->max_draft : 4};
    const specd_option_bounds bounds = {.max_draft = env->max_draft, .n_layer = n_layer};
    SPECD_TRY(specd_options_parse_table("layerskip", &specd_layerskip_options, &bounds, options,
                                        &o, err));
    return specd_drafter_create(env, env->target, NULL, o.layers, o.k, o.sample,
                                (specd_drafter **)state, err);
}

static void drafter_destroy(void *state) { specd_drafter_destroy(state); }

static specd_status drafter_propose_tree(void *state, const int32_t *history, int64_t n,
                                         int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                         int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                         specd_error *err) {
    return specd_drafter_propose_tree(state, history, n, max_nodes, max_depth, parent, token,
                                      n_nodes, q, has_q, err);
}

static specd_status drafter_propose(void *state, const int32_t *history, int64_t n,
                                    int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                    int *has_q, specd_error *err) {
    return specd_drafter_propose(state, history, n, max_draft, draft, n_draft, q, has_q, err);
}

const specd_policy_ops specd_policy_draft = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "draft",
    .options_help = "model=PATH (GGUF, same vocabulary), k=4 (tokens proposed), sample=0|1, "
                    "branch=1 (>1: a tree, chains from the root's best tokens)",
    .create = draft_create,
    .destroy = drafter_destroy,
    .propose = drafter_propose,
    .flags = SPECD_POLICY_NEEDS_Q,
    .shared_create = draft_shared_create,
    .shared_destroy = draft_shared_destroy,
    .propose_tree = drafter_propose_tree,
};

const specd_policy_ops specd_policy_layerskip = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "layerskip",
    .options_help = "layers=n_layer/2 (target layers the drafter runs), k=4, sample=0|1",
    .create = layerskip_create,
    .destroy = drafter_destroy,
    .propose = drafter_propose,
    .flags = SPECD_POLICY_NEEDS_Q,
};
