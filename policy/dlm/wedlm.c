/* wedlm: WeDLM streaming parallel decoding (paper 003, §5.2, Alg. 1) as a self-speculative
 * policy, with dInfer's commit rules (paper 001, App. B) as alternative selection rules.
 *
 * Two adapters fit, told apart by shift= (pred_row() below; nothing else changes). Without shift=
 * the adapter's config decides (export_adapter.py writes "specd_shift": 0 for WeDLM adapters; R-ISD
 * adapters carry none and are shifted):
 *  shift=0  a WeDLM adapter (artifacts/adapters/smollm2-135m-wedlm, tools/train): unshifted, a mask
 *           row predicts its own position ([code]: MLM loss at the same index), so a mask slot's
 *           prediction is its own row's logits.
 *  shift=1  the R-ISD adapter as a STAND-IN (artifacts/adapters/smollm2-135m-risd2),
 *           which is SHIFTED: the row at logical position x predicts x + 1 whatever its input (a
 *           clean row gives plain decoding's distribution, a mask row the adapter's guess without
 *           knowing x), so slot q's prediction is the logits of the row at logical position q - 1.
 *
 * Step at history length n (pending token history[n-1] at position n-1), window of W slots at
 * logical positions n..n+W-1, each a mask or a filled draft (wedlm_select.h):
 *   row 0        pending           pos n-1   base weights
 *   rows 1..f    filled slots      their logical positions, ascending; base weights
 *   rows f+1..W  mask slots        their logical positions, ascending; adapter, mask embedding
 * Strict causal attention in physical order (Alg. 1 line 4: filled before masks, logical
 * positions as position ids). The leftmost contiguous filled run f_n..f_{n+r-1} sits on rows 1..r
 * right after the pending row, so rows 0..r are exactly plain decoding's rows.
 *
 * mode=lossless (default; not in the paper): the run is chain-verified by rows 0..r through the
 *   acceptance engine (as risd verifies its proposals), so the output is token-identical to plain
 *   decoding under greedy and coupled. A rejection drops every other fill (all later rows saw the
 *   rejected token).
 * mode=stream (the paper's, lossy): the run is committed unverified (Alg. 1 lines 6-8); a step
 *   whose slot n is still a mask emits the pending row's token (exact), so every step emits.
 * mode=block (lossy; the paper's block-wise baseline, Fig. 4c): the window is a block of W slots
 *   that commits nothing until all are filled, then is emitted whole (block_verify()); steps
 *   before that emit nothing (SPECD_POLICY_MAY_EMIT_NONE) but count as forwards in TPF.
 * lossless and stream: keep the KV of the pending row and the emitted run except its last token
 * (the next pending token); then select (eq. 11 or a dInfer rule) which masks to fill from this
 * step's rows, and refill the window with masks (line 12).
 *
 * Every buffer is sized at create: a step allocates nothing. */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_credit.h"
#include "policy/dlm/dlm_embd.h"
#include "policy/dlm/dlm_input.h"
#include "policy/dlm/dlm_rules.h"
#include "policy/dlm/dlm_smooth.h"
#include "policy/dlm/wedlm_select.h"
#include "policy/mask_rows.h"
#include "policy/options.h"
#include "policy/seq_verifier.h"
#include "specd/gguf.h"
#include "specd/runtime.h"
#include "specd/spec.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* the credit table tracks every window slot, and a window's drafts fit the engine's chain */
_Static_assert(SPECD_DLM_CREDIT_SLOTS >= SPECD_WEDLM_MAX_W, "credit slots below the window");
_Static_assert(SPECD_WEDLM_MAX_W <= SPECD_MAX_DRAFT, "window wider than a draft");

enum { MODE_LOSSLESS, MODE_STREAM, MODE_BLOCK };

