/* sdar: block-bidirectional diffusion decoding (SDAR-style) whose committed KV is the base
 * model's, with dInfer's commit rules (paper 001, App. B) and its vicinity KV refresh (§2.3) made
 * exact.
 *
 * DESIGN. The model is SmolLM2 plus a LoRA adapter (tools/train/train_sdar.py) gated on the block
 * rows only. Decoding goes block by block: the B = block= positions after the pending token are
 * decided by iterative denoising inside the block, then the finished block is committed.
 *
 * Denoise step, history length n (pending token history[n-1] at position n-1, block slot i at
 * logical position n + i, a mask or a filled draft):
 *   row 0        pending          pos n-1      base weights, causal (sees the cache and itself)
 *   rows 1..B    block slot i     pos n+i      adapter ON for every block row (masks take the
 *                                              adapter's mask vector, fills their token), each
 *                                              sees the cache, the pending row and EVERY block
 *                                              row (bidirectional within the block)
 * (layout.visible; policy/dlm/sdar_layout.h). Unshifted: block row i predicts slot i. The pending
 * row is plain decoding's row for position n, so slot 0, while masked, takes the pending row's
 * token drawn exactly as plain decoding draws it (the sampler, keyed on position n): every step
 * fills at least one slot (slot 0 on the block's first step, else the commit rule's guarantee).
 * The other masks are filled by the commit rule on their own rows: threshold (default), dInfer's
 * hierarchical or credit rule (policy/dlm/dlm_commit.h, dlm_credit.h) or WeDLM's eq. 11 on entropy
 * (policy/dlm/wedlm_select.h). The step emits nothing and keeps no KV (SPECD_POLICY_MAY_EMIT_NONE):
 * the bidirectional rows' KV saw the block's future and went through the adapter, so it is never
 * committed.
 *
 * Refresh step (the block is full): dInfer §2.3 recomputes the KV of the block's "vicinity" and
 * refreshes the whole cache when a block completes, because its cache is approximate. Here the
 * refresh of the finished block IS its commit pass:
 *   row 0        pending          pos n-1      base, causal
 *   rows 1..B    the block's B tokens at n..n+B-1, base, causal   (plain decoding's rows / a
 *                                              chain verify of the block)
 *   rows B+1..2B the NEXT block's masks at n+B..n+2B-1, adapter, bidirectional among themselves,
 *                seeing the cache and rows 0..B (so the next block starts with fills)
 * and the KV of rows 0..B-1 is kept (the block's last token is the next pending token). Every
 * committed KV row is thus computed by base weights under causal attention over an exact base
 * prefix: refreshing the vicinity (the block) is exactly a full recompute of the history, bit for
 * bit on specd's batch-invariant runtime (tests/policy/dlm/test_sdar_model.c checks it against a
 * from-scratch prefill, and that the block step's bidirectional KV would NOT be). A refresh=full
 * option is not offered: the policy ABI cannot make the host drop cached rows, so the full
 * recompute reference lives in that test.
 *   mode=lossless (default): the block is chain-verified on rows 0..B-1 through the acceptance
 *     engine (keyed chain, no bonus row: row B predicts the next block's slot 0 instead), so the
 *     output is token-identical to plain decoding under greedy and coupled sampling. A rejection
 *     at slot j emits the j accepted tokens and the correction; the next block's masks saw the
 *     rejected token, so it starts from masks.
 *   mode=block (SDAR's own decoding, LOSSY): the block is committed unverified (outcome.lossy).
 * Either way the next block's slot 0 is drawn from row B (base, causal: plain decoding's row for
 * position n+B), its other slots by the commit rule on the mask rows.
 * If a denoise step fills nothing (every mask row non-finite), the refresh commits the leftmost
 * filled run instead of the block, so decoding always moves on.
 *
 * STATIC DECODING (select=static): the backbone's static regime of paper 002 (its MRP drafts for
 * it), a well-defined reference: exactly ONE reveal per target forward. Slot 0 is always a block's
 * first reveal and is plain decoding's token from the base causal row that predicts it (as above:
 * the pending row on a block's first denoise step, row B of a refresh); that forward reveals
 * nothing else (its mask rows saw slot 0 masked). Every later denoise step reveals the most
 * confident masked slot of its block rows (top-1 probability at temperature 1, ties leftmost,
 * specd_dlm_static_pick), its token drawn by the target's sampler keyed on that slot's logical
 * position, as slot 0's is (greedy: argmax; target_pick). So a block of B costs B forwards (its
 * refresh included): TPF 1. With pack=aligned (the default) a denoise step puts 0..7 filler rows
 * between the pending row and the block, so that the block starts at a cache column that is a
 * multiple of 8 (why: below). The other rules keep their behaviour (slot 0 plus the rule's
 * fills, no fillers).
 *
 * MRP SPEC MODE (spec=K, with select=static and mode=block; paper 002 §3.4 Alg. 3, the released
 * code's packed walk): output token-identical to static decoding with the same keys, in fewer
 * forwards. A spec step, block state x with slot 0 filled and m >= 2 masks, K' = min(K, m - 1):
 *   row 0                     pending         base, causal (as a denoise step)
 *   rows 1 + L + cS .. + B    copy C(c), c = 0..K': the block with drafts 1..c revealed, slot i
 *                             at position n + i in EVERY copy; adapter on; each copy's rows see
 *                             the cache, the pending row and every row of their own copy
 *                             (bidirectional), never another copy (specd_sdar_visible_copies)
 *   fillers                   the lead (L = 0..7 rows: copy 0 at an 8-aligned column) and S - B
 *                             rows between copies: each sees only itself; not scored
 * so copy c's rows are the rows of a static step over state C(c), and with pack=aligned (the
 * default: lead, S = 32) bit for bit: the CPU attention keeps llama.cpp's positional groupings
 * (the softmax sums 8-column chunks in float, the V sum 4 x 8 lanes by column mod 32), so a copy
 * reproduces a lone static step's sums only when neither mixes the block with the head in one
 * chunk (the lead) and its keys sit at the same columns mod 32 (S), masked columns adding exact
 * zeros (policy/dlm/sdar_layout.h). Q8 activation quantisation amplifies any last-bit difference: a
 * densely packed copy (pack=dense: no lead, S = B) gave other logits (max |diff| ~1) and other
 * tokens than static decoding at block=6 in tests/policy/test_sdar_mrp.c. Fillers cost compute
 * (up to 8 + 32 K' + B rows, K' <= B - 2), not forwards; the scored rows are the pending row and
 * the copies, B each.
 * Drafts (slot, token): draft k + 1 is the static pick on C(k) by the residual drafter's logits z_k
 * = z_{k-1} + C_k, z_0 the seed (the block rows of the last state run); the block residual head is
 * UNTRAINED, C = 0 (residual_step), so draft k + 1 is the next most confident unrevealed slot of
 * the seed, its token keyed as static's. Walk: while the target's static pick on C(k) is draft k +
 * 1 (slot and token) accept it; the first pick that is not, or the pick on C(K'), is the bonus
 * reveal. The step commits the j accepted drafts and the bonus to the block (emits nothing, keeps
 * no KV: a denoise step) and reports n_drafted = K', n_accepted = j; copy C(j)'s rows seed the next
 * drafts. Each reveal is the target's own pick on the exact state static decoding runs next, so
 * the tokens are static decoding's (tests/policy/dlm/test_sdar_mrp.c checks the tokens, and each
 * copy's logits against the lone step's bit for bit). A finished block is committed by the refresh
 * step above (2B + 1 rows, unchanged; its mask rows seed the next block's first drafts, and it
 * reports no drafts: block mode does not verify). Steps with no seed (a block's first step after a
 * reset) or one mask left are plain static steps. A larger K than B - 2 changes nothing.
 *
 * Why this design over SDAR's own (the block's KV taken from the block-diffusion rows): SDAR keeps
 * the KV the model computed for the block under block attention; with a 135M model and a small
 * LoRA that KV is not the base model's, so the prompt (prefilled by specd's session with base
 * weights) and the output would not share one KV semantics, lossless mode would be impossible and
 * the cache would drift from the adapter's training distribution (its memory pass is base causal).
 * Recomputing only the block on base weights costs B rows per block, which ride in the step that
 * starts the next block anyway.
 *
 * Every buffer but the visibility matrix (it grows with the history) is sized at create. */
