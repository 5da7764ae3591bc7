/* MRP-causal (paper 002 section 3, causal form; docs/papers.md): a small residual head over the
 * frozen target's final hidden states turns the target's own logits into proposals for the next
 * K positions, z_k = z_{k-1} + C_k with C_k = E . hp_k through the target's frozen output head.
 * No second backbone forward: the head runs on its own context (L llama blocks) and reads the
 * target's logits and hidden states of the step the session already ran.
 *
 * Step at history length n (pending token history[n-1] at position n-1), p proposals from the
 * last step (0 at the start, after a rejection handled as usual: the proposals come from the
 * bonus row, so every step has them):
 *   rows [pending | d_1 .. d_p] at positions n-1 .. n-1+p, causal, every row scored.
 * spec (lossless): the acceptance engine's chain rule under the sequence's rule decides; the
 *   pending row and the accepted drafts keep their KV. direct (lossy): every draft is emitted
 *   unchecked plus the target's token after them; n_accepted reports how many drafts the target
 *   agreed with, and the outcome says lossy. remask (lossy; MRP's remasking, paper 002 sec. 3.4,
 *   Alg. 4, in causal form): only the leading drafts whose confidence (the head's probability of
 *   the draft over S, at the sequence's temperature or 1 under the greedy rule) is >= tau are
 *   laid out and emitted unchecked, as in direct; the first one below tau and those after it are
 *   remasked (drafted again next step), and the target's token after the revealed ones always
 *   commits. tau > 1 reveals nothing (plain decoding), tau = 0 everything (direct); a step that
 *   emitted an unchecked draft says lossy.
 * The head: one committed row per decided target position j (y = x_{j+1}, g = h_j, position id
 * j + 1), prompt rows included when the host passes the prompt's hidden states (policy flag
 * WANTS_PREFILL_HIDDEN; without them the head starts at the first step's rows). After a step the
 * decided rows are committed; the last one (t, with x_{t+1} just decided) gives hp_1, and
 * z_1 = zA_t + C_1 picks d_1. Step k >= 2 runs a speculative row (y = d_{k-1},
 * g = h_t + hp_1 + ... + hp_{k-1}, position t + k) that sees the committed rows and this round's
 * earlier speculative rows; those rows are dropped after the round.
 * Cost: C_1 is computed over the head's draft vocabulary (mrp.draft_vocab, the most frequent
 * tokens of the training data, FR-Spec; vocab=N, 8192 by default: ~97% of held-out response
 * tokens) from a private copy of those rows of the target's output head in its own type, so the
 * values are exactly the runtime output head's at N / n_vocab of the cost; S is the top M of z_1
 * there (cand=M). Tokens outside it are never drafted; under rejection sampling q is 0 outside S
 * as before, so the engine stays exact. With vocab=0 (or a head without the list) C_1 is the
 * runtime's output head over the whole vocabulary on the head context's row (6x the work at
 * 49,152 tokens: ~3 ms of CPU per round, the largest part of the policy's time before). C_k for
 * k >= 2 only over S, from S's rows of the output head, so a later draft costs a head-layer
 * forward and M dot products. The head's rows then dominate (SPECD_PROFILE prints the parts,
 * mrp_prof.h): three sequential head forwards per round (the committed rows, then k = 2, 3), and
 * an F16 head block costs ~2.5x a Q8_0 one per row (export_mrp.py --dtype q8_0; a Q8_0 eh_proj is
 * read as stored, mrp_head.h). threads=1 by default: the policy env does not carry the target's
 * thread count, and on a loaded machine a second head thread waited at the barriers (measured:
 * 1.5x the wall per head row at load 5 on 2 cores, half the CPU per thread). cand_from=target takes
 * S from the top M of zA_t instead and skips the full product, but a trained head moves most of
 * z_1's mass out of zA_t's top (zA_t predicts the token just decided, which the head cancels):
 * measured against the python reference, drafts then differ at most positions even with M = 1024.
 * Drafts: argmax over S (greedy rule or T = 0); under the coupled rule the head's keyed guess
 * argmax z/T + G(the target's own sample stream), which is what the target emits when the head's
 * logits are right; under rejection sampling a draw from q = softmax(z/T) over S (zero elsewhere)
 * with the drafter's stream, and q goes to the engine. */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/self/mrp_head.h"
#include "policy/self/mrp_prof.h"
#include "policy/options.h"
#include "policy/seq_verifier.h"
#include "specd/runtime.h"
#include "policy/policy_device.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { MODE_SPEC, MODE_DIRECT, MODE_REMASK };

