/* ISD and R-ISD (specd/isd.h): self-speculative policies whose proposals come from the target's
 * own mask rows, laid out in the same forward that verifies the previous step's proposals.
 *
 * Step layout at history length n (pending token history[n-1] at position n-1), p pending
 * proposals (0 after a rejection or at the start, else N - 1), m = N - 1 masks:
 *   row 0          pending          pos n-1       scores position n (verifies proposal 1)
 *   rows 1..p      proposal i       pos n-1+i     scores n+i (proposal i+1, or the bonus)
 *   rows p+1..p+m  MASK             pos n+p+j     scores n+p+1+j: next step's proposal j
 * The first mask sits where the bonus (or the propose step's free token) will go, so when every
 * proposal is accepted the mask rows have seen exactly the tokens the next step is built on.
 * Strict causal attention: clean rows never see a mask row, so their logits and KV entries are
 * what plain decoding computes (R-ISD keeps them on base weights too). KV keep: the pending row
 * and the accepted proposals' rows; mask rows and rejected rows are dropped.
 *
 * An adapter with a trained mask embedding (specd_lora_mask_embedding) feeds that vector as the
 * input of every mask row (input_embd, flagged on the mask rows only); clean rows keep their token
 * embeddings, so R-ISD's clean rows are still exactly plain decoding's.
 *
 * Every buffer is sized at create: a step allocates nothing. */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/mask_rows.h"
#include "policy/options.h"
#include "policy/seq_verifier.h"
#include "specd/gguf.h"
#include "specd/isd.h"
#include "specd/runtime.h"

#include <stddef.h>
#include <string.h>

typedef struct isd_state {
    const char *name;
    int residual;        /* R-ISD: the adapter on mask rows only */
    int sample;          /* proposals drawn from q (else argmax) */
    int need_q;          /* REJECTION with sampled proposals: keep q */
    int32_t stride, m;   /* N and N - 1 */
    int32_t mask_id, n_vocab;
    specd_sample_key key;
    specd_lora *lora;        /* loaded when specd runs the target, else NULL */
    int own_lora;            /* 1: loaded for this sequence; 0: the spec's shared one */
    char *adapter;           /* the adapter's directory, or NULL: gated rows need it */
    float *embd;             /* (2N - 1) x n_embd rows, each the mask embedding, or NULL */
    uint8_t *embd_rows;      /* 2N - 1 flags: the step's mask rows */
    specd_accept *accept;
    specd_sampler *target;   /* the keyed sample of the propose step's free token */
    specd_sampler *argmax;   /* argmax proposals (biased logits) */
    specd_sampler *drafter;  /* sampled proposals and their q */

    /* proposals from the last step's mask rows, valid for history length expect_n */
    int32_t n_pend;
    int32_t *pend;           /* m */
    float *q, *q_next;       /* m x n_vocab each when need_q */
    int64_t expect_n;

    /* the step in flight */
    int64_t n_at;            /* history length at layout */
    int32_t n_tokens, n_clean;
    int32_t *tokens, *pos, *rows, *emitted, *keep; /* 2N - 1 */
    float *gate, *accept_prob;
} isd_state;

/* What a spec's sequences share (policy ABI 2): the adapter when specd runs the target, and its
 * mask embedding (borrowed from the adapter, or read from the directory when the host runs the
 * target and loads the adapter itself). */
typedef struct isd_shared {
    specd_lora *lora;
    const float *mask;
    float *own_mask;
    int32_t n_mask;
} isd_shared;

static void isd_shared_destroy(void *shared) {
    isd_shared *sh = shared;
    if (!sh) return;
    specd_lora_destroy(sh->lora);
    specd_free(sh->own_mask);
    specd_free(sh);
}

static void isd_destroy(void *state) {
    isd_state *s = state;
    if (!s) return;
    if (s->own_lora) specd_lora_destroy(s->lora);
    specd_free(s->adapter);
    specd_free(s->embd);
    specd_free(s->embd_rows);
    specd_accept_destroy(s->accept);
    specd_sampler_destroy(s->target);
    specd_sampler_destroy(s->argmax);
    specd_sampler_destroy(s->drafter);
    specd_free(s->pend);
    specd_free(s->q);
    specd_free(s->q_next);
    specd_free(s->tokens);
    specd_free(s->pos);
    specd_free(s->rows);
    specd_free(s->emitted);
    specd_free(s->keep);
    specd_free(s->gate);
    specd_free(s->accept_prob);
    specd_free(s);
}