typedef struct wedlm_state {
    int mode;
    int shift; /* 1: slot q is predicted by the row at q - 1 (R-ISD); 0: by its own row (WeDLM) */
    specd_dlm_rule rule;
    int32_t w, mask_id, n_vocab;
    int32_t eos; /* mode=block's early EOS stop token, or -1 (off) */
    specd_sample_key key;
    /* the adapter; the mask rows' input vector (the adapter's, or E[mask] to smooth) in W + 1
     * input rows */
    specd_dlm_input in;
    /* iteration smoothing (dInfer A.1): per window slot, the next input of a mask that stays
     * masked, e_mask + alpha_t p W_emb from this step's prediction there */
    float smooth_max; /* alpha's cap; 0 = off */
    specd_dlm_embd tab;
    float *slot_vec, *slot_vec_next; /* W x n_embd each */
    uint8_t has_vec[SPECD_WEDLM_MAX_W];
    int32_t slot_iter[SPECD_WEDLM_MAX_W];
    float *smooth_scratch; /* 2 n_embd */
    specd_accept *accept;
    specd_sampler *target;
    specd_dlm_credit credit;
    specd_wedlm_window win;
    int64_t expect_n; /* the window is good for this history length only */

    /* the step in flight */
    int64_t n_at;
    specd_wedlm_window at; /* the window the step was laid out from */
    int32_t n_tokens;
    int32_t tokens[SPECD_WEDLM_MAX_W + 1], pos[SPECD_WEDLM_MAX_W + 1];
    int32_t rows[SPECD_WEDLM_MAX_W + 1], row_of[SPECD_WEDLM_MAX_W + 1]; /* logical n-1+i -> row */
    int32_t emitted[SPECD_WEDLM_MAX_W + 1], keep[SPECD_WEDLM_MAX_W + 1];
    float gate[SPECD_WEDLM_MAX_W + 1], accept_prob[SPECD_WEDLM_MAX_W + 1];
} wedlm_state;

static void wedlm_destroy(void *state) {
    wedlm_state *s = state;
    if (!s) return;
    specd_dlm_input_free(&s->in);
    specd_free(s->slot_vec);
    specd_free(s->slot_vec_next);
    specd_free(s->smooth_scratch);
    specd_accept_destroy(s->accept);
    specd_sampler_destroy(s->target);
    specd_free(s);
}

/* Iteration smoothing's buffers, and E[mask] as e_mask when the adapter brings no vector. */
static specd_status smooth_setup(wedlm_state *s, const specd_policy_env *env, float smooth,
                                 specd_error *err) {
    const int32_t E = specd_model_get_info(env->target)->n_embd;
    if (s->in.mask_vec && s->in.n_embd != E)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "policy wedlm: mask embedding of %d floats, "
                          "the target's n_embd is %d",
                          s->in.n_embd, E);
    SPECD_TRY(specd_dlm_embd_open(env->target, env->n_vocab, E, &s->tab, err));
    s->smooth_max = smooth;
    s->in.n_embd = E;
    const size_t n = (size_t)s->w * (size_t)E;
    if (!s->in.mask_vec && (s->in.mask_vec = specd_alloc_array((size_t)E, sizeof(float))))
        specd_dlm_embd_row(&s->tab, s->mask_id, s->in.mask_vec);
    s->slot_vec = specd_alloc_array(n, sizeof(float));
    s->slot_vec_next = specd_alloc_array(n, sizeof(float));
    s->smooth_scratch = specd_alloc_array(2 * (size_t)E, sizeof(float));
    if (!s->in.mask_vec || !s->slot_vec || !s->slot_vec_next || !s->smooth_scratch)
        return specd_fail(err, SPECD_E_NOMEM, "policy wedlm: out of memory");
    return SPECD_OK;
}

typedef struct wedlm_opts {
    int32_t w, mask, shift, early_eos, eos, mode, select;
    char adapter[4096];
    float tau, tau_low, lambda, smooth;
} wedlm_opts;

