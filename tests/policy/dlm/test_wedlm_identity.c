/* wedlm on the real model with the trained WeDLM adapter (artifacts/adapters/smollm2-135m-wedlm,
 * unshifted: shift=0 from its config; one config reads it shifted to cover shift=1):
 *  - mode=lossless emits exactly what plain decoding emits, greedy and coupled, for every
 *    selection rule (eq. 11, threshold, hierarchical, credit) and for W = 2, and it did draft;
 *  - smooth= (dInfer's IterSmooth) feeds a mask that stays masked e_mask + alpha p W_emb, with
 *    p this step's prediction there, and stays lossless;
 *  - mode=stream (the paper's unverified commit) is flagged lossy, emits at least one token per
 *    forward, and its first token (a window of masks: the pending row's) is plain decoding's.
 * p_cache (eq. 4: tokens emitted over token rows run) and TPF are printed, not asserted: they
 * measure the adapter, not the code. Prompts are llama.cpp's token ids from tests/data. */
#include "test_main.h"

#include "fixture_model.h"

#include "policy/dlm/dlm_embd.h"
#include "specd/policy.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <string.h>

enum { N_GEN = 24, MAX_PROMPT = 256, N_PROMPTS = 2 };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static const specd_model_info *info;
static specd_context *ctx;
static char adapter[4096];

static void generate(const char *policy, const char *opts, float temperature, int32_t *out,
                     specd_seq_stats *stats) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s%s%s", adapter, opts && *opts ? "," : "",
             opts ? opts : "");
    specd_seq_params params = specd_seq_default_params();
    params.policy = policy;
    params.policy_options = strcmp(policy, "none") ? full : NULL;
    params.sampling.temperature = temperature;
    params.seed = 4321;
    params.max_tokens = N_GEN;
    params.adaptive = 0; /* the policy's own steps, never the guard's plain ones */
    for (int p = 0; p < N_PROMPTS; p++)
        fixture_run_seq(spec, ctx, prompts[p], n_prompts[p], &params, out + p * N_GEN,
                        stats ? &stats[p] : NULL);
    specd_spec_destroy(spec);
}

static void report(const char *what, const specd_seq_stats *st) {
    int64_t gen = 0, rows = 0, steps = 0;
    for (int p = 0; p < N_PROMPTS; p++)
        gen += st[p].n_emitted, rows += st[p].n_tokens_run, steps += st[p].n_steps;
    fprintf(stderr, "wedlm %-40s TPF %.2f  p_cache (eq. 4) %.3f\n", what,
            (double)gen / (double)steps, (double)gen / (double)rows);
}

static void identical(float temperature, const char *const *configs, int n_configs) {
    int32_t plain[N_PROMPTS * N_GEN], got[N_PROMPTS * N_GEN];
    generate("none", NULL, temperature, plain, NULL);
    for (int c = 0; c < n_configs; c++) {
        specd_seq_stats st[N_PROMPTS];
        generate("wedlm", configs[c], temperature, got, st);
        for (int i = 0; i < N_PROMPTS * N_GEN; i++)
            if (plain[i] != got[i])
                fail_msg("T=%.2f wedlm %s differs from plain at token %d (%d vs %d)",
                         (double)temperature, configs[c], i, got[i], plain[i]);
        int64_t drafted = 0;
        for (int p = 0; p < N_PROMPTS; p++) {
            assert_false(st[p].lossy);
            drafted += st[p].n_draft_tokens;
        }
        if (drafted == 0) fail_msg("wedlm %s never drafted: the identity says nothing", configs[c]);
        char what[96];
        snprintf(what, sizeof what, "T=%.1f %s", (double)temperature, configs[c]);
        report(what, st);
    }
}

static void test_greedy_identical(void **s) {
    (void)s;
    /* thresholds loose enough that every rule drafts on these prompts (none is forced) */
    static const char *const configs[] = {"tau=1.5",
                                          "select=threshold,tau=0.3",
                                          "select=hierarchical,tau=0.5,tau_low=0.3",
                                          "select=credit,w=4,tau=0.3",
                                          "w=2,tau=2.5",
                                          "select=entropy,tau=2.5,lambda=0.05",
                                          "smooth=0.3,w=3,tau=1.5",
                                          "shift=1,tau=3"};
    identical(0.0f, configs, (int)(sizeof configs / sizeof configs[0]));
}

static void test_coupled_identical(void **s) {
    (void)s;
    static const char *const configs[] = {"tau=1.5", "select=credit,w=3,tau=0.3"};
    identical(0.8f, configs, (int)(sizeof configs / sizeof configs[0]));
}