typedef struct isd_opts {
    int32_t n, mask, propose;
    char adapter[4096];
} isd_opts;

/* isd's and risd's rows: the same keys; risd needs the adapter trained over the target (isd runs
 * the base model's mask rows, or any adapter given) */
#define ISD_ROWS(adapter_artifact, adapter_env, adapter_flags)                                                    \
    {.key = "n", .kind = SPECD_OPTION_INT, .offset = offsetof(isd_opts, n), .dflt = "3",          \
     .min = 2, .max = SPECD_MAX_DRAFT + 1,                                                         \
     .help = "stride N: N - 1 proposals, 2N - 1 rows per step"},                                  \
    {.key = "mask", .kind = SPECD_OPTION_INT, .offset = offsetof(isd_opts, mask),                 \
     .dflt = "the GGUF's mask token, else 0", .min = 0, .max = INT32_MAX,                          \
     .flags = SPECD_OPTION_DEFAULT_DERIVED, .help = "token id of the mask rows"},                 \
    {.key = "propose", .kind = SPECD_OPTION_ENUM, .offset = offsetof(isd_opts, propose),          \
     .dflt = "argmax", .choices = "argmax|sample",                                                 \
     .help = "sample: draw proposals from the mask rows' distribution"},                          \
    {.key = "adapter", .kind = SPECD_OPTION_PATH, .offset = offsetof(isd_opts, adapter),          \
     .size = sizeof((isd_opts *)0)->adapter, .artifact = adapter_artifact,                        \
     .artifact_env = adapter_env, .flags = adapter_flags,                                          \
     .help = "PEFT LoRA directory (isd: on every row; risd: on the mask rows); a trained "         \
             "mask_embedding in it is fed on the mask rows"}
static const specd_policy_option isd_rows[] = {ISD_ROWS(NULL, NULL, 0)};
static const specd_policy_option risd_rows[] = {
    ISD_ROWS("adapters/smollm2-135m-risd", "SPECD_RISD_ADAPTER", SPECD_OPTION_ARTIFACT_NEEDED)};
const specd_option_table specd_isd_options = SPECD_OPTION_TABLE(isd_rows);
const specd_option_table specd_risd_options = SPECD_OPTION_TABLE(risd_rows);