#include "policy/builtin.h"

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_credit.h"
#include "policy/dlm/dlm_input.h"
#include "policy/dlm/dlm_rules.h"
#include "policy/dlm/sdar_layout.h"
#include "policy/dlm/wedlm_select.h"
#include "policy/mask_rows.h"
#include "policy/options.h"
#include "policy/seq_verifier.h"
#include "specd/runtime.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SPECD_DLM_CREDIT_SLOTS >= 2 * SPECD_SDAR_MAX_B, "credit slots below two blocks");
_Static_assert(SPECD_SDAR_MAX_B <= SPECD_WEDLM_MAX_W, "block wider than eq. 11's window");

/* the widest step: a refresh (2B + 1 rows) or a spec step (aligned: 1 + 7 + 32 K' + B rows,
 * K' <= B - 2) */
enum {
    MAX_ROWS =
        SPECD_SDAR_CHUNK_ALIGN + SPECD_SDAR_COPY_ALIGN * (SPECD_SDAR_MAX_B - 2) + SPECD_SDAR_MAX_B
};
_Static_assert(SPECD_SDAR_MAX_B <= SPECD_SDAR_COPY_ALIGN, "a copy wider than the copy spacing");

typedef struct sdar_state {
    int lossless;
    int rejection;    /* the sequence's rule is REJECTION (see target_pick) */
    int statik;       /* select=static: one reveal per forward (STATIC DECODING above) */
    int32_t spec_k;   /* spec=K: drafts per verify (MRP SPEC MODE above); 0: off */
    int32_t max_rows; /* the most rows one of its steps runs */
    int32_t stride;   /* step rows between packed copies' starts (pack=) */
    int aligned;      /* select=static, pack=aligned: blocks at 8-aligned columns (lead) */
    specd_dlm_rule rule;
    int32_t b, mask_id, n_vocab;
    specd_sample_key key;
    specd_dlm_input in; /* the adapter; its mask vector in max_rows input rows */
    specd_accept *accept;
    specd_sampler *target;
    specd_dlm_credit credit;
    int64_t first;                   /* logical position of slot 0 (the history length n) */
    int32_t token[SPECD_SDAR_MAX_B]; /* filled draft, -1 = mask */
    int64_t expect_n;                /* the block is good for this history length only */
    int stalled;  /* the last denoise step filled nothing: refresh the filled run */
    float *seed;  /* spec: b x n_vocab, the block rows' logits of the last block state run */
    int has_seed; /* seed holds this block's logits (of a state the block has grown from) */

    /* the step in flight */
    int64_t n_at;
    int32_t n_head; /* refresh step: the block tokens it commits (0: a denoise step) */
    int32_t n_tokens;
    int32_t n_copies; /* block copies laid out: 1, or 1 + n_draft on a spec step */
    int32_t lead;     /* filler rows between the head and the first copy */
    int32_t n_draft;  /* spec step: draft k + 1 is (d_slot[k], d_tok[k]) */
    int32_t d_slot[SPECD_SDAR_MAX_B], d_tok[SPECD_SDAR_MAX_B];
    int32_t tokens[MAX_ROWS], pos[MAX_ROWS], rows[MAX_ROWS];
    int32_t emitted[MAX_ROWS], keep[MAX_ROWS];
    float gate[MAX_ROWS], accept_prob[MAX_ROWS];
    uint8_t *vis;
    size_t vis_cap;
} sdar_state;