#define WEDLM_FIELD(f) .offset = offsetof(wedlm_opts, f)
static const specd_policy_option option_rows[] = {
    {.key = "adapter", .kind = SPECD_OPTION_PATH, WEDLM_FIELD(adapter),
     .size = sizeof((wedlm_opts *)0)->adapter, .artifact = "adapters/smollm2-135m-wedlm",
     .artifact_env = "SPECD_WEDLM_ADAPTER", .flags = SPECD_OPTION_ARTIFACT_NEEDED,
     .help = "PEFT LoRA on the mask rows (a WeDLM export, or an R-ISD one as a stand-in)"},
    {.key = "shift", .kind = SPECD_OPTION_INT, WEDLM_FIELD(shift),
     .dflt = "the adapter's specd_shift, else 1", .min = 0, .max = 1,
     .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "0: a mask slot reads its own row (WeDLM adapters); 1: the row before it (R-ISD "
             "adapters)"},
    {.key = "mode", .kind = SPECD_OPTION_ENUM, WEDLM_FIELD(mode), .dflt = "lossless",
     .choices = "lossless|stream|block", /* MODE_* order */
     .help = "stream: the paper's unverified commit (LOSSY); block: block-wise baseline, a block "
             "of W emitted whole once filled (LOSSY)"},
    {.key = "w", .kind = SPECD_OPTION_INT, WEDLM_FIELD(w), .dflt = "6", .min = 1,
     .max = SPECD_WEDLM_MAX_W, .help = "window W (slots)"},
    {.key = "select", .kind = SPECD_OPTION_ENUM, WEDLM_FIELD(select), .dflt = "entropy",
     .choices = SPECD_DLM_SELECT_CHOICES,
     .help = "the fill rule: entropy (eq. 11), or one of dInfer's"},
    SPECD_DLM_RULE_ROWS(wedlm_opts),
    {.key = "smooth", .kind = SPECD_OPTION_FLOAT, WEDLM_FIELD(smooth), .dflt = "0", .min = 0,
     .max = 1, .help = "iteration smoothing's alpha cap (e.g. 0.3); 0: off"},
    {.key = "early_eos", .kind = SPECD_OPTION_BOOL, WEDLM_FIELD(early_eos), .dflt = "0",
     .help = "mode=block: once an EOS and every slot before it are decided, the block commits"},
    {.key = "eos", .kind = SPECD_OPTION_INT, WEDLM_FIELD(eos), .dflt = "the model's EOS",
     .min = 0, .max = INT32_MAX, .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "the stop token early_eos looks for"},
    {.key = "mask", .kind = SPECD_OPTION_INT, WEDLM_FIELD(mask),
     .dflt = "the GGUF's mask token, else 0", .min = 0, .max = INT32_MAX,
     .flags = SPECD_OPTION_DEFAULT_DERIVED, .help = "mask token id"},
};
const specd_option_table specd_wedlm_options = SPECD_OPTION_TABLE(option_rows);