static specd_status isd_create_common(const specd_policy_env *env, const char *options,
                                      void **state, int residual, specd_error *err) {
    const char *name = residual ? "risd" : "isd";
    isd_opts o = {.mask = -1};
    SPECD_TRY(specd_options_parse_table(name, residual ? &specd_risd_options : &specd_isd_options,
                                        NULL, options, &o, err));
    const int32_t stride = o.n, mask = o.mask;
    const int sample = o.propose == 1;
    const char *adapter = o.adapter;
    /* hosts size a step's logits for specd_spec_max_step_rows (env.max_step_rows; 0 from a
     * caller that predates it: 2 * max_draft + 1) */
    int32_t most = env->max_step_rows > 0 ? env->max_step_rows : 2 * env->max_draft + 1;
    if (2 * stride - 1 > most)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy %s: n=%d needs %d rows per step, more than the step's %d "
                          "(2 * max_draft + 1 unless max_step_rows says more)",
                          name, stride, 2 * stride - 1, most);
    int32_t mask_id = 0;
    SPECD_TRY(specd_mask_pick_id(env, name, mask, &mask_id, err));

    isd_state *s = specd_alloc_array(1, sizeof *s); /* zeroed: destroy may run early */
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", name);
    s->name = name;
    s->residual = residual;
    s->sample = sample;
    s->need_q = sample && env->rule == SPECD_ACCEPT_REJECTION;
    s->stride = stride;
    s->m = stride - 1;
    s->mask_id = mask_id;
    s->n_vocab = env->n_vocab;
    s->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};

    const size_t rows = (size_t)(2 * stride - 1), qn = (size_t)s->m * (size_t)env->n_vocab;
    s->pend = specd_alloc_array((size_t)s->m, sizeof(int32_t));
    s->tokens = specd_alloc_array(rows, sizeof(int32_t));
    s->pos = specd_alloc_array(rows, sizeof(int32_t));
    s->rows = specd_alloc_array(rows, sizeof(int32_t));
    s->emitted = specd_alloc_array(rows, sizeof(int32_t));
    s->keep = specd_alloc_array(rows, sizeof(int32_t));
    s->gate = specd_alloc_array(rows, sizeof(float));
    s->accept_prob = specd_alloc_array(rows, sizeof(float));
    if (s->need_q) {
        s->q = specd_alloc_array(qn, sizeof(float));
        s->q_next = specd_alloc_array(qn, sizeof(float));
    }
    if (!s->pend || !s->tokens || !s->pos || !s->rows || !s->emitted || !s->keep || !s->gate ||
        !s->accept_prob || (s->need_q && (!s->q || !s->q_next))) {
        isd_destroy(s);
        return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", name);
    }

    specd_sampling_params greedy = env->sampling;
    greedy.temperature = 0.0f;
    specd_status st;
    if ((st = specd_seq_verifier_create(env, s->m, &s->accept, &s->target, err)) != SPECD_OK ||
        (st = specd_sampler_create(&greedy, env->n_vocab, &s->argmax, err)) != SPECD_OK ||
        (st = specd_sampler_create(&env->sampling, env->n_vocab, &s->drafter, err)) != SPECD_OK) {
        isd_destroy(s);
        return st;
    }
    /* a host that runs its own target loads the adapter itself from the layout's lora_path */
    if (adapter[0]) {
        size_t len = strlen(adapter) + 1;
        if (!(s->adapter = specd_alloc(len))) {
            isd_destroy(s);
            return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", name);
        }
        memcpy(s->adapter, adapter, len);
    }
    const isd_shared *sh = env->shared;
    const float *mask_vec = NULL;
    float *own_mask = NULL;
    int32_t n_mask = 0;
    if (adapter[0] && sh) {
        s->lora = sh->lora; /* loaded once for the spec (policy ABI 2); NULL without a target */
        mask_vec = sh->mask;
        n_mask = sh->n_mask;
    } else if (adapter[0] && env->target) {
        if ((st = specd_lora_create(env->target, adapter, &s->lora, err)) != SPECD_OK) {
            isd_destroy(s);
            return specd_mask_adapter_fail(err, st, name, adapter);
        }
        s->own_lora = 1;
        mask_vec = specd_lora_mask_embedding(s->lora, &n_mask);
    } else if (adapter[0]) {
        if ((st = specd_mask_read_vector(adapter, &own_mask, &n_mask, err)) != SPECD_OK) {
            isd_destroy(s);
            return specd_mask_adapter_fail(err, st, name, adapter);
        }
        mask_vec = own_mask;
    }
    if (mask_vec) {
        /* every row holds the vector: the flags pick the mask rows of each step */
        s->embd = specd_alloc_array(rows * (size_t)n_mask, sizeof(float));
        s->embd_rows = specd_alloc_array(rows, sizeof(uint8_t));
        if (s->embd)
            for (size_t i = 0; i < rows; i++)
                memcpy(s->embd + i * (size_t)n_mask, mask_vec, (size_t)n_mask * sizeof(float));
    }
    specd_free(own_mask);
    if (mask_vec && (!s->embd || !s->embd_rows)) {
        isd_destroy(s);
        return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", name);
    }
    for (size_t i = 0; i < rows; i++) s->rows[i] = (int32_t)i;
    s->expect_n = -1;
    *state = s;
    return SPECD_OK;
}

/* The adapter, loaded once per spec and shared by its sequences (policy ABI 2), with its mask
 * embedding; NULL when there is none. When specd does not run the target the host applies the
 * adapter from the layout's lora_path and only the mask embedding is read here. */