static void sdar_destroy(void *state) {
    sdar_state *s = state;
    if (!s) return;
    specd_dlm_input_free(&s->in);
    specd_free(s->vis);
    specd_free(s->seed);
    specd_accept_destroy(s->accept);
    specd_sampler_destroy(s->target);
    specd_free(s);
}

typedef struct sdar_opts {
    int32_t block, mask, spec, mode, select, pack;
    char adapter[4096];
    float tau, tau_low, lambda;
} sdar_opts;

enum { SDAR_SELECT_STATIC = 4 }; /* after dlm_rules' choices */
#define SDAR_FIELD(f) .offset = offsetof(sdar_opts, f)
static const specd_policy_option option_rows[] = {
    {.key = "adapter", .kind = SPECD_OPTION_PATH, SDAR_FIELD(adapter),
     .size = sizeof((sdar_opts *)0)->adapter, .artifact = "adapters/smollm2-135m-sdar",
     .artifact_env = "SPECD_SDAR_ADAPTER", .flags = SPECD_OPTION_ARTIFACT_NEEDED,
     .help = "PEFT LoRA on every block row (tools/train/train_sdar.py)"},
    {.key = "block", .kind = SPECD_OPTION_INT, SDAR_FIELD(block),
     .dflt = "the adapter's specd_block, else 4", .min = 1, .max = SPECD_SDAR_MAX_B,
     .flags = SPECD_OPTION_DEFAULT_DERIVED,
     .help = "block size B; a step runs up to 2B + 1 rows"},
    {.key = "mode", .kind = SPECD_OPTION_ENUM, SDAR_FIELD(mode), .dflt = "lossless",
     .choices = "lossless|block",
     .help = "block: the finished block committed unverified (LOSSY)"},
    {.key = "select", .kind = SPECD_OPTION_ENUM, SDAR_FIELD(select), .dflt = "threshold",
     .choices = SPECD_DLM_SELECT_CHOICES "|static",
     .help = "the fill rule; static: one reveal per forward, the most confident mask"},
    SPECD_DLM_RULE_ROWS(sdar_opts),
    {.key = "spec", .kind = SPECD_OPTION_INT, SDAR_FIELD(spec), .dflt = "0", .min = 0,
     .max = SPECD_SDAR_MAX_B - 1,
     .help = "K > 0: MRP's spec mode with select=static,mode=block: K drafts verified in one "
             "forward over K + 1 packed copies of the block, token-identical to static decoding"},
    {.key = "pack", .kind = SPECD_OPTION_ENUM, SDAR_FIELD(pack), .dflt = "aligned",
     .choices = "aligned|dense",
     .help = "spec's copies 32 rows apart (bitwise static); dense: (K + 1)B + 1 rows, not bitwise"},
    {.key = "mask", .kind = SPECD_OPTION_INT, SDAR_FIELD(mask),
     .dflt = "the GGUF's mask token, else 0", .min = 0, .max = INT32_MAX,
     .flags = SPECD_OPTION_DEFAULT_DERIVED, .help = "mask token id"},
};
const specd_option_table specd_sdar_options = SPECD_OPTION_TABLE(option_rows);