typedef struct mrp_state {
    mrp_head *head;
    int own_head;            /* loaded for this sequence (no spec's shared one) */
    specd_context *hctx;     /* the head's KV: committed rows, then this round's speculative */
    int32_t hctx_cap, hctx_batch;
    int mode;                /* MODE_*: direct and remask emit drafts unchecked (lossy) */
    float stop_below;        /* drafting stops at the first draft whose confidence is below
                              * this: remask's tau, spec's min_conf, 0 for direct */
    int full_c1;             /* cand_from=head: C_1 over the whole vocabulary */
    int full_all;            /* cand=0: every C_k over the whole vocabulary (S = all tokens) */
    const mrp_vocab *dv;     /* C_1 over the head's draft vocabulary only; NULL: the whole one */
    int32_t k, m, n_vocab, n_embd;
    float temperature;       /* 0 under the greedy rule */
    specd_accept_rule rule;
    int need_q;              /* spec mode, REJECTION at T > 0 */
    specd_sample_key key;
    specd_accept *accept;
    specd_sampler *target;   /* the target's keyed sample: propose steps, direct's tokens */

    /* the head cache covers target positions [base, base + kv_len). Rows the host passes
     * outside a step (the prompt's, the guard's plain steps') wait in a ring of the newest
     * lag_cap, positions [lag_row0, lag_row0 + n_lag), and are committed when the head runs
     * again: a head the guard keeps off costs a copy per row, and one that resumes after more
     * than lag_cap rows starts again from the newest of them */
    int started;             /* base chosen */
    int64_t base;
    int dead;                /* out of head context: plain steps from here */
    int32_t lag_cap, n_lag, lag_first; /* lag_first: the ring slot of lag_row0 */
    int64_t lag_row0;
    int32_t *lag_tok;        /* lag_cap: y of each waiting row */
    float *lag_h;            /* lag_cap x n_embd: g of each waiting row */

    /* proposals for history length expect_n */
    int32_t n_pend;
    int32_t *pend;           /* k */
    float *conf;             /* k: the head's probability of each proposal over S */
    float *q;                /* k x n_vocab when need_q */
    int64_t expect_n;

    /* the step in flight */
    int64_t n_at;
    int32_t n_tokens;
    int32_t *tokens, *pos, *rows, *emitted, *keep; /* k + 1 */
    float *accept_prob;      /* k */

    /* scratch */
    int32_t *htok, *hpos;    /* hctx_batch */
    float *u;                /* hctx_batch x n_embd: head input rows */
    float *in2;              /* MRP_INPUT_SCRATCH(n_embd) */
    float *hp, *hacc;        /* n_embd */
    int32_t *cand;           /* m: S */
    float *cand_rows;        /* m x n_embd: S's output-head rows */
    float *z;                /* m */
    float *c1;               /* n_vocab (dv->n with a draft vocabulary): C_1, then z_1; NULL
                              * with cand_from=target */
    void *act;               /* a quantized hp for the draft vocabulary's dot products */
    mrp_prof prof;
} mrp_state;

static void mrp_destroy(void *state) {
    mrp_state *s = state;
    if (!s) return;
    mrp_prof_report(&s->prof);
    if (s->own_head) mrp_head_close(s->head);
    specd_context_destroy(s->hctx);
    specd_accept_destroy(s->accept);
    specd_sampler_destroy(s->target);
    void *bufs[] = {s->pend, s->q, s->tokens, s->pos, s->rows, s->emitted, s->keep,
                    s->accept_prob, s->htok, s->hpos, s->u, s->in2, s->hp, s->hacc, s->cand,
                    s->cand_rows, s->z, s->c1, s->conf, s->act, s->lag_tok, s->lag_h};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) specd_free(bufs[i]);
    specd_free(s);
}

typedef struct mrp_options {
    char head[4096];
    int32_t mode; /* MODE_*: the choices below are in that order */
    int32_t from; /* 0 head, 1 target */
    float tau, min_conf;
    int32_t k, m, threads, ctx, vocab, catch_up;
} mrp_options;

#define MRP_FIELD(f) .offset = offsetof(mrp_options, f)
static const specd_policy_option option_rows[] = {
    {.key = "head", .kind = SPECD_OPTION_PATH, MRP_FIELD(head),
     .size = sizeof((mrp_options *)0)->head, .flags = SPECD_OPTION_REQUIRED | SPECD_OPTION_ARTIFACT_NEEDED,
     .artifact = "mrp/smollm2-135m-mrp.gguf", .artifact_env = "SPECD_MRP_HEAD",
     .help = "MRP head GGUF trained over the target"},
    {.key = "k", .kind = SPECD_OPTION_INT, MRP_FIELD(k), .dflt = "the head's mrp.n_draft, else 3",
     .min = 1, .flags = SPECD_OPTION_MAX_IS_DRAFT | SPECD_OPTION_DEFAULT_DERIVED,
     .help = "drafts per step"},
    {.key = "mode", .kind = SPECD_OPTION_ENUM, MRP_FIELD(mode), .dflt = "spec",
     .choices = "spec|direct|remask",
     .help = "spec: verified; direct: drafts emitted unchecked (LOSSY); remask: drafts emitted "
             "unchecked while the head's confidence is >= tau, the rest redrafted (LOSSY)"},
    {.key = "tau", .kind = SPECD_OPTION_FLOAT, MRP_FIELD(tau), .dflt = "0.5", .min = 0,
     .max = 1e9, .help = "remask's confidence threshold (above 1 reveals nothing)"},
    {.key = "min_conf", .kind = SPECD_OPTION_FLOAT, MRP_FIELD(min_conf), .dflt = "0.5", .min = 0,
     .max = 1,
     .help = "spec: stop drafting at the first draft whose head probability is below it (fewer "
             "verify rows, same output); 0: always k"},
    {.key = "vocab", .kind = SPECD_OPTION_INT, MRP_FIELD(vocab), .dflt = "8192", .min = 0,
     .max = 1 << 24, .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "draft over the first N ids of the head's mrp.draft_vocab (most frequent first; all "
             "of a shorter list); 0: the whole vocabulary"},
    {.key = "cand", .kind = SPECD_OPTION_INT, MRP_FIELD(m), .dflt = "64", .min = 0, .max = 4096,
     .help = "tokens the later residuals are computed over; 0: all"},
    {.key = "cand_from", .kind = SPECD_OPTION_ENUM, MRP_FIELD(from), .dflt = "head",
     .choices = "head|target",
     .help = "target: take the candidates from the target's row instead of z_1 (cheaper)"},
    {.key = "threads", .kind = SPECD_OPTION_INT, MRP_FIELD(threads), .dflt = "1", .min = 0,
     .max = 256, .help = "the head context's threads; 0: online cores"},
    {.key = "ctx", .kind = SPECD_OPTION_INT, MRP_FIELD(ctx), .dflt = "4096", .min = 16,
     .max = 1 << 20, .help = "the head's KV size"},
    {.key = "catch_up", .kind = SPECD_OPTION_INT, MRP_FIELD(catch_up), .dflt = "512", .min = 1,
     .max = 1 << 16,
     .help = "rows outside the head's steps (the prompt's, the guard's plain steps') kept for it; "
             "after a longer pause it starts again from the newest N"},
};
const specd_option_table specd_mrp_options = SPECD_OPTION_TABLE(option_rows);

