/* Keyed chains through the policy ABI (specd_step_layout.n_chain) on the real model.
 *
 * Two policies propose the same drafts: the continuation of a plain decode of the same prompt and
 * seed, with some drafts corrupted so that steps also end in rejections. One is drafter-shaped
 * (the session lays out [pending | drafts] and reads draft i on row i). The other lays out its own
 * step with SimSD's shape: the ordinary rows [pending | drafts] plus a twin of each row that
 * carries the same token at the same position and sees exactly what that row sees (the cache
 * and the ordinary rows up to it), so its logits are bitwise those of the ordinary row (the
 * runtime's batch invariance). Only the twins and the row after the last draft are scored, in a
 * permuted order, and each draft's key is its twin. Then:
 *  - with a bonus row, the keyed policy emits token for token what the drafter-shaped one and
 *    plain decoding emit, with the same acceptance per step, under greedy and coupled sampling
 *    (under REJECTION: what the drafter-shaped one emits);
 *  - without a bonus row (no row after the last draft is scored), every step emits exactly its
 *    accepted drafts, plus the correction after a rejection, the output is still plain
 *    decoding's, and both endings occur;
 *  - a layout whose chain names a row it does not score is refused at layout. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/specd.h"

#include <string.h>

enum { N_GEN = 24, MAX_DRAFT = 4, MAX_PROMPT = 256, N_PROMPTS = 2, MAX_STEP = 2 * MAX_DRAFT + 1 };
/* the prompts checked: all, or the first under the sanitizers (SPECD_TEST_PROMPTS) */
enum { N_RUN = SPECD_TEST_PROMPTS(N_PROMPTS) };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static specd_context *ctx;
static int32_t n_vocab;

/* What the policies draft from (env.user). */
typedef struct oracle {
    const int32_t *ref; /* plain decoding's output, N_GEN + MAX_DRAFT tokens */
    int64_t n_prompt;
    int32_t n_gen; /* the run's max_tokens */
} oracle;

/* Drafts for the sequence's next k tokens: the reference continuation, with the second draft
 * corrupted every third output length and the first every fifth. */
static void oracle_drafts(const oracle *o, int64_t n_history, int32_t k, int32_t *draft) {
    int64_t done = n_history - o->n_prompt;
    for (int32_t i = 0; i < k; i++)
        draft[i] = o->ref[done + i];
    if (done % 3 == 1 && k > 1) draft[1] = (draft[1] + 1) % n_vocab;
    if (done % 5 == 2) draft[0] = (draft[0] + 7) % n_vocab;
}