static specd_status sdar_create(const specd_policy_env *env, const char *options, void **state,
                                specd_error *err) {
    /* block 0: as the adapter's config says, else 4 */
    sdar_opts o = {.mask = -1, .tau = NAN, .tau_low = NAN, .lambda = NAN};
    SPECD_TRY(specd_options_parse_table("sdar", &specd_sdar_options, NULL, options, &o, err));
    int32_t b = o.block;
    const int32_t mask = o.mask, spec = o.spec;
    const char *adapter = o.adapter;
    if (adapter[0]) {
        specd_lora_info info;
        SPECD_TRY(specd_dlm_adapter_info("sdar", adapter, &info, err));
        /* any gated adapter runs (the tests use R-ISD's); one trained for sdar gives its block */
        if (!strcmp(info.objective, "sdar") && b == 0 && info.block <= SPECD_SDAR_MAX_B)
            b = info.block;
        else if (info.objective[0] && strcmp(info.objective, "sdar"))
            specd_log(SPECD_LOG_WARN,
                      "policy sdar: adapter %s was trained for %s, not for block-bidirectional "
                      "rows: expect poor fills",
                      adapter, info.objective);
    }
    if (b == 0) b = 4;
    const int lossless = o.mode == 0;
    /* static is sdar's own (dlm_rules' set is wedlm's too); its tau etc. are still checked */
    const int statik = o.select == SDAR_SELECT_STATIC;
    specd_dlm_rule rule;
    SPECD_TRY(specd_dlm_rule_parse("sdar", statik ? SPECD_DLM_THRESHOLD : (specd_dlm_rule_kind)o.select,
                                   o.tau, o.tau_low, o.lambda, &rule, err));
    if (spec > 0 && (!statik || lossless))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy sdar: spec=%d verifies drafts against static decoding: it needs "
                          "select=static and mode=block",
                          spec);
    if (spec > 0 && b < 3)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy sdar: spec=%d needs block >= 3 (block=%d leaves no slot to draft "
                          "after slot 0 and the pick)",
                          spec, b);
    const int32_t most = env->max_step_rows > 0 ? env->max_step_rows : 2 * env->max_draft + 1;
    if (2 * b + 1 > most)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy sdar: block=%d needs %d rows per step (pending, the block, the "
                          "next block's masks), more than the step's %d (raise --draft-max)",
                          b, 2 * b + 1, most);
    int aligned = o.pack == 0;
    /* a verify drafts at most the masked slots but one, and slot 0 is never drafted: K' <= B - 2 */
    const int32_t k_eff = spec < b - 2 ? spec : b - 2;
    /* pack only shapes static decoding's steps (the other rules keep theirs) */
    aligned = aligned && statik;
    const int32_t stride =
        aligned ? (b + SPECD_SDAR_COPY_ALIGN - 1) / SPECD_SDAR_COPY_ALIGN * SPECD_SDAR_COPY_ALIGN
                : b;
    const int32_t lead_most = aligned ? SPECD_SDAR_CHUNK_ALIGN - 1 : 0;
    const int32_t step_rows =
        1 + specd_sdar_copies_rows(lead_most, b, spec > 0 ? k_eff + 1 : 1, stride);
    if (step_rows > most)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy sdar: spec=%d with block=%d needs up to %d rows per step (the "
                          "pending row and %d copies of the block, %s), more than the step's %d "
                          "(raise --draft-max to %d, or lower spec)",
                          spec, b, step_rows, spec > 0 ? k_eff + 1 : 1,
                          aligned ? "pack=aligned: at an 8-aligned column, 32 rows apart"
                                  : "pack=dense",
                          most, step_rows / 2);
    const int32_t spec_rows = step_rows;
    int32_t mask_id;
    SPECD_TRY(specd_mask_pick_id(env, "sdar", mask, &mask_id, err));

    sdar_state *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "policy sdar: out of memory");
    s->lossless = lossless;
    s->rejection = env->rule == SPECD_ACCEPT_REJECTION;
    s->statik = statik;
    s->spec_k = k_eff > 0 ? k_eff : 0;
    s->stride = stride;
    s->aligned = aligned;
    s->max_rows = spec_rows > 2 * b + 1 ? spec_rows : 2 * b + 1;
    s->rule = rule;
    s->b = b;
    s->mask_id = mask_id;
    s->n_vocab = env->n_vocab;
    s->key = (specd_sample_key){.seed = env->seed, .sequence = env->seq_key};
    s->expect_n = -1;
    specd_status st;
    if ((st = specd_dlm_credit_init(&s->credit, specd_dlm_credit_default_params(), err)) !=
            SPECD_OK ||
        (st = specd_seq_verifier_create(env, b, &s->accept, &s->target, err)) != SPECD_OK ||
        (s->spec_k > 0 &&
         !(s->seed = specd_alloc_array((size_t)b * (size_t)env->n_vocab, sizeof(float))) &&
         (st = specd_fail(err, SPECD_E_NOMEM, "policy sdar: out of memory")) != SPECD_OK) ||
        (adapter[0] &&
         ((st = specd_dlm_input_load(&s->in, "sdar", env, adapter, err)) != SPECD_OK ||
          (st = specd_dlm_input_rows(&s->in, "sdar", s->max_rows, err)) != SPECD_OK))) {
        sdar_destroy(s);
        return st;
    }
    for (int32_t i = 0; i < MAX_ROWS; i++)
        s->rows[i] = i;
    *state = s;
    return SPECD_OK;
}