static void test_stream_flagged_lossy(void **s) {
    (void)s;
    int32_t plain[N_PROMPTS * N_GEN], got[N_PROMPTS * N_GEN];
    specd_seq_stats st[N_PROMPTS];
    generate("none", NULL, 0.0f, plain, NULL);
    generate("wedlm", "mode=stream,tau=1.5", 0.0f, got, st);
    for (int p = 0; p < N_PROMPTS; p++) {
        assert_int_equal(got[p * N_GEN], plain[p * N_GEN]);
        assert_true(st[p].n_steps <= st[p].n_emitted);
        /* a run was committed unverified at least once (each prompt drafts within 24 tokens) */
        if (st[p].n_accepted > 0) assert_true(st[p].lossy);
    }
    assert_true(st[0].lossy || st[1].lossy);
    report("T=0.0 mode=stream", st);
}

/* The policy's ops on the real target with constructed logits for one step: the masks that stay
 * masked get e_mask + 0.1 (E[a] + E[b]) / 2 as input when the prediction there puts half its mass
 * on a and half on b (alpha_0 = 0.1: the schedule's first value). */
static void test_smooth_input_rows(void **s) {
    (void)s;
    const specd_policy_ops *ops = specd_policy_find("wedlm");
    const int32_t V = info->n_vocab, E = info->n_embd, W = 4;
    specd_policy_env env = {
        .n_vocab = V, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY, .target = model};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    char opts[8192];
    /* shifted reads (row r predicts slot n - 1 + r), as the hand-made logits below assume */
    snprintf(opts, sizeof opts, "adapter=%s,w=4,smooth=0.3,shift=1", adapter);
    void *st = NULL;
    specd_error err;
    if (ops->create(&env, opts, &st, &err) != SPECD_OK) fail_msg("create: %s", err.message);
    float *mask = malloc(sizeof(float) * (size_t)E), *lg = calloc((size_t)(W + 1) * V, 4);
    float *ea = malloc(sizeof(float) * (size_t)E), *eb = malloc(sizeof(float) * (size_t)E);
    int32_t n_mask = 0;
    assert_int_equal(specd_lora_read_mask_embedding(adapter, mask, E, &n_mask, &err), SPECD_OK);
    assert_int_equal(n_mask, E);
    specd_dlm_embd tab;
    assert_int_equal(specd_dlm_embd_open(model, V, E, &tab, &err), SPECD_OK);
    int32_t hist[MAX_PROMPT + 8];
    const int64_t n = n_prompts[0];
    memcpy(hist, prompts[0], (size_t)n * sizeof(int32_t));
    specd_step_layout l;
    specd_step_outcome o;
    assert_int_equal(ops->layout(st, hist, n, &l, &err), SPECD_OK);
    for (int r = 1; r <= W; r++) /* first step: every mask row takes the plain mask vector */
        assert_memory_equal(l.input_embd + (size_t)r * E, mask, sizeof(float) * (size_t)E);
    /* row 0 -> 3 (emitted); row 1 -> 5 alone (slot n+1 is filled); rows 2..4 split their mass
     * between (7, 8), (9, 10), (11, 12): entropy ln 2 > tau 0.3, so those slots stay masked */
    lg[3] = 30.0f;
    lg[(size_t)V + 5] = 30.0f;
    for (int r = 2; r <= W; r++)
        lg[(size_t)r * V + 3 + 2 * r] = lg[(size_t)r * V + 4 + 2 * r] = 30.0f;
    assert_int_equal(ops->verify(st, lg, &o, &err), SPECD_OK);
    assert_true(o.n_emitted == 1 && o.emitted[0] == 3);
    hist[n] = 3;
    assert_int_equal(ops->layout(st, hist, n + 1, &l, &err), SPECD_OK);
    /* [3@n | 5@n+1 | M@n+2 M@n+3 M@n+4]: slot n+2 was predicted by row 2 (7, 8), and so on */
    assert_true(l.tokens[1] == 5 && l.pos[1] == n + 1 && l.pos[2] == n + 2);
    for (int r = 0; r <= W; r++)
        assert_int_equal(l.input_embd_rows[r] != 0, r >= 2);
    for (int r = 2; r <= W; r++) {
        specd_dlm_embd_row(&tab, 3 + 2 * r, ea);
        specd_dlm_embd_row(&tab, 4 + 2 * r, eb);
        const float *got = l.input_embd + (size_t)r * E;
        for (int32_t j = 0; j < E; j++) {
            const double want = mask[j] + 0.1 * (0.5 * ea[j] + 0.5 * eb[j]);
            if (fabs(got[j] - want) > 1e-4)
                fail_msg("row %d entry %d: %g, want %g", r, j, (double)got[j], want);
        }
    }
    ops->destroy(st);
    free(mask), free(lg), free(ea), free(eb);
}

int main(void) {
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    fixture_source_path("artifacts/adapters/smollm2-135m-wedlm", adapter, sizeof adapter);
    model = fixture_model_open();
    info = specd_model_get_info(model);
    ctx = fixture_context(model, 1, 256, 32);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_coupled_identical),
        cmocka_unit_test(test_stream_flagged_lossy),
        cmocka_unit_test(test_smooth_input_rows),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