static specd_status wedlm_create(const specd_policy_env *env, const char *options, void **state,
                                 specd_error *err) {
    /* -1: as the adapter's config says, else 1 */
    wedlm_opts o = {.mask = -1, .shift = -1, .eos = -1, .tau = NAN, .tau_low = NAN, .lambda = NAN};
    SPECD_TRY(specd_options_parse_table("wedlm", &specd_wedlm_options, NULL, options, &o, err));
    const int32_t w = o.w, mask = o.mask, early_eos = o.early_eos, eos = o.eos;
    int32_t shift = o.shift;
    const char *adapter = o.adapter;
    if (adapter[0]) {
        /* run the adapter as it was trained: a WeDLM export records shift 0, an R-ISD one none */
        specd_lora_info info;
        SPECD_TRY(specd_dlm_adapter_info("wedlm", adapter, &info, err));
        if (!strcmp(info.objective, "sdar"))
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "policy wedlm: adapter %s was trained for block-bidirectional "
                              "decoding (run it with --policy sdar)",
                              adapter);
        if (shift < 0) shift = info.shift >= 0 ? info.shift : 1;
    }
    if (shift < 0) shift = 1;
    const int mode_id = o.mode;
    specd_dlm_rule rule;
    SPECD_TRY(specd_dlm_rule_parse("wedlm", (specd_dlm_rule_kind)o.select, o.tau, o.tau_low,
                                   o.lambda, &rule, err));
    const float smooth = o.smooth;
    if (smooth > 0.0f && !env->target)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy wedlm: smooth needs the target's "
                          "token embedding (specd running the target)");
    const int32_t most = env->max_step_rows > 0 ? env->max_step_rows : 2 * env->max_draft + 1;
    if (w + 1 > most || w > SPECD_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy wedlm: w=%d needs %d rows per step, "
                          "more than the step's %d",
                          w, w + 1, most);
    int32_t mask_id;
    SPECD_TRY(specd_mask_pick_id(env, "wedlm", mask, &mask_id, err));

    wedlm_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy wedlm: out of memory");
    s->mode = mode_id;
    s->shift = shift;
    s->rule = rule;
    s->w = w;
    s->mask_id = mask_id;
    s->eos = -1;
    if (early_eos) {
        /* the model's EOS unless eos= names the stop token */
        uint32_t v;
        const specd_gguf *g = env->target ? specd_model_gguf(env->target) : NULL;
        if (eos >= 0)
            s->eos = eos;
        else if (g && specd_gguf_get_u32(g, "tokenizer.ggml.eos_token_id", &v, NULL) == SPECD_OK)
            s->eos = (int32_t)v;
        if (s->eos < 0 || s->eos >= env->n_vocab || mode_id != MODE_BLOCK) {
            const int block = mode_id == MODE_BLOCK;
            wedlm_destroy(s);
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              block ? "policy wedlm: early_eos needs eos=ID (no model EOS here)"
                                    : "policy wedlm: early_eos applies to mode=block");
        }
    }
    s->n_vocab = env->n_vocab;
    s->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};
    s->expect_n = -1;
    specd_status st;
    if ((st = specd_dlm_credit_init(&s->credit, specd_dlm_credit_default_params(), err)) !=
            SPECD_OK ||
        (st = specd_seq_verifier_create(env, w, &s->accept, &s->target, err)) != SPECD_OK ||
        (adapter[0] &&
         (st = specd_dlm_input_load(&s->in, "wedlm", env, adapter, err)) != SPECD_OK) ||
        (smooth > 0.0f && (st = smooth_setup(s, env, smooth, err)) != SPECD_OK) ||
        /* every row may take a vector: the flags pick the mask rows of each step */
        (st = specd_dlm_input_rows(&s->in, "wedlm", w + 1, err)) != SPECD_OK) {
        wedlm_destroy(s);
        return st;
    }
    for (int32_t i = 0; i <= w; i++)
        s->rows[i] = i;
    *state = s;
    return SPECD_OK;
}

static specd_status wedlm_layout(void *state, const int32_t *history, int64_t n_history,
                                 specd_step_layout *out, specd_error *err) {
    wedlm_state *s = state;
    if (n_history < 1 || n_history + s->w + 1 > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy wedlm: history length %lld",
                          (long long)n_history);
    /* fills are drafts for the history they were made after; anything else starts over */
    if (n_history != s->expect_n) {
        SPECD_TRY(specd_wedlm_window_init(&s->win, s->w, n_history, err));
        specd_dlm_credit_init(&s->credit, s->credit.params, NULL);
        memset(s->has_vec, 0, sizeof s->has_vec);
    }
    s->n_at = n_history;
    s->at = s->win;
    int32_t slot[SPECD_WEDLM_MAX_W];
    int64_t lpos[SPECD_WEDLM_MAX_W];
    specd_wedlm_order(&s->win, slot, lpos);
    s->n_tokens = s->w + 1;
    s->tokens[0] = history[n_history - 1];
    s->pos[0] = (int32_t)(n_history - 1);
    s->row_of[0] = 0;
    s->gate[0] = 0.0f;
    for (int32_t r = 0; r < s->w; r++) {
        const int32_t i = slot[r], row = r + 1;
        const int mask = s->win.token[i] < 0;
        s->tokens[row] = mask ? s->mask_id : s->win.token[i];
        s->pos[row] = (int32_t)lpos[r];
        s->row_of[i + 1] = row;
        s->gate[row] = mask ? 1.0f : 0.0f; /* the adapter on mask rows only: clean rows are base */
        if (s->in.embd_rows) {
            s->in.embd_rows[row] = (uint8_t)mask;
            const size_t E = (size_t)s->in.n_embd;
            if (mask)
                memcpy(s->in.embd + (size_t)row * E,
                       s->has_vec[i] ? s->slot_vec + (size_t)i * E : s->in.mask_vec,
                       E * sizeof(float));
        }
    }
    if (s->in.embd_rows) s->in.embd_rows[0] = 0;
    *out = (specd_step_layout){.n_tokens = s->n_tokens,
                               .tokens = s->tokens,
                               .pos = s->pos,
                               .visible = NULL,
                               .lora_gate = s->in.adapter ? s->gate : NULL,
                               .lora = s->in.lora,
                               .n_rows = s->n_tokens,
                               .rows = s->rows,
                               .lora_path = s->in.adapter,
                               .input_embd = s->in.embd,
                               .input_embd_rows = s->in.embd_rows};
    return SPECD_OK;
}