static specd_status parse_options(const specd_policy_env *env, const char *options,
                                  mrp_options *o, specd_error *err) {
    memset(o, 0, sizeof *o);
    o->k = 0; /* 0: the head's mrp.n_draft, else 3 */
    o->vocab = MRP_VOCAB_AUTO;
    const specd_option_bounds bounds = {.max_draft = env->max_draft};
    SPECD_TRY(specd_options_parse_table("mrp", &specd_mrp_options, &bounds, options, o, err));
    if (!o->head[0])
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy mrp: needs head=PATH, an MRP head GGUF trained over the target");
    if (!env->target)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "policy mrp: needs the target model (its embedding, output head and "
                          "hidden states): run the target on specd's runtime");
    /* the head context writes the target's vocabulary width into state sized from env */
    if (env->n_vocab != specd_model_get_info(env->target)->n_vocab)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "policy mrp: the spec's vocabulary (%d) is not the target model's (%d)",
                          env->n_vocab, specd_model_get_info(env->target)->n_vocab);
    if (o->m > env->n_vocab) o->m = env->n_vocab;
    return SPECD_OK;
}

/* The head, loaded once per spec and shared by its sequences (policy ABI 2). */
static specd_status mrp_shared_create(const specd_policy_env *env, const char *options,
                                      void **shared, specd_error *err) {
    mrp_options o;
    *shared = NULL;
    /* bad options are reported by create */
    if (parse_options(env, options, &o, NULL) != SPECD_OK) return SPECD_OK;
    mrp_head *h = NULL;
    SPECD_TRY(mrp_head_open(env->target, o.head, o.vocab, &h, err));
    *shared = h;
    return SPECD_OK;
}

static void mrp_shared_destroy(void *shared) { mrp_head_close(shared); }

static specd_status alloc_state(mrp_state *s) {
    const size_t K = (size_t)s->k, E = (size_t)s->n_embd, B = (size_t)s->hctx_batch;
    s->pend = specd_alloc_array(K, sizeof(int32_t));
    s->conf = specd_alloc_array(K, sizeof(float));
    s->tokens = specd_alloc_array(K + 1, sizeof(int32_t));
    s->pos = specd_alloc_array(K + 1, sizeof(int32_t));
    s->rows = specd_alloc_array(K + 1, sizeof(int32_t));
    s->emitted = specd_alloc_array(K + 1, sizeof(int32_t));
    s->keep = specd_alloc_array(K + 1, sizeof(int32_t));
    s->accept_prob = specd_alloc_array(K, sizeof(float));
    s->htok = specd_alloc_array(B, sizeof(int32_t));
    s->hpos = specd_alloc_array(B, sizeof(int32_t));
    s->lag_tok = specd_alloc_array((size_t)s->lag_cap, sizeof(int32_t));
    s->lag_h = specd_alloc_array((size_t)s->lag_cap * E, sizeof(float));
    s->u = specd_alloc_array(B * E, sizeof(float));
    s->in2 = specd_alloc_array(MRP_INPUT_SCRATCH(E), sizeof(float));
    s->hp = specd_alloc_array(E, sizeof(float));
    s->hacc = specd_alloc_array(E, sizeof(float));
    s->cand = specd_alloc_array((size_t)s->m, sizeof(int32_t));
    s->cand_rows = specd_alloc_array(s->full_all ? 1 : (size_t)s->m * E, sizeof(float));
    s->z = specd_alloc_array((size_t)s->m, sizeof(float));
    if (s->need_q) s->q = specd_alloc_array(K * (size_t)s->n_vocab, sizeof(float));
    if (s->full_c1)
        s->c1 = specd_alloc_array(s->dv ? (size_t)s->dv->n : (size_t)s->n_vocab, sizeof(float));
    if (s->dv) s->act = specd_alloc_array(1, s->dv->act_bytes);
    int ok = s->pend && s->conf && (!s->dv || s->act) && s->tokens && s->pos && s->rows &&
             s->emitted && s->keep && s->accept_prob && s->htok && s->hpos && s->lag_tok &&
             s->lag_h && s->u && s->in2 &&
             s->hp && s->hacc && s->cand && s->cand_rows && s->z && (!s->need_q || s->q) && (!s->full_c1 || s->c1);
    return ok ? SPECD_OK : SPECD_E_NOMEM;
}