static specd_status shared_create_common(const specd_policy_env *env, const char *options,
                                        void **shared, const char *name, specd_error *err) {
    isd_opts o = {.mask = -1};
    *shared = NULL;
    /* bad options are reported by create, with the policy's own name */
    if (specd_options_parse_table(name, &specd_isd_options, NULL, options, &o, NULL) != SPECD_OK)
        return SPECD_OK;
    const char *adapter = o.adapter;
    if (!adapter[0]) return SPECD_OK;
    isd_shared *sh = specd_alloc_array(1, sizeof *sh);
    if (!sh) return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", name);
    specd_status st;
    if (env->target) {
        st = specd_lora_create(env->target, adapter, &sh->lora, err);
        sh->mask = specd_lora_mask_embedding(sh->lora, &sh->n_mask);
    } else {
        /* the host loads the adapter from the layout's lora_path; the mask rows' input is ours */
        st = specd_mask_read_vector(adapter, &sh->own_mask, &sh->n_mask, err);
        sh->mask = sh->own_mask;
    }
    if (st != SPECD_OK) {
        isd_shared_destroy(sh);
        return specd_mask_adapter_fail(err, st, name, adapter);
    }
    *shared = sh;
    return SPECD_OK;
}

static specd_status isd_shared_create(const specd_policy_env *env, const char *options,
                                      void **shared, specd_error *err) {
    return shared_create_common(env, options, shared, "isd", err);
}

static specd_status risd_shared_create(const specd_policy_env *env, const char *options,
                                       void **shared, specd_error *err) {
    return shared_create_common(env, options, shared, "risd", err);
}

static specd_status isd_create(const specd_policy_env *env, const char *options, void **state,
                               specd_error *err) {
    return isd_create_common(env, options, state, 0, err);
}

static specd_status risd_create(const specd_policy_env *env, const char *options, void **state,
                                specd_error *err) {
    return isd_create_common(env, options, state, 1, err);
}

static specd_status isd_layout(void *state, const int32_t *history, int64_t n_history,
                               specd_step_layout *out, specd_error *err) {
    isd_state *s = state;
    if (n_history < 1 || n_history + 2 * s->stride > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy %s: history length %lld", s->name,
                          (long long)n_history);
    /* proposals are only good for the history they were made after */
    if (n_history != s->expect_n) s->n_pend = 0;
    const int32_t p = s->n_pend, base = (int32_t)(n_history - 1);
    s->n_at = n_history;
    s->n_clean = 1 + p;
    s->n_tokens = s->n_clean + s->m;
    s->tokens[0] = history[n_history - 1];
    memcpy(s->tokens + 1, s->pend, (size_t)p * sizeof(int32_t));
    for (int32_t i = s->n_clean; i < s->n_tokens; i++) s->tokens[i] = s->mask_id;
    for (int32_t i = 0; i < s->n_tokens; i++) {
        s->pos[i] = base + i;
        /* ISD runs the adapter everywhere; R-ISD only on the mask rows */
        s->gate[i] = (!s->residual || i >= s->n_clean) ? 1.0f : 0.0f;
        if (s->embd_rows) s->embd_rows[i] = i >= s->n_clean;
    }
    *out = (specd_step_layout){.n_tokens = s->n_tokens, .tokens = s->tokens, .pos = s->pos,
                               .visible = NULL, .lora_gate = s->adapter ? s->gate : NULL,
                               .lora = s->lora, .n_rows = s->n_tokens, .rows = s->rows,
                               .lora_path = s->adapter, .input_embd = s->embd,
                               .input_embd_rows = s->embd_rows};
    return SPECD_OK;
}

/* Next step's proposals from the mask rows; writes q_next when REJECTION needs q. */
static specd_status propose(isd_state *s, const float *mask_logits, int32_t *props,
                            specd_error *err) {
    const size_t V = (size_t)s->n_vocab;
    for (int32_t j = 0; j < s->m; j++) {
        const float *row = mask_logits + (size_t)j * V;
        specd_sample_key k = s->key;
        k.position = (uint32_t)(s->n_at + s->n_clean + j); /* the position it proposes for */
        if (!s->sample) {
            SPECD_TRY(specd_sampler_sample(s->argmax, row, s->n_vocab, k, &props[j], err));
        } else {
            SPECD_TRY(specd_sampler_sample_draft(s->drafter, row, s->n_vocab, k, &props[j], err));
            if (s->need_q)
                SPECD_TRY(specd_sampler_probs(s->drafter, row, s->n_vocab, s->q_next + j * V, err));
        }
    }
    return SPECD_OK;
}