/* The row whose logits predict logical position q, or -1 when this step had none: shifted (the
 * R-ISD stand-in), the row at q - 1 whatever it held; unshifted (WeDLM), q's own row if it was a
 * mask. */
static int32_t pred_row(const wedlm_state *s, int64_t q) {
    const int64_t i = q - s->shift - (s->n_at - 1); /* row_of index: logical n - 1 + i */
    if (i < 0 || i > s->w) return -1;
    if (!s->shift && (i == 0 || s->at.token[i - 1] >= 0)) return -1;
    return s->row_of[i];
}

/* Fills masks of win (the next window, starting at n_at + n_emitted) from this step's rows, by the
 * configured rule; credit is the credit state to update (a copy: the caller commits both only
 * when the whole step succeeds). */
/* Every rule fills at least one mask so that a decoder without an exact row never stalls. Here
 * the pending row's token already moves a streaming step on, so unless the caller needs progress
 * (force) a fill that passed no threshold is taken back: committed (stream) or verified
 * (lossless), such a guess costs more than the slot it fills. */
static specd_status select_fills(const wedlm_state *s, specd_wedlm_window *win,
                                 specd_dlm_credit *credit, const float *logits, int force,
                                 specd_error *err) {
    const size_t V = (size_t)s->n_vocab;
    specd_dlm_pos pos[SPECD_WEDLM_MAX_W];
    uint8_t elig[SPECD_WEDLM_MAX_W];
    int32_t n_elig = 0;
    for (int32_t i = 0; i < s->w; i++) {
        const int64_t q = win->first + i;
        const int32_t row = win->token[i] < 0 ? pred_row(s, q) : -1;
        elig[i] = row >= 0;
        if (!elig[i]) {
            pos[i] = (specd_dlm_pos){0};
            continue;
        }
        const float *z = logits + (size_t)row * V;
        if (s->rule.kind == SPECD_DLM_CREDIT)
            SPECD_TRY(specd_dlm_credit_update(credit, q, z, s->n_vocab, &pos[i], err));
        else
            SPECD_TRY(specd_dlm_pos_from_logits(z, s->n_vocab, &pos[i], err));
        n_elig++;
    }
    if (n_elig == 0) return SPECD_OK;
    int32_t k = 0;
    return specd_dlm_rule_fill(&s->rule, pos, elig, s->w, force, credit, win->first, win->token, &k,
                               err);
}

/* IterSmooth (dInfer A.1) for the masks of win that stay masked: next input row e_mask +
 * alpha_t p W_emb from this step's prediction there (the same row select_fills read), into
 * s->slot_vec_next; has[] and iter[] describe them. alpha_t grows from 0.1 by 0.05 per step the
 * position keeps a vector (ours: the paper gives the schedule's shape, not these numbers), capped
 * at smooth=. */