static specd_status mrp_create(const specd_policy_env *env, const char *options, void **state,
                               specd_error *err) {
    mrp_options o;
    SPECD_TRY(parse_options(env, options, &o, err));
    mrp_state *s = specd_alloc_array(1, sizeof *s); /* zeroed: destroy may run early */
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    specd_status st = SPECD_OK;
    if (env->shared) {
        s->head = env->shared;
    } else {
        st = mrp_head_open(env->target, o.head, o.vocab, &s->head, err);
        s->own_head = st == SPECD_OK;
    }
    if (st != SPECD_OK) {
        mrp_destroy(s);
        return st;
    }
    int32_t k = o.k ? o.k : s->head->n_draft ? s->head->n_draft : 3;
    s->k = k < env->max_draft ? k : env->max_draft;
    s->m = o.m > 0 ? o.m : env->n_vocab;
    s->n_vocab = env->n_vocab;
    s->n_embd = s->head->n_embd;
    s->mode = o.mode;
    s->stop_below = s->mode == MODE_REMASK ? o.tau : s->mode == MODE_SPEC ? o.min_conf : 0.0f;
    s->full_all = o.m == 0;
    s->full_c1 = o.from == 0 || s->full_all;
    /* the draft vocabulary serves C_1 (cand_from=head); cand=0 keeps the whole vocabulary */
    if (s->head->dv.n > 0 && s->full_c1 && !s->full_all) {
        s->dv = &s->head->dv;
        if (s->m > s->dv->n) s->m = s->dv->n;
    }
    mrp_prof_init(&s->prof);
    s->rule = env->rule;
    s->temperature = env->rule == SPECD_ACCEPT_GREEDY ? 0.0f : env->sampling.temperature;
    s->need_q =
        s->mode == MODE_SPEC && env->rule == SPECD_ACCEPT_REJECTION && s->temperature > 0.0f;
    s->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};
    s->hctx_cap = o.ctx;
    s->hctx_batch = 64;
    s->lag_cap = o.catch_up;
    s->expect_n = -1;
    if (alloc_state(s) != SPECD_OK) {
        mrp_destroy(s);
        return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    }
    specd_context_params cp = specd_policy_context_params(env);
    cp.n_seq = 1;
    cp.n_ctx = s->hctx_cap;
    cp.n_batch = s->hctx_batch;
    cp.n_threads = o.threads;
    if ((st = specd_context_create(s->head->model, &cp, &s->hctx, err)) != SPECD_OK ||
        (st = specd_seq_verifier_create(env, s->k, &s->accept, &s->target, err)) != SPECD_OK) {
        mrp_destroy(s);
        return st;
    }
    for (int32_t i = 0; i <= s->k; i++) s->rows[i] = i;
    for (int32_t i = 0; s->full_all && i < s->m; i++) s->cand[i] = i;
    *state = s;
    return SPECD_OK;
}

/* Commits head rows for target positions j0 .. j0+n-1 (y = ys[i], g = row i of gs, stride
 * n_embd); with hp_last, the last row's head output goes there. Profiled as `part` (the prompt's
 * rows apart from a step's). */
static specd_status commit_rows(mrp_state *s, const int32_t *ys, const float *gs, int64_t j0,
                                int64_t n, float *hp_last, float *c_last, mrp_prof_part part,
                                specd_error *err) {
    const size_t E = (size_t)s->n_embd;
    for (int64_t at = 0; at < n;) {
        int32_t c = (int32_t)(n - at < s->hctx_batch ? n - at : s->hctx_batch);
        mrp_prof_start(&s->prof);
        for (int32_t i = 0; i < c; i++) {
            s->htok[i] = ys[at + i];
            s->hpos[i] = (int32_t)(j0 + at + i + 1);
            mrp_head_input(s->head, ys[at + i], gs + (size_t)(at + i) * E, s->u + (size_t)i * E,
                           s->in2);
        }
        mrp_prof_mark(&s->prof, part == MRP_PROF_COMMIT ? MRP_PROF_INPUT : part);
        at += c;
        int32_t last = c - 1;
        specd_seq_batch b = {.seq = 0, .n_tokens = c, .tokens = s->htok, .pos = s->hpos,
                             .embd = s->u};
        specd_extend_out out = {.n_rows = 1, .rows = &last, .logits = c_last, .hidden = hp_last};
        SPECD_TRY(specd_context_extend(s->hctx, &b, 1, at == n && hp_last ? &out : NULL, err));
        mrp_prof_mark(&s->prof, part);
    }
    return SPECD_OK;
}

/* Forgets the head's rows: it starts again at target position `base`. */
static void restart_head(mrp_state *s, int64_t base) {
    specd_context_kv_truncate(s->hctx, 0, 0, NULL);
    s->n_lag = 0;
    s->base = base;
}