/* ---- the drafter-shaped policy ------------------------------------------------------------- */
static specd_status plain_create(const specd_policy_env *env, const char *opts, void **st,
                                 specd_error *err) {
    (void)opts, (void)err;
    *st = env->user;
    return SPECD_OK;
}
static void nop_destroy(void *st) {
    (void)st;
}
static specd_status plain_propose(void *st, const int32_t *h, int64_t n, int32_t max_draft,
                                  int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                  specd_error *err) {
    (void)h, (void)q, (void)err;
    oracle_drafts(st, n, max_draft, draft);
    *n_draft = max_draft;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops plain_ops = {.abi_version = 2,
                                           .name = "oracle-chain",
                                           .create = plain_create,
                                           .destroy = nop_destroy,
                                           .propose = plain_propose};

/* ---- the keyed policy ---------------------------------------------------------------------- */
typedef struct keyed {
    const oracle *o;
    int bonus;   /* score the row after the last draft as the bonus row */
    int bad_key; /* name a key row outside rows[] */
    int32_t k;   /* drafts of the step laid out last */
    int32_t draft[MAX_DRAFT], key[MAX_DRAFT], keep[MAX_DRAFT + 1];
    int32_t tokens[MAX_STEP], pos[MAX_STEP], rows[MAX_STEP];
    uint8_t *visible;
} keyed;

static keyed *last_keyed;

static specd_status keyed_create(const specd_policy_env *env, const char *opts, void **st,
                                 specd_error *err) {
    (void)err;
    keyed *s = calloc(1, sizeof *s);
    s->o = env->user;
    s->bonus = !opts || !strstr(opts, "bonus=0");
    s->bad_key = opts && strstr(opts, "bad_key") != NULL;
    s->visible = calloc((size_t)MAX_STEP * (MAX_PROMPT + N_GEN + MAX_STEP), 1);
    last_keyed = s;
    *st = s;
    return SPECD_OK;
}
static void keyed_destroy(void *st) {
    keyed *s = st;
    if (!s) return;
    free(s->visible);
    free(s);
}

/* Rows: 0 the pending token, 1..k the drafts, k + 1 + j the twin of row j (j < k). Scored: the
 * twins from the last to the first, then (with a bonus) row k. */
static specd_status keyed_layout(void *st, const int32_t *h, int64_t n, specd_step_layout *out,
                                 specd_error *err) {
    (void)err;
    keyed *s = st;
    /* as many drafts as the session gives a drafter (at least one: a keyed chain is not empty) */
    int32_t left = s->o->n_gen - (int32_t)(n - s->o->n_prompt) - 1;
    const int32_t k = left < 1 ? 1 : left < MAX_DRAFT ? left : MAX_DRAFT;
    const int32_t cached = (int32_t)(n - 1), n_tok = 2 * k + 1;
    const int32_t width = cached + n_tok;
    s->k = k;
    oracle_drafts(s->o, n, k, s->draft);
    s->tokens[0] = h[n - 1];
    for (int32_t i = 0; i < k; i++)
        s->tokens[1 + i] = s->draft[i];
    for (int32_t j = 0; j < k; j++)
        s->tokens[k + 1 + j] = s->tokens[j];
    for (int32_t j = 0; j <= k; j++)
        s->pos[j] = cached + j;
    for (int32_t j = 0; j < k; j++)
        s->pos[k + 1 + j] = cached + j;
    memset(s->visible, 0, (size_t)n_tok * (size_t)width);
    for (int32_t r = 0; r < n_tok; r++) {
        uint8_t *row = s->visible + (size_t)r * (size_t)width;
        int32_t twin_of = r <= k ? r : r - (k + 1);
        memset(row, 1, (size_t)cached);
        for (int32_t j = 0; j <= twin_of; j++)
            row[cached + j] = 1; /* ordinary rows 0..twin_of */
    }
    int32_t n_rows = 0;
    for (int32_t j = k - 1; j >= 0; j--) {
        s->key[j] = n_rows; /* draft j is scored where row j's twin is */
        s->rows[n_rows++] = k + 1 + j;
    }
    int32_t bonus = SPECD_CHAIN_NO_BONUS;
    if (s->bonus) {
        bonus = n_rows;
        s->rows[n_rows++] = k;
    }
    if (s->bad_key) s->key[k - 1] = n_rows;
    for (int32_t i = 0; i <= k; i++)
        s->keep[i] = i;
    *out = (specd_step_layout){.n_tokens = n_tok,
                               .tokens = s->tokens,
                               .pos = s->pos,
                               .visible = s->visible,
                               .n_rows = n_rows,
                               .rows = s->rows,
                               .n_chain = k,
                               .chain_draft = s->draft,
                               .chain_key = s->key,
                               .chain_bonus = bonus,
                               .chain_keep = s->keep};
    return SPECD_OK;
}
static specd_status keyed_verify(void *st, const float *logits, specd_step_outcome *out,
                                 specd_error *err) {
    (void)st, (void)logits, (void)out, (void)err;
    fail_msg("the policy's verify ran for a step whose chain the session verifies");
    return SPECD_E_INTERNAL;
}
static const specd_policy_ops keyed_ops = {.abi_version = 2,
                                           .name = "oracle-keyed",
                                           .create = keyed_create,
                                           .destroy = keyed_destroy,
                                           .layout = keyed_layout,
                                           .verify = keyed_verify};

/* ---- the driver ---------------------------------------------------------------------------- */
/* REJECTION instead of COUPLED: speculative output then follows the target's distribution but is
 * not plain decoding's tokens, so the keyed chain is compared with the ordinary chain only. */
static int rejection;

typedef struct step_log {
    int32_t n;
    int32_t drafted[N_GEN], accepted[N_GEN], emitted[N_GEN];
    int32_t n_full, n_rejected;
} step_log;

/* Runs one sequence to N_GEN tokens as a host would (layout, forward, verify, keep), checking
 * each keyed step's outcome against the drafts it laid out. */
static void generate(int p, const specd_policy_ops *ops, const char *opts, float temperature,
                     const oracle *o, int32_t n_gen, int32_t *out, step_log *log) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = MAX_DRAFT;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params params = specd_seq_default_params();
    params.policy_ops = ops;
    params.policy = ops ? NULL : "none";
    params.policy_options = opts;
    params.policy_user = (void *)o;
    params.sampling.temperature = temperature;
    params.rule = rejection         ? SPECD_ACCEPT_REJECTION
                  : temperature > 0 ? SPECD_ACCEPT_COUPLED
                                    : SPECD_ACCEPT_GREEDY;
    params.seed = 4321;
    params.max_tokens = n_gen;
    params.adaptive = 0; /* the policies' own steps throughout */
    if (specd_spec_seq_open(spec, 0, prompts[p], n_prompts[p], &params, &err) != SPECD_OK)
        fail_msg("open: %s", err.message);
    fixture_prefill(ctx, 0, prompts[p], n_prompts[p] - 1);
    static float logits[MAX_STEP * 49152];
    assert_true((size_t)n_vocab <= 49152);
    memset(log, 0, sizeof *log);
    while (!specd_spec_seq_done(spec, 0)) {
        specd_step_layout lay;
        if (specd_spec_seq_layout(spec, 0, &lay, &err) != SPECD_OK)
            fail_msg("layout: %s", err.message);
        int32_t kv_before = specd_context_kv_len(ctx, 0);
        fixture_run_layout(ctx, 0, &lay, logits);
        specd_step_outcome oc;
        if (specd_spec_seq_verify(spec, 0, logits, &oc, &err) != SPECD_OK)
            fail_msg("verify: %s", err.message);
        int done = specd_spec_seq_done(spec, 0);
        if (ops == &keyed_ops && !done) { /* the last step may be cut at max_tokens */
            keyed *s = last_keyed;
            assert_int_equal(oc.n_drafted, s->k);
            int full = oc.n_accepted == s->k;
            assert_int_equal(oc.n_emitted, oc.n_accepted + (full ? s->bonus : 1));
            assert_memory_equal(oc.emitted, s->draft, (size_t)oc.n_accepted * sizeof(int32_t));
            /* the pending row and every emitted draft but the new pending token: as many rows
             * as tokens emitted, whichever way the step ended */
            assert_int_equal(oc.n_keep, oc.n_emitted);
            log->n_full += full;
            log->n_rejected += !full;
        }
        int32_t keep[MAX_STEP];
        for (int32_t i = 0; i < oc.n_keep; i++)
            keep[i] = kv_before + oc.keep[i];
        assert_int_equal(specd_context_kv_keep(ctx, 0, kv_before, oc.n_keep, keep, &err), SPECD_OK);
        if (log->n < N_GEN) {
            log->drafted[log->n] = oc.n_drafted;
            log->accepted[log->n] = oc.n_accepted;
            log->emitted[log->n] = oc.n_emitted;
            log->n++;
        }
    }
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, n_gen);
    memcpy(out, toks, (size_t)n * sizeof(int32_t));
    specd_spec_destroy(spec);
}

