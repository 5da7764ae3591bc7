/* simsd: SimSD cross-model speculative decoding for a block-diffusion target (paper 004 §3;
 * docs/papers.md). LOSSY against plain autoregressive decoding, like every block-diffusion mode:
 * the target is the block model (SmolLM2 + the sdar adapter: policy/dlm/sdar.c's model) and SimSD is
 * exact only for that target's temporal-mask distribution along the drafter's order (§3.2).
 *
 * One block of B slots at a time, slot i at logical position first + i (unshifted: a block row
 * predicts its own slot):
 *  1. While at least gamma (default B) slots of the block are masked, the drafter
 *     (policy/dlm/simsd_drafter.h: the target cut after drafter_layers blocks plus its own LoRA, or
 *     with drafter=self the block model itself) decodes gamma of them one per step in its own
 *     order o_1..o_gamma (most confident first), keeping q^(r) for each.
 *  2. The target verifies them in one forward (policy/dlm/simsd_layout.h):
 *       row 0                pending token                 base, causal
 *       data rows            decided slots and the drafts   LoRA on, eq. (1) visibility
 *       mask rows            the drafted slots' twins D~ and the still-masked slots, at their
 *                            slots' positions (the RoPE copy; after the block with rope_copy=0,
 *                            the paper's Table 4 ablation)
 *     D~_{o_r} sees the prefix, the slots decided before, the drafts of steps before r and masks
 *     for the rest: the block as it stood at draft step r. Its logits are p^(r).
 *  3. The drafts are accepted along the draft order with min(1, p/q) (eq. 2; under the
 *     sequence's rule: greedy / coupled / rejection) through the acceptance engine's keyed chain
 *     (key row D~_{o_r}, key position first + o_r, no bonus row: §3.2 has none). At the first
 *     rejection the slot takes the engine's correction (the residual max(0, p - q) under
 *     rejection sampling, which preserves p^(r); the paper only says "the target samples").
 *  4. The block goes on from its new state: drafted again while gamma slots remain masked, else
 *     finished by the target itself, one slot per forward (its most confident masked slot, its
 *     keyed sample there): rows pending + the B block rows, bidirectional (policy/dlm/sdar_layout.h),
 *     the vanilla decoding the paper compares against. With gamma = B (the paper's main setting)
 *     a rejection always hands the rest of the block to the target.
 *  5. A finished block is committed unverified (outcome.lossy) through base causal rows, as sdar
 *     refreshes its blocks, so the committed KV is plain decoding's over the decided tokens; that
 *     step also carries the next block's first rows (its drafts' verification, or its first
 *     denoise rows).
 * gamma=0 turns drafting off: the target decoding alone (one slot per forward), the baseline of
 * the paper's speedups. Blocks are emitted whole; steps before a block is finished emit nothing
 * (SPECD_POLICY_MAY_EMIT_NONE), and a step of the adaptive guard restarts the block: run it with
 * the guard off.
 *
 * The drafter runs inside layout (B forwards of B rows of its own model), the target's forward
 * is the host's step: rho = drafter step / target forward is what bench/simsd reports. */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_input.h"
#include "policy/dlm/dlm_rules.h"
#include "policy/mask_rows.h"
#include "policy/options.h"
#include "policy/seq_verifier.h"
#include "policy/dlm/sdar_layout.h"
#include "policy/dlm/simsd_drafter.h"
#include "policy/dlm/simsd_layout.h"
#include "specd/runtime.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SPECD_SIMSD_MAX_B <= SPECD_SDAR_MAX_B, "simsd's block wider than sdar's layout");

enum { MAX_ROWS = 3 * SPECD_SIMSD_MAX_B + 1 };