/* Commits the waiting rows (head forwards of hctx_batch rows), after the cache's rows when they
 * follow on, else in place of them. */
static specd_status flush_lag(mrp_state *s, specd_error *err) {
    if (s->n_lag == 0) return SPECD_OK;
    const int64_t j0 = s->lag_row0;
    const int32_t n = s->n_lag, first = s->lag_first;
    s->n_lag = 0;
    if (j0 != s->base + specd_context_kv_len(s->hctx, 0) ||
        j0 + n - s->base + 2 * (int64_t)s->k + 2 > s->hctx_cap) {
        specd_context_kv_truncate(s->hctx, 0, 0, NULL);
        s->base = j0;
    }
    const mrp_prof_part part = s->started ? MRP_PROF_CATCH_UP : MRP_PROF_PREFILL;
    const int32_t n1 = n < s->lag_cap - first ? n : s->lag_cap - first; /* up to the ring's end */
    const size_t E = (size_t)s->n_embd;
    SPECD_TRY(commit_rows(s, s->lag_tok + first, s->lag_h + (size_t)first * E, j0, n1, NULL, NULL,
                          part, err));
    if (n > n1) SPECD_TRY(commit_rows(s, s->lag_tok, s->lag_h, j0 + n1, n - n1, NULL, NULL, part, err));
    return SPECD_OK;
}

/* Queues row j (next token y, hidden state g); the oldest waiting row goes when the ring is
 * full. */
static void push_lag(mrp_state *s, int64_t j, int32_t y, const float *g) {
    if (s->n_lag == 0) {
        s->lag_row0 = j;
        s->lag_first = 0;
    } else if (s->n_lag == s->lag_cap) {
        s->lag_first = (s->lag_first + 1) % s->lag_cap;
        s->lag_row0++;
        s->n_lag--;
    }
    int32_t at = (s->lag_first + s->n_lag) % s->lag_cap;
    s->lag_tok[at] = y;
    memcpy(s->lag_h + (size_t)at * (size_t)s->n_embd, g, (size_t)s->n_embd * sizeof(float));
    s->n_lag++;
}

/* The prompt's rows before the first step, and (HIDDEN_CATCH_UP) each plain step's row the
 * guard ran instead of a policy step: they wait, and are committed together when the head runs
 * again. A gap (rows the host did not pass) restarts the head at the new row, with less
 * context; a row the head has already (the history was rolled back) replaces it and those after
 * it. */
static specd_status mrp_prefill_hidden(void *state, const int32_t *history, int64_t n_history,
                                       const float *hidden, int64_t row0, int32_t n_rows,
                                       int32_t n_embd, specd_error *err) {
    mrp_state *s = state;
    if (n_embd != s->n_embd)
        return specd_fail(err, SPECD_E_MISMATCH, "policy mrp: hidden width %d, head %d", n_embd,
                          s->n_embd);
    if (s->dead) return SPECD_OK;
    if (row0 < 0 || n_rows < 1 || row0 + n_rows > n_history - 1)
        return specd_fail(err, SPECD_E_STATE,
                          "policy mrp: hidden rows [%lld, %lld) are not rows of a %lld-token "
                          "history", (long long)row0, (long long)(row0 + n_rows),
                          (long long)n_history);
    const int32_t have = specd_context_kv_len(s->hctx, 0);
    const int64_t next = s->n_lag ? s->lag_row0 + s->n_lag : s->base + have;
    if (row0 > next) {
        restart_head(s, row0);
    } else if (row0 < next) {
        if (s->n_lag && row0 >= s->lag_row0) {
            s->n_lag = (int32_t)(row0 - s->lag_row0);
        } else {
            s->n_lag = 0;
            if (row0 < s->base || row0 > s->base + have) restart_head(s, row0);
            else specd_context_kv_truncate(s->hctx, 0, (int32_t)(row0 - s->base), NULL);
        }
    }
    const size_t E = (size_t)s->n_embd;
    /* row j's next token is history[j + 1] */
    for (int32_t i = 0; i < n_rows; i++)
        push_lag(s, row0 + i, history[row0 + i + 1], hidden + (size_t)i * E);
    return SPECD_OK;
}

/* Brings the head cache to the positions history[0..n) decided: rows [base, n - 1). Returns 0
 * when the head cannot follow (out of room), -1 (err set) when its forward failed: the policy
 * stops drafting either way. */
static int sync_head(mrp_state *s, int64_t n, specd_error *err) {
    if (flush_lag(s, err) != SPECD_OK) return -1;
    int32_t have = specd_context_kv_len(s->hctx, 0);
    int64_t want = n - 1 - s->base;
    /* the first step without the prompt's rows, or rows missing since (a host that passed no
     * hidden state for a plain step): the head starts here */
    if ((!s->started && have != want) || want < 0 || have < want) {
        restart_head(s, n - 1);
        have = 0;
        want = 0;
    }
    s->started = 1;
    if (have > want) specd_context_kv_truncate(s->hctx, 0, (int32_t)want, NULL);
    /* this step's rows, then one round of speculative rows */
    return want + 2 * (int64_t)s->k + 2 <= s->hctx_cap;
}

