#include "policy/dlm/simsd_drafter.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_rules.h"
#include "policy/dlm/simsd_layout.h"
#include "specd/runtime.h"
#include "policy/policy_device.h"

#include <string.h>

struct specd_simsd_drafter {
    specd_context *ctx;
    const specd_lora *lora;
    specd_sampler *sampler;
    int32_t b, n_vocab, mask_id, n_embd, cap;
    specd_sample_key key;
    int32_t *mirror; /* tokens whose KV rows the drafter holds */
    int32_t n_mirror;
    float *all_logits; /* b x n_vocab: one forward's block rows */
    float *q, *logits; /* b x n_vocab each (specd_simsd_draft) */
    float *embd;       /* b x n_embd: the mask vector on every row, or NULL */
    uint8_t *vis;      /* b x (cap + b) */
    int32_t tokens[SPECD_SIMSD_MAX_B], pos[SPECD_SIMSD_MAX_B];
    uint8_t embd_rows[SPECD_SIMSD_MAX_B], keep_none[SPECD_SIMSD_MAX_B];
    float gate[SPECD_SIMSD_MAX_B];
};

void specd_simsd_drafter_destroy(specd_simsd_drafter *d) {
    if (!d) return;
    specd_context_destroy(d->ctx);
    specd_sampler_destroy(d->sampler);
    specd_free(d->mirror);
    specd_free(d->all_logits);
    specd_free(d->q);
    specd_free(d->logits);
    specd_free(d->embd);
    specd_free(d->vis);
    specd_free(d);
}

specd_status specd_simsd_drafter_create(const specd_policy_env *env, const specd_model *model,
                                        int32_t n_layers, const specd_lora *lora, int32_t b,
                                        int32_t mask_id, int32_t n_threads,
                                        specd_simsd_drafter **out, specd_error *err) {
    *out = NULL;
    if (b < 1 || b > SPECD_SIMSD_MAX_B)
        return specd_fail(err, SPECD_E_INVALID_ARG, "simsd drafter: block %d", b);
    specd_simsd_drafter *d = specd_alloc_array(1, sizeof *d);
    if (!d) return specd_fail(err, SPECD_E_NOMEM, "simsd drafter: out of memory");
    d->b = b;
    d->n_vocab = env->n_vocab;
    d->mask_id = mask_id;
    d->cap = 4096;
    d->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};
    const size_t V = (size_t)env->n_vocab;
    specd_status st = SPECD_OK;
    specd_context_params cp = specd_policy_context_params(env);
    cp.n_ctx = d->cap + b;
    cp.n_batch = 128;
    cp.n_layers = n_layers;
    cp.n_threads = n_threads;
    if (!(d->mirror = specd_alloc_array((size_t)d->cap, sizeof(int32_t))) ||
        !(d->all_logits = specd_alloc_array((size_t)b * V, sizeof(float))) ||
        !(d->q = specd_alloc_array((size_t)b * V, sizeof(float))) ||
        !(d->logits = specd_alloc_array((size_t)b * V, sizeof(float))) ||
        !(d->vis = specd_alloc_array((size_t)b, (size_t)d->cap + (size_t)b)))
        st = specd_fail(err, SPECD_E_NOMEM, "simsd drafter: out of memory");
    specd_sampling_params sp = env->sampling; /* greedy verification takes greedy drafts */
    if (env->rule == SPECD_ACCEPT_GREEDY) sp.temperature = 0.0f;
    if (st == SPECD_OK) st = specd_sampler_create(&sp, env->n_vocab, &d->sampler, err);
    if (st == SPECD_OK) st = specd_context_create(model, &cp, &d->ctx, err);
    if (st == SPECD_OK && lora) {
        d->lora = lora;
        st = specd_context_set_lora(d->ctx, lora, err);
        int32_t n = 0;
        const float *vec = st == SPECD_OK ? specd_lora_mask_embedding(d->lora, &n) : NULL;
        if (vec) {
            if (!(d->embd = specd_alloc_array((size_t)b * (size_t)n, sizeof(float))))
                st = specd_fail(err, SPECD_E_NOMEM, "simsd drafter: out of memory");
            for (int32_t i = 0; st == SPECD_OK && i < b; i++)
                memcpy(d->embd + (size_t)i * (size_t)n, vec, (size_t)n * sizeof(float));
            d->n_embd = n;
        }
    }
    if (st != SPECD_OK) {
        specd_simsd_drafter_destroy(d);
        return st;
    }
    *out = d;
    return SPECD_OK;
}