static specd_status isd_verify(void *state, const float *logits, specd_step_outcome *out,
                               specd_error *err) {
    isd_state *s = state;
    const size_t V = (size_t)s->n_vocab;
    const int32_t p = s->n_clean - 1;
    specd_sample_key key = s->key;
    key.position = (uint32_t)s->n_at; /* the token after the pending one */
    int32_t n_emitted, n_accepted = 0, props[SPECD_MAX_DRAFT];
    int lossy = 0;
    /* proposals first: on failure nothing below has changed the state */
    SPECD_TRY(propose(s, logits + (size_t)s->n_clean * V, props, err));
    if (p == 0) {
        /* propose step: the pending row's token is the one plain decoding emits */
        SPECD_TRY(specd_sampler_sample(s->target, logits, s->n_vocab, key, &s->emitted[0], err));
        n_emitted = 1;
    } else {
        specd_chain_input in = {.k = p, .draft = s->pend, .draft_probs = s->need_q ? s->q : NULL,
                                .q_vocab = s->n_vocab, .target_logits = logits,
                                .n_vocab = s->n_vocab, .key = key};
        specd_chain_result res = {.tokens = s->emitted, .accept_prob = s->accept_prob};
        SPECD_TRY(specd_accept_chain(s->accept, &in, &res, err));
        n_emitted = res.n_emitted;
        n_accepted = res.n_accepted;
        lossy = res.lossy;
    }
    for (int32_t i = 0; i <= n_accepted; i++) s->keep[i] = i;
    if (n_accepted == p) {
        /* the mask rows were conditioned on exactly the kept tokens: their proposals stand */
        memcpy(s->pend, props, (size_t)s->m * sizeof(int32_t));
        s->n_pend = s->m;
        if (s->need_q) {
            float *t = s->q;
            s->q = s->q_next;
            s->q_next = t;
        }
    } else {
        s->n_pend = 0; /* a rejection: the next step only proposes */
    }
    s->expect_n = s->n_at + n_emitted;
    *out = (specd_step_outcome){.n_emitted = n_emitted, .emitted = s->emitted,
                                .n_keep = n_accepted + 1, .keep = s->keep, .n_drafted = p,
                                .n_accepted = n_accepted, .lossy = lossy};
    return SPECD_OK;
}

static void isd_rollback(void *state, int64_t n_history) {
    isd_state *s = state;
    if (n_history != s->expect_n) s->n_pend = 0;
}

#define ISD_HELP                                                                                   \
    "n=3 (stride N: N-1 proposals, 2N-1 rows per step), mask=ID (default GGUF mask token, else "  \
    "0), propose=argmax|sample, adapter=DIR (PEFT LoRA)"

const specd_policy_ops specd_policy_isd = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .shared_create = isd_shared_create,
    .shared_destroy = isd_shared_destroy,
    .name = "isd",
    .options_help = ISD_HELP "; the adapter runs on every row (not lossless)",
    .create = isd_create,
    .destroy = isd_destroy,
    .layout = isd_layout,
    .verify = isd_verify,
    .rollback = isd_rollback,
    .flags = SPECD_POLICY_FIGURE_STRIDED_TPF,
};

const specd_policy_ops specd_policy_risd = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .shared_create = risd_shared_create,
    .shared_destroy = isd_shared_destroy,
    .name = "risd",
    .options_help = ISD_HELP "; the adapter runs on mask rows only (lossless)",
    .create = risd_create,
    .destroy = isd_destroy,
    .layout = isd_layout,
    .verify = isd_verify,
    .rollback = isd_rollback,
    .flags = SPECD_POLICY_FIGURE_STRIDED_TPF,
};