static specd_status mrp_layout(void *state, const int32_t *history, int64_t n_history,
                               specd_step_layout *out, specd_error *err) {
    mrp_state *s = state;
    if (n_history < 1 || n_history + s->k + 1 > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy mrp: history length %lld",
                          (long long)n_history);
    if (!s->dead) {
        /* the target decides every token: without the head, steps are plain ones */
        specd_error serr;
        int synced = sync_head(s, n_history, &serr);
        if (synced < 0)
            specd_log(SPECD_LOG_WARN, "policy mrp: the head stopped drafting: %s", serr.message);
        s->dead = synced <= 0;
    }
    if (n_history != s->expect_n || s->dead) s->n_pend = 0;
    const int32_t p = s->n_pend;
    s->n_at = n_history;
    s->n_tokens = 1 + p;
    s->tokens[0] = history[n_history - 1];
    memcpy(s->tokens + 1, s->pend, (size_t)p * sizeof(int32_t));
    for (int32_t i = 0; i < s->n_tokens; i++) s->pos[i] = (int32_t)(n_history - 1 + i);
    *out = (specd_step_layout){.n_tokens = s->n_tokens, .tokens = s->tokens, .pos = s->pos,
                               .n_rows = s->n_tokens, .rows = s->rows};
    return SPECD_OK;
}

/* S: the m best of row[0..n) (ties: lower index), as a min-heap-free insertion (m is small
 * against n, and most entries fail the first comparison); entry i is token ids[i], or i without
 * ids. */
static void candidates(mrp_state *s, const float *row, const int32_t *ids, int32_t n_row) {
    int32_t n = 0, m = s->m;
    for (int32_t x = 0; x < n_row; x++) {
        float v = row[x];
        if (n == m && !(v > row[s->cand[m - 1]])) continue;
        int32_t at = n < m ? n++ : m - 1;
        while (at > 0 && v > row[s->cand[at - 1]]) {
            s->cand[at] = s->cand[at - 1];
            at--;
        }
        s->cand[at] = x;
    }
    for (int32_t i = 0; i < m; i++) {
        s->z[i] = row[s->cand[i]];
        if (ids) s->cand[i] = ids[s->cand[i]];
        mrp_head_row(&s->head->out, s->cand[i], s->n_embd, s->cand_rows + (size_t)i * s->n_embd);
    }
}

/* z += C = out_S . hp */
static void add_residual(mrp_state *s, const float *hp) {
    for (int32_t i = 0; i < s->m; i++)
        s->z[i] += mrp_dot(s->head, s->cand_rows + (size_t)i * s->n_embd, hp, s->n_embd);
}

/* The head's probability of z[i] over S at temperature T (1 under the greedy rule: the head was
 * trained at 1): remask's confidence. */
static float confidence(const mrp_state *s, int32_t i) {
    const float T = s->temperature > 0.0f ? s->temperature : 1.0f;
    float zmax = -INFINITY;
    for (int32_t j = 0; j < s->m; j++) zmax = s->z[j] > zmax ? s->z[j] : zmax;
    double sum = 0.0;
    for (int32_t j = 0; j < s->m; j++) sum += exp((double)((s->z[j] - zmax) / T));
    return (float)(exp((double)((s->z[i] - zmax) / T)) / sum);
}

/* The draft for `position` from z over S; q (spec mode, rejection sampling) into q_row; remask's
 * confidence into *conf. */
static int32_t pick(mrp_state *s, uint32_t position, float *q_row, float *conf) {
    specd_sample_key key = s->key;
    key.position = position;
    const float T = s->temperature;
    int sample = T > 0.0f && (s->rule != SPECD_ACCEPT_GREEDY);
    specd_rng_purpose purpose =
        s->rule == SPECD_ACCEPT_REJECTION ? SPECD_RNG_DRAFT : SPECD_RNG_SAMPLE;
    int32_t best = 0;
    for (int32_t i = 1; i < s->m; i++)
        if (s->z[i] > s->z[best]) best = i;
    if (sample) {
        /* keyed uniforms lie in [2^-24, 1 - 2^-24], so G in [-2.81, 16.64]: a token more than
         * 19.45 below the top (in z / T) never wins, and its noise need not be drawn (21: room
         * for the fast log's error) */
        const float floor = s->z[best] / T - 21.0f;
        float best_v = -INFINITY;
        for (int32_t i = 0; i < s->m; i++) {
            if (!(s->z[i] / T >= floor)) continue;
            float v = s->z[i] / T + specd_sampling_gumbel(key, purpose, s->cand[i]);
            if (v > best_v) {
                best = i;
                best_v = v;
            }
        }
    }
    if (q_row) {
        /* q = softmax(z / T) over S: the draw above is from exactly this distribution */
        memset(q_row, 0, (size_t)s->n_vocab * sizeof(float));
        float zmax = -INFINITY;
        for (int32_t i = 0; i < s->m; i++) zmax = s->z[i] / T > zmax ? s->z[i] / T : zmax;
        double sum = 0.0;
        for (int32_t i = 0; i < s->m; i++) sum += exp((double)(s->z[i] / T - zmax));
        for (int32_t i = 0; i < s->m; i++)
            q_row[s->cand[i]] = (float)(exp((double)(s->z[i] / T - zmax)) / sum);
    }
    *conf = s->stop_below > 0.0f ? confidence(s, best) : 1.0f;
    return s->cand[best];
}