static void block_reset(sdar_state *s, int64_t first) {
    s->first = first;
    for (int32_t i = 0; i < s->b; i++)
        s->token[i] = -1;
    s->has_seed = 0;
    specd_dlm_credit_init(&s->credit, s->credit.params, NULL);
}

/* Length of the leftmost filled run of the block. */
static int32_t filled_run(const sdar_state *s) {
    int32_t r = 0;
    while (r < s->b && s->token[r] >= 0)
        r++;
    return r;
}

/* Fills masks of the block (slots at logical first..) from this step's block rows (block row i
 * predicts slot i: unshifted) by the configured rule. A non-finite row only makes its slot
 * ineligible. Returns the number of fills in *n_fill. */
static specd_status select_fills(sdar_state *s, int32_t *token, int64_t first,
                                 const float *block_logits, int32_t *n_fill, specd_error *err) {
    const size_t V = (size_t)s->n_vocab;
    specd_dlm_pos pos[SPECD_SDAR_MAX_B];
    uint8_t elig[SPECD_SDAR_MAX_B];
    int32_t n_elig = 0;
    *n_fill = 0;
    for (int32_t i = 0; i < s->b; i++) {
        elig[i] = 0;
        pos[i] = (specd_dlm_pos){0};
        if (token[i] >= 0) continue;
        const float *z = block_logits + (size_t)i * V;
        specd_status st =
            s->rule.kind == SPECD_DLM_CREDIT
                ? specd_dlm_credit_update(&s->credit, first + i, z, s->n_vocab, &pos[i], err)
                : specd_dlm_pos_from_logits(z, s->n_vocab, &pos[i], err);
        if (st == SPECD_E_NUMERIC) {
            specd_log(SPECD_LOG_WARN, "policy sdar: slot %lld: %s; left masked",
                      (long long)(first + i), err ? err->message : "non-finite logits");
            continue;
        }
        SPECD_TRY(st);
        elig[i] = 1;
        n_elig++;
    }
    if (n_elig == 0) return SPECD_OK;
    /* forced: a block has no other way forward once slot 0 is filled */
    return specd_dlm_rule_fill(&s->rule, pos, elig, s->b, 1, &s->credit, first, token, n_fill, err);
}

/* The target's own token for the slot at logical position `position` from a row that predicts it:
 * the target's sampler keyed on that position (plain decoding's draw there; greedy: argmax). Under
 * REJECTION the chain accepts a one-hot draft x with p(x), and the output follows p only if x does
 * not depend on the verification's own keyed draw, so there the slot takes the row's top-1
 * instead. Slot 0 from a base causal row is plain decoding's token, which greedy and coupled
 * verification accept always. */
static specd_status target_pick(const sdar_state *s, const float *row_logits, int64_t position,
                                int32_t *token, specd_error *err) {
    if (s->rejection) {
        specd_dlm_pos top;
        SPECD_TRY(specd_dlm_pos_from_logits(row_logits, s->n_vocab, &top, err));
        *token = top.token;
        return SPECD_OK;
    }
    specd_sample_key key = s->key;
    key.position = (uint32_t)position;
    return specd_sampler_sample(s->target, row_logits, s->n_vocab, key, token, err);
}

/* Confidence (top-1 probability at temperature 1) of every slot masked in `token`, from rows that
 * predict the block's slots; elig marks the masked slots with finite rows. */
static specd_status confidences(const sdar_state *s, const int32_t *token, const float *rows,
                                specd_dlm_pos *pos, uint8_t *elig, specd_error *err) {
    return specd_dlm_masked_confidences("sdar", s->first, rows, s->n_vocab, token, s->b, pos,
                                        elig, err);
}

/* Static decoding's reveal on a block state `token` from its block rows: the most confident masked
 * slot and the target's token there (target_pick keyed on the slot's position). *slot = -1 when no
 * masked slot has a finite row. */
static specd_status static_reveal(const sdar_state *s, const int32_t *token, const float *rows,
                                  int32_t *slot, int32_t *tok, specd_error *err) {
    specd_dlm_pos pos[SPECD_SDAR_MAX_B];
    uint8_t elig[SPECD_SDAR_MAX_B];
    SPECD_TRY(confidences(s, token, rows, pos, elig, err));
    *slot = specd_dlm_static_pick(pos, elig, s->b);
    if (*slot < 0) return SPECD_OK;
    return target_pick(s, rows + (size_t)*slot * (size_t)s->n_vocab, s->first + *slot, tok, err);
}

/* MRP's residual drafter (paper 002 §3.2, eq. 1): z_k = z_{k-1} + C_k, C_k predicted by the head
 * from the backbone's hidden states and the tokens drafted so far. NO block residual head is
 * trained for sdar, so C_k = 0: the head's documented initialisation (W_e = 0 gives C ~ 0), under
 * which z_k = z_0 (the seed) for every k and draft k + 1 is the next most confident not yet
 * revealed slot of the seed. A trained head adds C_k to z here and the confidences are recomputed
 * before the next pick; nothing else in the walk changes (the verification does not trust z). */
static specd_status residual_step(sdar_state *s, int32_t k, specd_dlm_pos *pos, specd_error *err) {
    (void)s, (void)k, (void)pos, (void)err; /* C_k = 0: z_k = z_{k-1}, the confidences stand */
    return SPECD_OK;
}