static specd_status smooth_slots(const wedlm_state *s, const specd_wedlm_window *win,
                                 const float *logits, uint8_t *has, int32_t *iter,
                                 specd_error *err) {
    const size_t V = (size_t)s->n_vocab, E = (size_t)s->in.n_embd;
    for (int32_t i = 0; i < s->w; i++) {
        const int64_t q = win->first + i;
        const int32_t row = win->token[i] < 0 ? pred_row(s, q) : -1;
        has[i] = row >= 0;
        iter[i] = 0;
        if (!has[i]) continue;
        const int64_t j = q - s->at.first; /* the slot q held in this step's window */
        if (j >= 0 && j < s->w && s->has_vec[j]) iter[i] = s->slot_iter[j] + 1;
        const float alpha = specd_dlm_smooth_alpha(0.1f, 0.05f, s->smooth_max, iter[i]);
        SPECD_TRY(specd_dlm_smooth_row(logits + (size_t)row * V, s->n_vocab, specd_dlm_embd_row,
                                       (void *)&s->tab, s->in.mask_vec, s->in.n_embd, alpha,
                                       s->smooth_scratch, s->slot_vec_next + (size_t)i * E, NULL,
                                       err));
    }
    return SPECD_OK;
}

/* mode=block, the paper's block-wise baseline (§5.2, Fig. 3 "stop-and-wait"): the window is one
 * block that neither commits nor slides until every slot is filled. A step whose layout had the
 * whole block filled emits it unverified and keeps its KV (that step's rows saw every block token
 * in logical order: they are cache-valid), and a fresh block of W masks starts; any other step
 * emits nothing, keeps no KV (the pending row is run again next step) and adds fills: a masked
 * slot 0 takes the pending row's token as plain decoding draws it, then the selection rule fills
 * among the other masks, so every step fills at least one slot and every block finishes. */
/* The step succeeded: its window, credit and smoothing vectors become the state. */
static void take_step(wedlm_state *s, const specd_wedlm_window *next,
                      const specd_dlm_credit *credit, const uint8_t *has_vec,
                      const int32_t *slot_iter) {
    s->win = *next;
    s->credit = *credit;
    memcpy(s->has_vec, has_vec, sizeof s->has_vec);
    memcpy(s->slot_iter, slot_iter, sizeof s->slot_iter);
    if (s->smooth_max > 0.0f) {
        float *t = s->slot_vec;
        s->slot_vec = s->slot_vec_next;
        s->slot_vec_next = t;
    }
}