typedef struct simsd_state {
    int32_t b, gamma, rope_copy, mask_id, n_vocab;
    specd_sample_key key;
    specd_dlm_input in; /* the target adapter; its mask vector in MAX_ROWS input rows */
    specd_accept *accept;
    specd_sampler *target;
    struct simsd_shared *own_shared; /* made here when no spec shares one (else env.shared) */
    specd_simsd_drafter *drafter;
    specd_simsd_draft draft;
    int32_t *decided; /* history + the finished block: what the drafter conditions on */
    int64_t decided_cap;

    int64_t first;                    /* logical position of slot 0 */
    int32_t token[SPECD_SIMSD_MAX_B]; /* decided slot, -1 = mask */
    int64_t expect_n;                 /* the block is good for this history length only */

    /* the step in flight */
    int64_t n_at;
    int32_t n_head; /* finished block's tokens this step commits (0 or b) */
    int drafting;   /* the tail is a verification of drafts (else the target's denoise rows) */
    int32_t key_of_step[SPECD_SIMSD_MAX_B]; /* draft step r's D~ among the scored rows */
    int32_t n_tokens, n_rows;
    int32_t tokens[MAX_ROWS], pos[MAX_ROWS], rows[MAX_ROWS];
    int32_t emitted[MAX_ROWS], keep[MAX_ROWS];
    float gate[MAX_ROWS], accept_prob[SPECD_SIMSD_MAX_B];
    uint8_t *vis;
    size_t vis_cap;
} simsd_state;

/* The options, parsed once for shared_create and once per sequence. */
typedef struct simsd_opts {
    int32_t b, gamma, rope, layers, mask, threads;
    int32_t self_drafter; /* drafter=: 0 layers, 1 self */
    char adapter[4096], dadapter[4096];
} simsd_opts;

#define SIMSD_FIELD(f) .offset = offsetof(simsd_opts, f)
static const specd_policy_option option_rows[] = {
    {.key = "adapter", .kind = SPECD_OPTION_PATH, SIMSD_FIELD(adapter),
     .size = sizeof((simsd_opts *)0)->adapter, .artifact = "adapters/smollm2-135m-sdar",
     .artifact_env = "SPECD_SDAR_ADAPTER", .flags = SPECD_OPTION_ARTIFACT_NEEDED,
     .help = "the target's sdar adapter"},
    {.key = "block", .kind = SPECD_OPTION_INT, SIMSD_FIELD(b),
     .dflt = "the adapter's specd_block, else 4", .min = 1, .max = SPECD_SIMSD_MAX_B,
     .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "B; a step runs up to 3B + 1 rows (raise --draft-max to at least 3B/2)"},
    {.key = "gamma", .kind = SPECD_OPTION_INT, SIMSD_FIELD(gamma), .dflt = "B", .min = 0,
     .max = SPECD_SIMSD_MAX_B, .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "drafts per verification while that many slots are masked (at most B); 0: the "
             "target alone"},
    {.key = "drafter", .kind = SPECD_OPTION_ENUM, SIMSD_FIELD(self_drafter), .dflt = "layers",
     .choices = "layers|self",
     .help = "layers: the target's first drafter_layers blocks; self: the block model itself"},
    {.key = "drafter_layers", .kind = SPECD_OPTION_INT, SIMSD_FIELD(layers), .dflt = "8",
     .min = 1, .max = 1024, .help = "depth of the cut drafter"},
    {.key = "drafter_adapter", .kind = SPECD_OPTION_PATH, SIMSD_FIELD(dadapter),
     .size = sizeof((simsd_opts *)0)->dadapter,
     .artifact = "adapters/smollm2-135m-simsd-drafter",
     .artifact_env = "SPECD_SIMSD_DRAFTER_ADAPTER",
     .help = "the cut drafter's LoRA (none, or drafter=self: the target's adapter)"},
    {.key = "rope_copy", .kind = SPECD_OPTION_BOOL, SIMSD_FIELD(rope), .dflt = "1",
     .help = "0: the paper's ablation without the RoPE copy"},
    {.key = "threads", .kind = SPECD_OPTION_INT, SIMSD_FIELD(threads), .dflt = "0", .min = 0,
     .max = 1024, .help = "the drafter's workers (0: every online core); set it to the target's -t"},
    {.key = "mask", .kind = SPECD_OPTION_INT, SIMSD_FIELD(mask),
     .dflt = "the GGUF's mask token, else 0", .min = 0, .max = INT32_MAX,
     .flags = SPECD_OPTION_DEFAULT_DERIVED, .help = "mask token id"},
};
const specd_option_table specd_simsd_options = SPECD_OPTION_TABLE(option_rows);