/* The spec step's drafts (MRP SPEC MODE above): up to spec_k (slot, token) picks on the seed, in
 * order, each the static pick on the state with the earlier drafts revealed, by the residual
 * drafter's logits z_k. Only with a seed, slot 0 filled and at least two masks (the last copy must
 * keep a mask for the bonus pick); else none and the step is a plain static one. */
static specd_status make_drafts(sdar_state *s, specd_error *err) {
    s->n_draft = 0;
    if (s->spec_k == 0 || !s->has_seed || s->token[0] < 0) return SPECD_OK;
    int32_t n_masked = 0;
    for (int32_t i = 0; i < s->b; i++)
        n_masked += s->token[i] < 0;
    const int32_t most = s->spec_k < n_masked - 1 ? s->spec_k : n_masked - 1;
    specd_dlm_pos pos[SPECD_SDAR_MAX_B];
    uint8_t elig[SPECD_SDAR_MAX_B];
    SPECD_TRY(confidences(s, s->token, s->seed, pos, elig, err));
    for (int32_t k = 0; k < most; k++) {
        if (k > 0) SPECD_TRY(residual_step(s, k, pos, err));
        const int32_t slot = specd_dlm_static_pick(pos, elig, s->b);
        if (slot < 0) break;
        SPECD_TRY(target_pick(s, s->seed + (size_t)slot * (size_t)s->n_vocab, s->first + slot,
                              &s->d_tok[k], err));
        s->d_slot[k] = slot;
        elig[slot] = 0;
        s->n_draft = k + 1;
    }
    return SPECD_OK;
}

/* Slot i of copy c: the block's token, draft d (< c) if it revealed slot i, else a mask (-1). */
static int32_t copy_token(const sdar_state *s, int32_t c, int32_t i) {
    if (s->token[i] >= 0) return s->token[i];
    for (int32_t d = 0; d < c; d++)
        if (s->d_slot[d] == i) return s->d_tok[d];
    return -1;
}

static specd_status sdar_layout(void *state, const int32_t *history, int64_t n_history,
                                specd_step_layout *out, specd_error *err) {
    sdar_state *s = state;
    if (n_history < 1 || n_history + s->max_rows > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG, "policy sdar: history length %lld",
                          (long long)n_history);
    /* fills are drafts for the history they were made after; anything else starts over */
    if (n_history != s->expect_n) {
        block_reset(s, n_history);
        s->stalled = 0;
    }
    const int32_t run = filled_run(s);
    int32_t n_masked = 0;
    for (int32_t i = 0; i < s->b; i++)
        n_masked += s->token[i] < 0;
    /* refresh when the block is full, or when the last denoise step stalled (slot 0 is filled,
     * so run >= 1) */
    s->n_head = n_masked == 0 ? s->b : s->stalled ? run : 0;
    s->n_at = n_history;
    s->n_draft = 0;
    if (s->n_head == 0) SPECD_TRY(make_drafts(s, err));
    s->n_copies = 1 + s->n_draft;
    /* static decoding's block at an 8-aligned cache column (the head ends at n_history), so that
     * a packed copy reproduces its logits (policy/dlm/sdar_layout.h) */
    s->lead = s->aligned && s->n_head == 0 ? specd_sdar_lead(n_history) : 0;
    const int32_t head = 1 + s->n_head,
                  n_tok = head + specd_sdar_copies_rows(s->lead, s->b, s->n_copies, s->stride),
                  n_rows = head + s->n_copies * s->b;
    const int64_t bfirst = n_history + s->n_head; /* the block rows' first logical position */
    const int32_t n_cached = (int32_t)(n_history - 1);
    s->n_tokens = n_tok;
    s->tokens[0] = history[n_history - 1];
    s->pos[0] = n_cached;
    s->gate[0] = 0.0f;
    for (int32_t r = 0; r < n_tok; r++) { /* fillers (pack=aligned): not scored, not read */
        s->tokens[r] = s->mask_id;
        s->pos[r] = n_cached;
        s->gate[r] = 0.0f;
    }
    s->tokens[0] = history[n_history - 1];
    for (int32_t r = 0; r < head; r++)
        s->rows[r] = r;
    for (int32_t i = 0; i < s->n_head; i++) {
        s->tokens[1 + i] = s->token[i];
        s->pos[1 + i] = (int32_t)(n_history + i);
        s->gate[1 + i] = 0.0f;
    }
    for (int32_t c = 0; c < s->n_copies; c++)
        for (int32_t i = 0; i < s->b; i++) {
            const int32_t row = head + s->lead + c * s->stride + i;
            s->rows[head + c * s->b + i] = row; /* scored rows: copy after copy, B each */
            /* a refresh step's block rows are the next block's, all masks */
            const int32_t t = s->n_head ? -1 : copy_token(s, c, i);
            s->tokens[row] = t < 0 ? s->mask_id : t;
            /* every copy at the block's own positions; the adapter on every block row, filled
             * or not */
            s->pos[row] = (int32_t)(bfirst + i);
            s->gate[row] = 1.0f;
            if (s->in.embd_rows) {
                s->in.embd_rows[row] = t < 0;
                if (t < 0)
                    memcpy(s->in.embd + (size_t)row * (size_t)s->in.n_embd, s->in.mask_vec,
                           (size_t)s->in.n_embd * sizeof(float));
            }
        }
    if (s->in.embd_rows) {
        memset(s->in.embd_rows, 0, (size_t)(head + s->lead));
        for (int32_t c = 0; c + 1 < s->n_copies; c++)
            memset(s->in.embd_rows + head + s->lead + c * s->stride + s->b, 0,
                   (size_t)(s->stride - s->b));
    }
    const size_t need = (size_t)n_tok * ((size_t)n_cached + (size_t)n_tok);
    if (need > s->vis_cap) {
        specd_free(s->vis);
        s->vis_cap = 0;
        if (!(s->vis = specd_alloc(2 * need)))
            return specd_fail(err, SPECD_E_NOMEM, "policy sdar: out of memory for the mask");
        s->vis_cap = 2 * need;
    }
    specd_sdar_visible_copies(s->vis, n_cached, head, s->lead, s->b, s->n_copies, s->stride);
    *out = (specd_step_layout){.n_tokens = n_tok,
                               .tokens = s->tokens,
                               .pos = s->pos,
                               .visible = s->vis,
                               .lora_gate = s->in.adapter ? s->gate : NULL,
                               .lora = s->in.lora,
                               .n_rows = n_rows,
                               .rows = s->rows,
                               .lora_path = s->in.adapter,
                               .input_embd = s->in.embd,
                               .input_embd_rows = s->in.embd_rows};
    return SPECD_OK;
}