static specd_status block_verify(wedlm_state *s, const float *logits, specd_step_outcome *out,
                                 specd_error *err) {
    int32_t n_emit = 0;
    specd_dlm_credit credit = s->credit;
    specd_wedlm_window next = s->at;
    uint8_t has_vec[SPECD_WEDLM_MAX_W] = {0};
    int32_t slot_iter[SPECD_WEDLM_MAX_W] = {0};
    if (specd_wedlm_commit_run(&s->at) == s->w) {
        memcpy(s->emitted, s->at.token, (size_t)s->w * sizeof(int32_t));
        n_emit = s->w;
        for (int32_t i = 0; i < s->w; i++) /* the pending row and the block but its last token */
            s->keep[i] = i;
        specd_dlm_credit_init(&credit, s->credit.params, NULL);
        SPECD_TRY(specd_wedlm_window_init(&next, s->w, s->n_at + n_emit, err));
        /* the block's last row ran base weights over the whole block in order: it is plain
         * decoding's row for the next block's slot 0, so that slot starts filled (as sdar's
         * refresh step does) and block-wise decoding is not charged a forward per block for it */
        specd_sample_key key = s->key;
        key.position = (uint32_t)next.first;
        SPECD_TRY(specd_sampler_sample(s->target, logits + (size_t)s->row_of[s->w] * s->n_vocab,
                                       s->n_vocab, key, &next.token[0], err));
    } else {
        int32_t filled = 0;
        if (next.token[0] < 0) {
            specd_sample_key key = s->key;
            key.position = (uint32_t)s->n_at;
            SPECD_TRY(
                specd_sampler_sample(s->target, logits, s->n_vocab, key, &next.token[0], err));
            specd_dlm_credit_forget(&credit, next.first);
            filled = 1;
        }
        const specd_wedlm_window before = next;
        const specd_dlm_credit credit_before = credit;
        /* progress is forced only when slot 0 did not just take the pending row's token */
        specd_status st = select_fills(s, &next, &credit, logits, !filled, err);
        if (st == SPECD_OK && s->smooth_max > 0.0f)
            st = smooth_slots(s, &next, logits, has_vec, slot_iter, err);
        if (st == SPECD_E_NUMERIC && filled) {
            /* a non-finite mask row costs this step its other fills; the block keeps what it had
             * and slot 0's exact token, so it still makes progress */
            specd_log(SPECD_LOG_WARN, "policy wedlm: %s; this step fills slot 0 only",
                      err ? err->message : "non-finite mask logits");
            next = before;
            credit = credit_before;
            memset(has_vec, 0, sizeof has_vec);
            memset(slot_iter, 0, sizeof slot_iter);
        } else if (st != SPECD_OK) {
            return st; /* with no fill this step the block would never finish */
        }
        /* early EOS (dInfer): once every slot up to a decided EOS is decided, the slots after it
         * are never emitted (the host stops at EOS), so they are not denoised: the block counts
         * as whole and commits at the next step */
        uint8_t decided[SPECD_WEDLM_MAX_W];
        for (int32_t i = 0; i < s->w; i++)
            decided[i] = next.token[i] >= 0;
        const int32_t e =
            s->eos >= 0 ? specd_dlm_eos_stop(next.token, decided, s->w, &s->eos, 1) : -1;
        for (int32_t i = e + 1; e >= 0 && i < s->w; i++)
            next.token[i] = s->eos;
    }
    take_step(s, &next, &credit, has_vec, slot_iter);
    s->expect_n = s->n_at + n_emit;
    *out = (specd_step_outcome){.n_emitted = n_emit,
                                .emitted = s->emitted,
                                .n_keep = n_emit ? s->w : 0,
                                .keep = s->keep,
                                .n_drafted = n_emit,
                                .n_accepted = n_emit,
                                .lossy = n_emit > 0};
    return SPECD_OK;
}