static specd_status parse_opts(const specd_policy_env *env, const char *options, simsd_opts *o,
                               specd_error *err) {
    *o = (simsd_opts){.gamma = -1, .mask = -1};
    SPECD_TRY(specd_options_parse_table("simsd", &specd_simsd_options, NULL, options, o, err));
    if (o->adapter[0] && o->b == 0) {
        specd_lora_info info;
        if (specd_lora_read_info(o->adapter, &info, NULL) == SPECD_OK &&
            !strcmp(info.objective, "sdar") && info.block <= SPECD_SIMSD_MAX_B)
            o->b = info.block;
    }
    if (o->b == 0) o->b = 4;
    if (o->gamma < 0) o->gamma = o->b;
    if (o->gamma > o->b)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy simsd: gamma=%d drafts more slots than the block has (block=%d)",
                          o->gamma, o->b);
    const int32_t most = env->max_step_rows > 0 ? env->max_step_rows : 2 * env->max_draft + 1;
    if (3 * o->b + 1 > most)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy simsd: block=%d needs %d rows per step (pending, the finished "
                          "block, the next block's drafts and masks), more than the step's %d "
                          "(raise --draft-max)",
                          o->b, 3 * o->b + 1, most);
    return SPECD_OK;
}

/* What every sequence of a spec shares: the drafter's weights (the target's, or its GGUF when
 * the host runs the target) and the drafter's adapter. */
typedef struct simsd_shared {
    specd_model *own_model;
    const specd_model *model;
    specd_lora *lora;
} simsd_shared;

static void simsd_shared_destroy(void *shared) {
    simsd_shared *sh = shared;
    if (!sh) return;
    specd_lora_destroy(sh->lora);
    specd_model_destroy(sh->own_model);
    specd_free(sh);
}

static specd_status make_shared(const specd_policy_env *env, const simsd_opts *o,
                                simsd_shared **out, specd_error *err) {
    *out = NULL;
    simsd_shared *sh = specd_alloc_array(1, sizeof *sh);
    if (!sh) return specd_fail(err, SPECD_E_NOMEM, "policy simsd: out of memory");
    specd_status st = SPECD_OK;
    sh->model = env->target;
    if (o->gamma > 0 && !sh->model) {
        if (!env->target_path)
            st = specd_fail(err, SPECD_E_INVALID_ARG,
                            "policy simsd: the drafter runs the target's weights: run the target "
                            "in specd or give its GGUF path");
        else if ((st = specd_model_create(env->target_path, &sh->own_model, err)) == SPECD_OK)
            sh->model = sh->own_model;
    }
    /* drafter=self is the block model itself: the target's adapter, whatever drafter_adapter
     * (defaulted to a cut drafter's) says */
    const char *dir = o->dadapter[0] && !o->self_drafter ? o->dadapter : o->adapter;
    if (st == SPECD_OK && o->gamma > 0 && dir[0]) {
        st = specd_lora_create(sh->model, dir, &sh->lora, err);
        if (st != SPECD_OK) st = specd_mask_adapter_fail(err, st, "simsd", dir);
    }
    if (st != SPECD_OK) {
        simsd_shared_destroy(sh);
        return st;
    }
    *out = sh;
    return SPECD_OK;
}

static specd_status simsd_shared_create(const specd_policy_env *env, const char *options,
                                        void **shared, specd_error *err) {
    simsd_opts o;
    SPECD_TRY(parse_opts(env, options, &o, err));
    return make_shared(env, &o, (simsd_shared **)shared, err);
}

static void simsd_destroy(void *state) {
    simsd_state *s = state;
    if (!s) return;
    specd_simsd_drafter_destroy(s->drafter);
    simsd_shared_destroy(s->own_shared);
    specd_dlm_input_free(&s->in);
    specd_free(s->decided);
    specd_free(s->vis);
    specd_accept_destroy(s->accept);
    specd_sampler_destroy(s->target);
    specd_free(s);
}

/* The drafter on the shared weights and adapter: the target cut after drafter_layers blocks,
 * or with drafter=self the whole block model. */