static void check(float temperature) {
    for (int p = 0; p < N_RUN; p++) {
        int32_t ref[N_GEN + MAX_DRAFT], chain[N_GEN], kb[N_GEN], knb[N_GEN];
        step_log l_ref, l_chain, l_kb, l_knb;
        generate(p, NULL, NULL, temperature, NULL, N_GEN + MAX_DRAFT, ref, &l_ref);
        oracle o = {.ref = ref, .n_prompt = n_prompts[p], .n_gen = N_GEN};
        generate(p, &plain_ops, NULL, temperature, &o, N_GEN, chain, &l_chain);
        generate(p, &keyed_ops, "bonus=1", temperature, &o, N_GEN, kb, &l_kb);
        generate(p, &keyed_ops, "bonus=0", temperature, &o, N_GEN, knb, &l_knb);
        for (int i = 0; i < N_GEN && rejection; i++)
            if (kb[i] != chain[i])
                fail_msg("REJECTION prompt %d: the keyed chain differs from the ordinary one at %d",
                         p, i);
        for (int i = 0; i < N_GEN && !rejection; i++) {
            if (chain[i] != ref[i])
                fail_msg("T=%.2f prompt %d: the drafter chain differs from plain decoding at %d",
                         temperature, p, i);
            if (kb[i] != ref[i])
                fail_msg("T=%.2f prompt %d: the keyed chain differs at token %d (%d vs %d)",
                         temperature, p, i, kb[i], ref[i]);
            if (knb[i] != ref[i])
                fail_msg("T=%.2f prompt %d: the keyed chain without bonus differs at token %d",
                         temperature, p, i);
        }
        /* step for step the same decisions as the ordinary layout (the last step drafts one
         * token where the session makes the drafter's a plain step) */
        assert_int_equal(l_kb.n, l_chain.n);
        for (int32_t s = 0; s < l_chain.n; s++) {
            if (s + 1 < l_chain.n) {
                assert_int_equal(l_kb.drafted[s], l_chain.drafted[s]);
                assert_int_equal(l_kb.accepted[s], l_chain.accepted[s]);
            }
            assert_int_equal(l_kb.emitted[s], l_chain.emitted[s]);
        }
        /* both endings of a no-bonus step happened */
        if (rejection) continue; /* sampled acceptance: not promised for these few steps */
        assert_true(l_knb.n_full > 0 && l_knb.n_rejected > 0);
        assert_true(l_kb.n_full > 0 && l_kb.n_rejected > 0);
    }
}