static specd_status wedlm_verify(void *state, const float *logits, specd_step_outcome *out,
                                 specd_error *err) {
    wedlm_state *s = state;
    if (s->mode == MODE_BLOCK) return block_verify(s, logits, out, err);
    const int32_t r = specd_wedlm_commit_run(&s->at);
    specd_sample_key key = s->key;
    key.position = (uint32_t)s->n_at;
    int32_t n_emit, n_acc = 0, n_keep;
    int lossy = 0, valid = 1;
    if (r == 0) {
        /* slot n is a mask: the pending row's token, as plain decoding draws it */
        SPECD_TRY(specd_sampler_sample(s->target, logits, s->n_vocab, key, &s->emitted[0], err));
        n_emit = 1;
        n_keep = 1;
    } else if (s->mode == MODE_LOSSLESS) {
        specd_chain_input in = {.k = r,
                                .draft = s->at.token,
                                .q_vocab = s->n_vocab,
                                .target_logits = logits,
                                .n_vocab = s->n_vocab,
                                .key = key};
        specd_chain_result res = {.tokens = s->emitted, .accept_prob = s->accept_prob};
        SPECD_TRY(specd_accept_chain(s->accept, &in, &res, err));
        n_emit = res.n_emitted;
        n_acc = res.n_accepted;
        lossy = res.lossy;
        n_keep = n_acc + 1;
        valid = n_acc == r;
    } else {
        /* Alg. 1 lines 6-8: the run is committed as predicted, unverified */
        memcpy(s->emitted, s->at.token, (size_t)r * sizeof(int32_t));
        n_emit = r;
        n_acc = r;
        n_keep = r; /* the pending row and the run but its last token, the next pending one */
        lossy = 1;
    }
    for (int32_t i = 0; i < n_keep; i++)
        s->keep[i] = i;

    /* the next window: slide past what was emitted, refill with masks (line 12); built on copies
     * so that a failure leaves the state as it was */
    specd_dlm_credit credit = s->credit;
    for (int64_t q = s->at.first; q < s->n_at + n_emit && q < s->at.first + s->w; q++)
        specd_dlm_credit_forget(&credit, q);
    specd_wedlm_window next;
    uint8_t has_vec[SPECD_WEDLM_MAX_W] = {0};
    int32_t slot_iter[SPECD_WEDLM_MAX_W] = {0};
    SPECD_TRY(specd_wedlm_window_init(&next, s->w, s->n_at + n_emit, err));
    if (valid) {
        for (int32_t i = 0; i < s->w; i++) {
            const int64_t o = next.first + i - s->at.first;
            if (o < s->at.w) next.token[i] = s->at.token[o];
        }
        specd_status st = select_fills(s, &next, &credit, logits, 0, err);
        if (st == SPECD_OK && s->smooth_max > 0.0f)
            st = smooth_slots(s, &next, logits, has_vec, slot_iter, err);
        if (st == SPECD_E_NUMERIC) {
            /* a non-finite mask row only costs this window its fills: the tokens the clean rows
             * decided stand, and the next step starts from masks */
            specd_log(SPECD_LOG_WARN, "policy wedlm: %s; the window restarts from masks",
                      err ? err->message : "non-finite mask logits");
            SPECD_TRY(specd_wedlm_window_init(&next, s->w, s->n_at + n_emit, err));
            specd_dlm_credit_init(&credit, s->credit.params, NULL);
            memset(has_vec, 0, sizeof has_vec);
            memset(slot_iter, 0, sizeof slot_iter);
        } else if (st != SPECD_OK) {
            return st;
        }
    } else {
        /* every row after the rejected draft saw it: no fill or credit survives */
        specd_dlm_credit_init(&credit, s->credit.params, NULL);
    }
    take_step(s, &next, &credit, has_vec, slot_iter);
    s->expect_n = s->n_at + n_emit;
    *out = (specd_step_outcome){.n_emitted = n_emit,
                                .emitted = s->emitted,
                                .n_keep = n_keep,
                                .keep = s->keep,
                                .n_drafted = r,
                                .n_accepted = n_acc,
                                .lossy = lossy};
    return SPECD_OK;
}

static void wedlm_rollback(void *state, int64_t n_history) {
    wedlm_state *s = state;
    if (n_history != s->expect_n) s->expect_n = -1;
}

const specd_policy_ops specd_policy_wedlm = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "wedlm",
    .options_help =
        "shift (default: the adapter's specd_shift, else 1; 1: slot q read from the row at q-1, "
        "the shifted R-ISD adapter as a STAND-IN; 0: a mask's own row, for a WeDLM adapter such "
        "as smollm2-135m-wedlm), "
        "mode=lossless|stream|block (stream: the paper's unverified commit, lossy; block: "
        "block-wise baseline, a block of w emitted whole once filled, lossy; a plain step of "
        "the adaptive guard restarts the block: measure it with the guard off), w=6 (window), "
        "select=entropy|threshold|hierarchical|credit (entropy: eq. 11), tau (entropy 0.3; "
        "threshold/credit 0.8; hierarchical 0.92), tau_low=0.62, lambda=0.1 (eq. 11), mask=ID, "
        "early_eos=0 (mode=block: once an EOS and every slot before it are decided, the block "
        "commits without denoising the rest; eos=ID, default the model's EOS), adapter=DIR (PEFT "
        "LoRA on mask rows), smooth=0 (IterSmooth alpha cap, e.g. 0.3; 0 = off)",
    .create = wedlm_create,
    .destroy = wedlm_destroy,
    .layout = wedlm_layout,
    .verify = wedlm_verify,
    .rollback = wedlm_rollback,
    /* mode=block's steps before a block is whole emit nothing (lossless and stream always emit) */
    .flags = SPECD_POLICY_MAY_EMIT_NONE | SPECD_POLICY_FIGURE_P_CACHE,
};