static specd_status make_drafter(simsd_state *s, const specd_policy_env *env, const simsd_opts *o,
                                 specd_error *err) {
    const simsd_shared *sh = env->shared ? env->shared : s->own_shared;
    const int32_t n_embd = specd_model_get_info(sh->model)->n_embd;
    /* a host-run target's adapter is applied by the host; its mask vector must fit the model */
    if (s->in.mask_vec && s->in.n_embd != n_embd)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "policy simsd: the adapter's mask vector has %d floats, the model has "
                          "n_embd %d",
                          s->in.n_embd, n_embd);
    const int self = o->self_drafter == 1;
    return specd_simsd_drafter_create(env, sh->model, self ? 0 : o->layers, sh->lora, s->b,
                                      s->mask_id, o->threads, &s->drafter, err);
}

static specd_status simsd_create(const specd_policy_env *env, const char *options, void **state,
                                 specd_error *err) {
    simsd_opts o;
    SPECD_TRY(parse_opts(env, options, &o, err));
    const int32_t b = o.b, gamma = o.gamma;
    int32_t mask_id;
    SPECD_TRY(specd_mask_pick_id(env, "simsd", o.mask, &mask_id, err));

    simsd_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy simsd: out of memory");
    s->b = b;
    s->gamma = gamma;
    s->rope_copy = o.rope;
    s->mask_id = mask_id;
    s->n_vocab = env->n_vocab;
    s->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};
    s->expect_n = -1;
    specd_status st;
    if ((st = specd_seq_verifier_create(env, b, &s->accept, &s->target, err)) != SPECD_OK ||
        (o.adapter[0] &&
         ((st = specd_dlm_input_load(&s->in, "simsd", env, o.adapter, err)) != SPECD_OK ||
          (st = specd_dlm_input_rows(&s->in, "simsd", MAX_ROWS, err)) != SPECD_OK)) ||
        (!env->shared && (st = make_shared(env, &o, &s->own_shared, err)) != SPECD_OK) ||
        (gamma > 0 && (st = make_drafter(s, env, &o, err)) != SPECD_OK)) {
        simsd_destroy(s);
        return st;
    }
    *state = s;
    return SPECD_OK;
}

static void block_reset(simsd_state *s, int64_t first) {
    s->first = first;
    for (int32_t i = 0; i < s->b; i++)
        s->token[i] = -1;
}

static int block_full(const simsd_state *s) {
    for (int32_t i = 0; i < s->b; i++)
        if (s->token[i] < 0) return 0;
    return 1;
}

/* The drafter's context: the history and, on a commit step, the finished block. */
static specd_status draft_next(simsd_state *s, const int32_t *history, int64_t n,
                               const int32_t *tail, specd_error *err) {
    const int64_t m = n + s->n_head;
    if (m > s->decided_cap) {
        const int64_t cap = 2 * m + 64;
        int32_t *d = specd_alloc_array((size_t)cap, sizeof(int32_t));
        if (!d) return specd_fail(err, SPECD_E_NOMEM, "policy simsd: out of memory");
        specd_free(s->decided);
        s->decided = d;
        s->decided_cap = cap;
    }
    memcpy(s->decided, history, (size_t)n * sizeof(int32_t));
    memcpy(s->decided + n, s->token, (size_t)s->n_head * sizeof(int32_t));
    return specd_simsd_drafter_draft(s->drafter, s->decided, m, tail, s->gamma, &s->draft, err);
}

static void set_row(simsd_state *s, int32_t row, int32_t token, int32_t pos, float gate) {
    s->tokens[row] = token < 0 ? s->mask_id : token;
    s->pos[row] = pos;
    s->gate[row] = gate;
    if (!s->in.embd) return;
    s->in.embd_rows[row] = token < 0;
    if (token < 0)
        memcpy(s->in.embd + (size_t)row * (size_t)s->in.n_embd, s->in.mask_vec,
               (size_t)s->in.n_embd * sizeof(float));
}