/* A static denoise step (select=static), plain or spec. Slot 0 masked: it is the step's one
 * reveal, from the pending row. Else the walk over the copies: the target's static pick on copy c
 * (the block with drafts 1..c revealed) accepts draft c + 1 when it is that draft, slot and token;
 * the first pick that is not (or the pick on the last copy) is the bonus reveal. Every reveal is
 * thus the target's own pick on the exact state static decoding would run. The rows of the copy
 * the walk stopped at seed the next step's drafts. */
static specd_status verify_static(sdar_state *s, const float *logits, specd_step_outcome *out,
                                  specd_error *err) {
    const size_t V = (size_t)s->n_vocab, rows_per_copy = (size_t)s->b * V;
    const float *block_logits = logits + V;
    int32_t token[SPECD_SDAR_MAX_B], n_rev = 0, j = 0, seed_copy = 0;
    memcpy(token, s->token, sizeof token);
    if (token[0] < 0) {
        SPECD_TRY(target_pick(s, logits, s->first, &token[0], err));
    } else {
        for (int32_t c = 0;; c++) {
            int32_t slot = -1, tok = -1;
            SPECD_TRY(static_reveal(s, token, block_logits + (size_t)c * rows_per_copy, &slot, &tok,
                                    err));
            seed_copy = c;
            if (slot < 0) break; /* no finite row: nothing more this step */
            token[slot] = tok;
            n_rev++;
            if (c >= s->n_draft || slot != s->d_slot[c] || tok != s->d_tok[c]) break; /* bonus */
            j++; /* draft c + 1 is the target's pick: copy c + 1 is the state now */
        }
    }
    if (s->spec_k > 0) {
        memcpy(s->seed, block_logits + (size_t)seed_copy * rows_per_copy,
               rows_per_copy * sizeof(float));
        s->has_seed = 1;
    }
    s->stalled = s->token[0] >= 0 && n_rev == 0;
    memcpy(s->token, token, sizeof token);
    s->expect_n = s->n_at;
    *out = (specd_step_outcome){.n_emitted = 0,
                                .emitted = s->emitted,
                                .keep = s->keep,
                                .n_drafted = s->n_draft,
                                .n_accepted = j};
    return SPECD_OK;
}