/* After the step decided rows 0..n_dec-1 (history now n_new long): commit their head rows and
 * draft the next k tokens. */
static specd_status draft_round(mrp_state *s, const float *logits, const float *hidden,
                                int32_t n_dec, int64_t n_new, specd_error *err) {
    const size_t E = (size_t)s->n_embd, V = (size_t)s->n_vocab;
    const int64_t t = n_new - 2; /* x_{t+1} = history[n_new - 1] was just decided */
    int32_t committed = specd_context_kv_len(s->hctx, 0);
    SPECD_TRY(commit_rows(s, s->emitted, hidden, s->n_at - 1, n_dec, s->hp,
                          s->dv ? NULL : s->c1, MRP_PROF_COMMIT, err));
    mrp_prof_start(&s->prof);
    const float *zA = logits + (size_t)(n_dec - 1) * V, *hA = hidden + (size_t)(n_dec - 1) * E;
    committed += n_dec;
    if (s->full_all) {
        /* S is the whole vocabulary (cand[i] = i): z_1 = zA_t + C_1 */
        for (size_t x = 0; x < V; x++) s->z[x] = zA[x] + s->c1[x];
    } else if (s->dv) {
        /* z_1 over the draft vocabulary only (C_1 from its private rows); S = its top M */
        const int32_t *ids = s->dv->ids;
        mrp_vocab_logits(s->dv, s->hp, s->n_embd, s->c1, s->act);
        for (int32_t i = 0; i < s->dv->n; i++) s->c1[i] += zA[ids[i]];
        candidates(s, s->c1, ids, s->dv->n);
    } else if (s->c1) {
        /* z_1 over the whole vocabulary (C_1 by the runtime's output head); S = its top M */
        for (size_t x = 0; x < V; x++) s->c1[x] += zA[x];
        candidates(s, s->c1, NULL, s->n_vocab);
    } else {
        candidates(s, zA, NULL, s->n_vocab);
        add_residual(s, s->hp);
    }
    mrp_prof_mark(&s->prof, MRP_PROF_C1);
    s->pend[0] = pick(s, (uint32_t)n_new, s->need_q ? s->q : NULL, &s->conf[0]);
    mrp_prof_mark(&s->prof, MRP_PROF_PICK);
    /* drafting stops at the first draft the head doubts. spec (min_conf): such a draft costs a
     * verify row, and the rows after it, for little chance of acceptance; proposing fewer never
     * changes the output (the count depends on the drafter's state only, as in EAGLE-2's dynamic
     * drafts). remask (tau): it and those after it are remasked, drafted again from the next
     * decided position, and never cost a head row */
    int32_t n_draft = s->k;
    if (s->conf[0] < s->stop_below) n_draft = 0;
    for (size_t i = 0; i < E; i++) s->hacc[i] = hA[i] + s->hp[i];
    specd_status st = SPECD_OK;
    for (int32_t k = 2; k <= n_draft && st == SPECD_OK; k++) {
        int32_t y = s->pend[k - 2], p = (int32_t)(t + k), zero = 0;
        mrp_head_input(s->head, y, s->hacc, s->u, s->in2);
        mrp_prof_mark(&s->prof, MRP_PROF_INPUT);
        specd_seq_batch b = {.seq = 0, .n_tokens = 1, .tokens = &y, .pos = &p, .embd = s->u};
        specd_extend_out out = {.n_rows = 1, .rows = &zero,
                                .logits = s->full_all ? s->c1 : NULL, .hidden = s->hp};
        if ((st = specd_context_extend(s->hctx, &b, 1, &out, err)) != SPECD_OK) break;
        mrp_prof_mark(&s->prof, MRP_PROF_SPEC);
        if (s->full_all)
            for (size_t x = 0; x < V; x++) s->z[x] += s->c1[x];
        else
            add_residual(s, s->hp);
        for (size_t i = 0; i < E; i++) s->hacc[i] += s->hp[i];
        mrp_prof_mark(&s->prof, MRP_PROF_RESID);
        s->pend[k - 1] = pick(s, (uint32_t)(n_new + k - 1),
                              s->need_q ? s->q + (size_t)(k - 1) * V : NULL, &s->conf[k - 1]);
        mrp_prof_mark(&s->prof, MRP_PROF_PICK);
        if (s->conf[k - 1] < s->stop_below) n_draft = k - 1;
    }
    s->prof.rounds++;
    /* speculative rows never stay */
    specd_context_kv_truncate(s->hctx, 0, committed, NULL);
    if (st != SPECD_OK) return st;
    s->n_pend = n_draft;
    return SPECD_OK;
}