static specd_status simsd_layout(void *state, const int32_t *history, int64_t n_history,
                                 specd_step_layout *out, specd_error *err) {
    simsd_state *s = state;
    const int32_t b = s->b;
    if (n_history < 1 || n_history + 3 * b + 1 > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy simsd: history length %lld",
                          (long long)n_history);
    if (n_history != s->expect_n) block_reset(s, n_history);
    s->n_head = block_full(s) ? b : 0;
    s->n_at = n_history;
    /* the tail block: a fresh one after a commit, else the one being decided */
    int32_t tail[SPECD_SIMSD_MAX_B], n_masked = 0;
    for (int32_t i = 0; i < b; i++) {
        tail[i] = s->n_head ? -1 : s->token[i];
        n_masked += tail[i] < 0;
    }
    /* §3.2: draft while at least gamma slots remain, else the target finishes the block */
    s->drafting = s->gamma > 0 && n_masked >= s->gamma &&
                  n_history + s->n_head <= specd_simsd_drafter_capacity(s->drafter);
    /* (past the drafter's context the target goes on alone) */
    if (s->drafting) SPECD_TRY(draft_next(s, history, n_history, tail, err));
    const int32_t head = 1 + s->n_head, n_cached = (int32_t)(n_history - 1);
    const int32_t tfirst = (int32_t)(n_history + s->n_head);
    set_row(s, 0, history[n_history - 1], n_cached, 0.0f);
    for (int32_t i = 0; i < s->n_head; i++)
        set_row(s, 1 + i, s->token[i], (int32_t)n_history + i, 0.0f);
    specd_simsd_row br[SPECD_SIMSD_MAX_ROWS];
    int32_t n_tail = b;
    s->n_rows = 0;
    if (s->drafting) {
        n_tail = specd_simsd_rows(b, tfirst, tail, s->draft.tau, s->draft.token, s->rope_copy, br);
        for (int32_t k = 0; k < n_tail; k++) {
            set_row(s, head + k, br[k].token, br[k].pos, 1.0f);
            const int32_t tau = s->draft.tau[br[k].slot];
            if (br[k].token < 0 && tau > 0) { /* only the drafted slots' D~ rows are read */
                s->key_of_step[tau - 1] = s->n_rows;
                s->rows[s->n_rows++] = head + k;
            }
        }
    } else {
        for (int32_t i = 0; i < b; i++) {
            set_row(s, head + i, tail[i], tfirst + i, 1.0f);
            s->rows[s->n_rows++] = head + i;
        }
    }
    const int32_t n_tok = head + n_tail;
    s->n_tokens = n_tok;
    const size_t need = (size_t)n_tok * ((size_t)n_cached + (size_t)n_tok);
    if (need > s->vis_cap) {
        specd_free(s->vis);
        s->vis_cap = 0;
        if (!(s->vis = specd_alloc(2 * need)))
            return specd_fail(err, SPECD_E_NOMEM, "policy simsd: out of memory for the mask");
        s->vis_cap = 2 * need;
    }
    if (s->drafting)
        specd_simsd_visible(s->vis, n_cached, head, br, n_tail);
    else
        specd_sdar_visible(s->vis, n_cached, head, b);
    *out = (specd_step_layout){.n_tokens = n_tok,
                               .tokens = s->tokens,
                               .pos = s->pos,
                               .visible = s->vis,
                               .lora_gate = s->in.adapter ? s->gate : NULL,
                               .lora = s->in.lora,
                               .n_rows = s->n_rows,
                               .rows = s->rows,
                               .lora_path = s->in.adapter,
                               .input_embd = s->in.embd,
                               .input_embd_rows = s->in.embd ? s->in.embd_rows : NULL};
    return SPECD_OK;
}