int64_t specd_simsd_drafter_capacity(const specd_simsd_drafter *d) { return d->cap; }

/* Brings the cache to decided[0..m): keep the common prefix, feed the rest (base, causal). */
static specd_status sync(specd_simsd_drafter *d, const int32_t *decided, int64_t m,
                         specd_error *err) {
    int32_t common = 0;
    while (common < d->n_mirror && common < m && d->mirror[common] == decided[common])
        common++;
    SPECD_TRY(specd_context_kv_truncate(d->ctx, 0, common, err));
    d->n_mirror = common;
    for (int64_t at = common; at < m;) {
        const int32_t chunk = (int32_t)(m - at < 128 ? m - at : 128);
        specd_seq_batch bt = {.seq = 0, .n_tokens = chunk, .tokens = decided + at};
        SPECD_TRY(specd_context_extend(d->ctx, &bt, 1, NULL, err));
        memcpy(d->mirror + at, decided + at, (size_t)chunk * sizeof(int32_t));
        at += chunk;
        d->n_mirror = (int32_t)at;
    }
    return SPECD_OK;
}

specd_status specd_simsd_drafter_draft(specd_simsd_drafter *d, const int32_t *decided, int64_t m,
                                       const int32_t *block, int32_t gamma,
                                       specd_simsd_draft *out, specd_error *err) {
    const int32_t b = d->b;
    const size_t V = (size_t)d->n_vocab;
    int32_t n_masked = 0;
    for (int32_t i = 0; i < b; i++)
        n_masked += block[i] < 0;
    if (m < 1 || m > d->cap || gamma < 1 || gamma > n_masked)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "simsd drafter: history length %lld (its context holds %d), %d drafts "
                          "for %d masked slots",
                          (long long)m, d->cap, gamma, n_masked);
    SPECD_TRY(sync(d, decided, m, err));
    /* every block row sees the whole cache and the whole block (SDAR's bidirectional block) */
    memset(d->vis, 1, (size_t)b * ((size_t)m + (size_t)b));
    int32_t *token = out->token;
    for (int32_t i = 0; i < b; i++) {
        token[i] = block[i];
        out->tau[i] = 0;
        d->pos[i] = (int32_t)(m + i);
        d->gate[i] = 1.0f;
        d->keep_none[i] = 0;
    }
    out->q = d->q;
    out->logits = d->logits;
    out->gamma = gamma;
    for (int32_t r = 0; r < gamma; r++) {
        for (int32_t i = 0; i < b; i++) {
            d->tokens[i] = token[i] < 0 ? d->mask_id : token[i];
            d->embd_rows[i] = token[i] < 0;
        }
        specd_seq_batch bt = {.seq = 0,
                              .n_tokens = b,
                              .tokens = d->tokens,
                              .pos = d->pos,
                              .visible = d->vis,
                              .lora_gate = d->lora ? d->gate : NULL,
                              .commit = d->keep_none,
                              .embd = d->embd,
                              .embd_rows = d->embd ? d->embd_rows : NULL};
        specd_extend_out eo = {.n_rows = b, .logits = d->all_logits};
        SPECD_TRY(specd_context_extend(d->ctx, &bt, 1, &eo, err));
        /* the drafter's order: the most confident masked slot (ties: the leftmost) */
        specd_dlm_pos pos[SPECD_SIMSD_MAX_B];
        uint8_t elig[SPECD_SIMSD_MAX_B];
        SPECD_TRY(specd_dlm_masked_confidences("simsd drafter", m, d->all_logits, d->n_vocab, token,
                                               b, pos, elig, err));
        const int32_t best = specd_dlm_static_pick(pos, elig, b);
        if (best < 0)
            return specd_fail(err, SPECD_E_NUMERIC,
                              "simsd drafter: every masked slot's logits are non-finite");
        const float *z = d->all_logits + (size_t)best * V;
        specd_sample_key key = d->key;
        key.position = (uint32_t)(m + best);
        SPECD_TRY(specd_sampler_sample_draft(d->sampler, z, d->n_vocab, key, &token[best], err));
        SPECD_TRY(specd_sampler_probs(d->sampler, z, d->n_vocab, d->q + (size_t)r * V, err));
        memcpy(d->logits + (size_t)r * V, z, V * sizeof(float));
        out->tau[best] = r + 1;
        out->order[r] = best;
    }
    return SPECD_OK;
}