static specd_status sdar_verify(void *state, const float *logits, specd_step_outcome *out,
                                specd_error *err) {
    sdar_state *s = state;
    /* any failure below may leave the block half updated: the next layout then starts over
     * (a successful return sets expect_n again) */
    s->expect_n = -1;
    const size_t V = (size_t)s->n_vocab;
    const int32_t head = 1 + s->n_head;
    const float *block_logits = logits + (size_t)head * V;
    if (s->n_head == 0 && s->statik) return verify_static(s, logits, out, err);
    if (s->n_head == 0) {
        /* denoise: fill the block, emit nothing, keep nothing */
        int32_t token[SPECD_SDAR_MAX_B], n_fill = 0;
        memcpy(token, s->token, sizeof token);
        if (token[0] < 0) {
            SPECD_TRY(target_pick(s, logits, s->first, &token[0], err));
            specd_dlm_credit_forget(&s->credit, s->first);
        }
        int any_mask = 0;
        for (int32_t i = 0; i < s->b; i++)
            any_mask |= token[i] < 0;
        if (any_mask) SPECD_TRY(select_fills(s, token, s->first, block_logits, &n_fill, err));
        /* a step that filled nothing (every mask row non-finite) makes the next one refresh
         * the filled run, so decoding moves on */
        s->stalled = any_mask && s->token[0] >= 0 && n_fill == 0;
        memcpy(s->token, token, sizeof token);
        s->expect_n = s->n_at;
        *out = (specd_step_outcome){.n_emitted = 0, .emitted = s->emitted, .keep = s->keep};
        return SPECD_OK;
    }
    /* refresh: commit the block (or the stalled run) through base causal rows 0..n_head */
    const int32_t k = s->n_head;
    int32_t n_emit, n_acc;
    int lossy = 0;
    if (s->lossless) {
        specd_sample_key key = s->key;
        key.position = (uint32_t)s->n_at;
        specd_chain_input in = {.k = k,
                                .draft = s->token,
                                .q_vocab = s->n_vocab,
                                .target_logits = logits,
                                .n_vocab = s->n_vocab,
                                .key = key};
        specd_chain_keys keys = {.n_rows = s->n_tokens, .bonus_row = SPECD_CHAIN_NO_BONUS};
        specd_chain_result res = {.tokens = s->emitted, .accept_prob = s->accept_prob};
        SPECD_TRY(specd_accept_chain_keyed(s->accept, &in, &keys, &res, err));
        n_emit = res.n_emitted;
        n_acc = res.n_accepted;
        lossy = res.lossy;
    } else {
        memcpy(s->emitted, s->token, (size_t)k * sizeof(int32_t));
        n_emit = n_acc = k;
        lossy = 1;
    }
    /* the pending row and every emitted token but the last (the next pending token) */
    for (int32_t i = 0; i < n_emit; i++)
        s->keep[i] = i;
    const int64_t n_next = s->n_at + n_emit;
    const int whole = n_acc == k;
    /* with spec the refresh (unverified: spec runs in block mode) reports no drafts, so the step
     * statistics' accepted per verify are the spec walks' */
    int32_t n_drafted = k;
    if (s->spec_k > 0) n_drafted = n_acc = 0;
    block_reset(s, n_next);
    s->stalled = 0;
    if (whole) {
        /* the next block's rows (at n_next..) saw exactly the committed tokens: slot 0 from row k
         * (plain decoding's row for it), the rest by the rule on the mask rows; static decoding
         * reveals only slot 0 here (its one reveal of this forward), and the mask rows seed the
         * spec drafts */
        int32_t token[SPECD_SDAR_MAX_B], n_fill;
        memcpy(token, s->token, sizeof token);
        SPECD_TRY(target_pick(s, logits + (size_t)k * V, n_next, &token[0], err));
        if (!s->statik) SPECD_TRY(select_fills(s, token, n_next, block_logits, &n_fill, err));
        if (s->spec_k > 0) {
            memcpy(s->seed, block_logits, (size_t)s->b * V * sizeof(float));
            s->has_seed = 1;
        }
        memcpy(s->token, token, sizeof token);
    }
    s->expect_n = n_next;
    *out = (specd_step_outcome){.n_emitted = n_emit,
                                .emitted = s->emitted,
                                .n_keep = n_emit,
                                .keep = s->keep,
                                .n_drafted = n_drafted,
                                .n_accepted = n_acc,
                                .lossy = lossy};
    return SPECD_OK;
}

static void sdar_rollback(void *state, int64_t n_history) {
    sdar_state *s = state;
    if (n_history != s->expect_n) s->expect_n = -1;
}

const specd_policy_ops specd_policy_sdar = {
    .abi_version = SPECD_POLICY_ABI_VERSION,
    .name = "sdar",
    .options_help =
        "block-bidirectional diffusion (SDAR-style; adapter from tools/train/train_sdar.py): "
        "block (B, 1..16, default the adapter's specd_block, else 4; a step runs up to 2B+1 rows), "
        "mode=lossless|block (block: the "
        "finished block committed unverified, LOSSY; a plain step of the adaptive guard restarts "
        "the block: run it with the guard off), select=threshold|hierarchical|credit|"
        "entropy|static, tau (threshold/credit 0.8; hierarchical 0.92; entropy 0.3), tau_low=0.62, "
        "lambda=0.1 (entropy), select=static (one reveal per forward, the most confident mask), "
        "spec=K (MRP spec mode, paper 002 Alg. 3, with select=static,mode=block: K drafts per "
        "verify in one forward over K+1 packed copies of the block, "
        "token-identical to static on specd's own CPU kernels, not promised for a host's; K<=B-2 "
        "counts; untrained residual head: C=0), "
        "pack=aligned|dense (static's steps: blocks at 8-aligned columns, copies 32 rows apart, up "
        "to 8+32K+B rows, bitwise static; dense: (K+1)B+1 rows, not bitwise, tokens may differ), "
        "mask=ID, "
        "adapter=DIR (PEFT LoRA on every block row)",
    .create = sdar_create,
    .destroy = sdar_destroy,
    .layout = sdar_layout,
    .verify = sdar_verify,
    .rollback = sdar_rollback,
    .flags = SPECD_POLICY_MAY_EMIT_NONE | SPECD_POLICY_FIGURE_P_CACHE,
};