/* Eq. (2) along the draft order; the slots it decides: the accepted drafts and the correction. */
static specd_status verify_drafts(simsd_state *s, const float *logits, int32_t *n_accepted,
                                  specd_error *err) {
    const int32_t g = s->draft.gamma;
    int32_t draft[SPECD_SIMSD_MAX_B];
    uint32_t positions[SPECD_SIMSD_MAX_B];
    for (int32_t r = 0; r < g; r++) {
        const int32_t slot = s->draft.order[r];
        draft[r] = s->draft.token[slot];
        positions[r] = (uint32_t)(s->first + slot);
    }
    specd_sample_key key = s->key;
    key.position = (uint32_t)s->first;
    specd_chain_input in = {.k = g,
                            .draft = draft,
                            .draft_probs = s->draft.q,
                            .q_vocab = s->n_vocab,
                            .target_logits = logits,
                            .n_vocab = s->n_vocab,
                            .key = key};
    specd_chain_keys keys = {.n_rows = s->n_rows,
                             .key_row = s->key_of_step,
                             .bonus_row = SPECD_CHAIN_NO_BONUS,
                             .positions = positions};
    int32_t tokens[SPECD_SIMSD_MAX_B + 1];
    specd_chain_result res = {.tokens = tokens, .accept_prob = s->accept_prob};
    SPECD_TRY(specd_accept_chain_keyed(s->accept, &in, &keys, &res, err));
    for (int32_t r = 0; r < res.n_emitted; r++)
        s->token[s->draft.order[r]] = tokens[r];
    *n_accepted = res.n_accepted;
    return SPECD_OK;
}

/* The target's own step: its most confident masked slot takes its keyed sample there. */
static specd_status reveal_one(simsd_state *s, const float *logits, specd_error *err) {
    const size_t V = (size_t)s->n_vocab;
    specd_dlm_pos pos[SPECD_SIMSD_MAX_B];
    uint8_t elig[SPECD_SIMSD_MAX_B];
    SPECD_TRY(specd_dlm_masked_confidences("simsd", s->first, logits, s->n_vocab, s->token, s->b,
                                           pos, elig, err));
    const int32_t best = specd_dlm_static_pick(pos, elig, s->b);
    if (best < 0)
        return specd_fail(err, SPECD_E_NUMERIC,
                          "policy simsd: every masked slot's logits are non-finite");
    specd_sample_key key = s->key;
    key.position = (uint32_t)(s->first + best);
    return specd_sampler_sample(s->target, logits + (size_t)best * V, s->n_vocab, key,
                                &s->token[best], err);
}

static specd_status simsd_verify(void *state, const float *logits, specd_step_outcome *out,
                                 specd_error *err) {
    simsd_state *s = state;
    s->expect_n = -1; /* a failure below leaves the block half updated: start over */
    int32_t n_emit = 0;
    if (s->n_head) {
        memcpy(s->emitted, s->token, (size_t)s->b * sizeof(int32_t));
        n_emit = s->b;
        for (int32_t i = 0; i < n_emit; i++)
            s->keep[i] = i; /* pending + the block but its last token (the next pending) */
        block_reset(s, s->n_at + s->b);
    }
    int32_t n_acc = 0;
    if (s->drafting)
        SPECD_TRY(verify_drafts(s, logits, &n_acc, err));
    else
        SPECD_TRY(reveal_one(s, logits, err));
    s->expect_n = s->n_at + n_emit;
    *out = (specd_step_outcome){.n_emitted = n_emit,
                                .emitted = s->emitted,
                                .n_keep = n_emit,
                                .keep = s->keep,
                                .n_drafted = s->drafting ? s->draft.gamma : 0,
                                .n_accepted = n_acc,
                                .lossy = n_emit > 0};
    return SPECD_OK;
}

static void simsd_rollback(void *state, int64_t n_history) {
    simsd_state *s = state;
    if (n_history != s->expect_n) s->expect_n = -1;
}

const specd_policy_ops specd_policy_simsd = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "simsd",
    .options_help =
        "SimSD (LOSSY: the target is the block-diffusion model): adapter=DIR (the target's sdar "
        "adapter), block (B, default the adapter's specd_block, else 4; a step runs up to 3B+1 "
        "rows), gamma (drafts per verification while that many slots are masked, 0..B, default B; "
        "0: the target decoding alone, one slot per forward), "
        "drafter=layers|self, drafter_layers=8, drafter_adapter=DIR (default the target's), "
        "rope_copy=1|0 (0: the Table 4 ablation), threads (the drafter's workers, default 0 = "
        "every online core: set it to the target's -t), mask=ID; run with the guard off",
    .create = simsd_create,
    .destroy = simsd_destroy,
    .layout = simsd_layout,
    .verify = simsd_verify,
    .rollback = simsd_rollback,
    .flags = SPECD_POLICY_MAY_EMIT_NONE,
    .shared_create = simsd_shared_create,
    .shared_destroy = simsd_shared_destroy,
};