static void test_greedy(void **st) {
    (void)st;
    check(0.0f);
}
static void test_coupled(void **st) {
    (void)st;
    check(0.8f);
}

static void test_rejection(void **st) {
    (void)st;
    rejection = 1;
    check(0.8f);
    rejection = 0;
}

static void test_bad_key_refused(void **st) {
    (void)st;
    int32_t ref[N_GEN + MAX_DRAFT] = {0};
    oracle o = {.ref = ref, .n_prompt = n_prompts[0], .n_gen = N_GEN};
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = MAX_DRAFT;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params params = specd_seq_default_params();
    params.policy_ops = &keyed_ops;
    params.policy_options = "bad_key";
    params.policy_user = &o;
    params.adaptive = 0;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err),
                     SPECD_OK);
    specd_step_layout lay;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_E_INTERNAL);
    assert_non_null(strstr(err.message, "key row"));
    specd_spec_destroy(spec);
}

int main(void) {
    /* llama.cpp's numerics: under REJECTION the two chains' last token, in a step cut at
     * max_tokens (the keyed policy still drafts one), is sampled by different draws, so whether
     * they agree there depends on the logits' last bits; in the fast mode prompt 0's last token
     * differs while every step before it agrees (rows and twins are bitwise equal in both modes) */
    setenv("SPECD_NUMERICS", "llama", 1);
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    model = fixture_model_open();
    n_vocab = specd_model_get_info(model)->n_vocab;
    ctx = fixture_context(model, 1, 256, 16);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_coupled),
        cmocka_unit_test(test_rejection),
        cmocka_unit_test(test_bad_key_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