static specd_status mrp_verify_hidden(void *state, const float *logits, const float *hidden,
                                      int32_t n_embd, specd_step_outcome *out, specd_error *err) {
    mrp_state *s = state;
    if (n_embd != s->n_embd)
        return specd_fail(err, SPECD_E_MISMATCH, "policy mrp: hidden width %d, head %d", n_embd,
                          s->n_embd);
    const int32_t p = s->n_tokens - 1;
    specd_sample_key key = s->key;
    key.position = (uint32_t)s->n_at;
    int32_t n_emitted, n_accepted = 0, n_dec;
    int lossy = 0;
    mrp_prof_start(&s->prof);
    if (s->mode != MODE_SPEC && p > 0) {
        /* every draft stands; the target's token follows them. n_accepted: how many the
         * target agreed with (a quality figure, not what decided the step) */
        memcpy(s->emitted, s->pend, (size_t)p * sizeof(int32_t));
        key.position = (uint32_t)(s->n_at + p);
        SPECD_TRY(specd_sampler_sample(s->target, logits + (size_t)p * s->n_vocab, s->n_vocab,
                                       key, &s->emitted[p], err));
        for (int32_t i = 0; i < p; i++) {
            int32_t tok;
            key.position = (uint32_t)(s->n_at + i);
            SPECD_TRY(specd_sampler_sample(s->target, logits + (size_t)i * s->n_vocab,
                                           s->n_vocab, key, &tok, err));
            if (tok != s->pend[i]) break;
            n_accepted++;
        }
        n_emitted = p + 1;
        n_dec = p + 1;
        lossy = 1;
    } else if (p == 0) {
        SPECD_TRY(specd_sampler_sample(s->target, logits, s->n_vocab, key, &s->emitted[0], err));
        n_emitted = n_dec = 1;
    } else {
        specd_chain_input in = {.k = p, .draft = s->pend, .draft_probs = s->need_q ? s->q : NULL,
                                .q_vocab = s->n_vocab, .target_logits = logits,
                                .n_vocab = s->n_vocab, .key = key};
        specd_chain_result res = {.tokens = s->emitted, .accept_prob = s->accept_prob};
        SPECD_TRY(specd_accept_chain(s->accept, &in, &res, err));
        n_emitted = res.n_emitted;
        n_accepted = res.n_accepted;
        n_dec = n_accepted + 1;
        lossy = res.lossy;
    }
    for (int32_t i = 0; i < n_dec; i++) s->keep[i] = i;
    s->n_pend = 0;
    s->expect_n = s->n_at + n_emitted;
    mrp_prof_mark(&s->prof, MRP_PROF_VERIFY);
    if (!s->dead) {
        /* the engine has decided this step; a head that fails (e.g. non-finite weights) only
         * stops drafting: later steps are plain target steps, the output stays exact */
        specd_error derr;
        if (draft_round(s, logits, hidden, n_dec, s->expect_n, &derr) != SPECD_OK) {
            specd_log(SPECD_LOG_WARN, "policy mrp: the head stopped drafting: %s", derr.message);
            s->dead = 1;
            s->n_pend = 0;
        }
    }
    *out = (specd_step_outcome){.n_emitted = n_emitted, .emitted = s->emitted, .n_keep = n_dec,
                                .keep = s->keep, .n_drafted = p, .n_accepted = n_accepted,
                                .lossy = lossy};
    return SPECD_OK;
}

/* The shape's required verify: the session calls verify_hidden for this policy (WANTS_HIDDEN). */
static specd_status mrp_verify(void *state, const float *logits, specd_step_outcome *out,
                               specd_error *err) {
    (void)state;
    (void)logits;
    (void)out;
    return specd_fail(err, SPECD_E_STATE,
                      "policy mrp: verifies with the target's hidden states (verify_hidden)");
}

/* The session cut the step short (a stop token, max_tokens) or the host rolled back: the
 * proposals no longer fit, and head rows past the history go at the next layout. */
static void mrp_rollback(void *state, int64_t n_history) {
    mrp_state *s = state;
    if (n_history != s->expect_n) s->n_pend = 0;
}

const specd_policy_ops specd_policy_mrp = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "mrp",
    .options_help = "head=PATH (MRP head GGUF over the target), k=mrp.n_draft|3 (drafts per "
                    "step), mode=spec|direct|remask (direct: drafts emitted unchecked, LOSSY; "
                    "remask: drafts emitted unchecked while the head's confidence is >= tau, "
                    "the rest redrafted, LOSSY), tau=0.5 (remask), min_conf=0.5 (spec: stop "
                    "drafting at the first draft whose head probability is below this; fewer verify rows, "
                    "same output; 0: always k drafts), vocab=8192 (C_1 and the "
                    "drafts over the first N tokens of the head's mrp.draft_vocab, most "
                    "frequent first; 0: the whole vocabulary, as is a head without the list), "
                    "cand=64 (tokens the later residuals are computed over; 0: all, each C_k by "
                    "the output head), cand_from=head|target (the candidates: top of z_1, or top "
                    "of the target's row over the whole vocabulary: cheaper, misses what a "
                    "trained head moves in), threads=1 (head context; 0: online cores), "
                    "ctx=4096 (head KV), catch_up=512 (rows outside the head's steps, the prompt's and "
                    "the guard's plain steps', kept for it until it runs: it starts again from "
                    "the newest N after a longer pause)",
    .create = mrp_create,
    .destroy = mrp_destroy,
    .layout = mrp_layout,
    .verify = mrp_verify,
    .rollback = mrp_rollback,
    .flags = SPECD_POLICY_WANTS_HIDDEN | SPECD_POLICY_WANTS_PREFILL_HIDDEN |
             SPECD_POLICY_HIDDEN_CATCH_UP,
    .shared_create = mrp_shared_create,
    .shared_destroy = mrp_shared_destroy,
    .verify_hidden = mrp_verify_hidden,
    .prefill_hidden = mrp_prefill_hidden,
};
