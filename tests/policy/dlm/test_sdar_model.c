/* sdar on the real model with the R-ISD adapter as the block rows' LoRA (any adapter serves: these
 * checks are about KV and identity, not about how good the fills are):
 *  - vicinity refresh == full recompute: after every step that committed KV, the next step's
 *    logits (every row: the pending row and the gated bidirectional block rows) are bitwise those
 *    of the same step run over a cache prefilled from scratch with the whole history. Bit-exact,
 *    not a tolerance: the runtime is batch-invariant (specd/runtime.h), and the committed rows were
 *    computed by base weights under causal attention, exactly what a prefill computes. And where
 *    they must differ: a cache that kept the block's KV from the block step's rows (adapter on,
 *    bidirectional) instead of refreshing it gives other logits, so the check can fail;
 *  - mode=lossless emits exactly plain decoding's tokens, greedy and coupled, for several block
 *    sizes and commit rules;
 *  - mode=block is flagged lossy and its first token is plain decoding's (slot 0 is exact).
 * TPF is printed, not asserted: it measures the stand-in adapter, not the code. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/policy.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <string.h>

enum { N_GEN = 10, MAX_PROMPT = 256, N_PROMPTS = 2, MAX_ROWS = 17, HIST = MAX_PROMPT + 64 };
/* the prompts checked: both, or the first under the sanitizers (SPECD_TEST_PROMPTS) */
enum { N_RUN = SPECD_TEST_PROMPTS(N_PROMPTS) };
enum { SEED = 4321 }; /* every run's, plain decoding's included */

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static const specd_model_info *info;
static specd_context *ctx; /* three sequences: the policy's, the recompute, the stale block KV */
static char adapter[4096];
static float *lg_a, *lg_b;

/* seq 2's cache as SDAR itself would leave it: the history before the block (n0 tokens, the
 * pending one not cached), then the block step's rows committed: the pending row (base, causal)
 * and the block's tokens under the adapter with bidirectional attention, all but the last (the
 * next pending token). */
static void stale_block_cache(const int32_t *hist, int64_t n0, int32_t b, const specd_lora *lora) {
    specd_error err;
    fixture_prefill(ctx, 2, hist, n0 - 1);
    const int32_t n_tok = 1 + b, cached = (int32_t)(n0 - 1), width = cached + n_tok;
    int32_t pos[MAX_ROWS];
    float gate[MAX_ROWS];
    uint8_t commit[MAX_ROWS];
    static uint8_t vis[MAX_ROWS * (HIST + MAX_ROWS)];
    for (int32_t r = 0; r < n_tok; r++) {
        pos[r] = cached + r;
        gate[r] = r ? 1.0f : 0.0f;
        commit[r] = r < b;
        for (int32_t j = 0; j < width; j++)
            vis[r * width + j] = j < cached || r > 0 || j == cached;
    }
    assert_int_equal(specd_context_set_lora(ctx, lora, &err), SPECD_OK);
    specd_seq_batch sb = {.seq = 2,
                          .n_tokens = n_tok,
                          .tokens = hist + n0 - 1,
                          .pos = pos,
                          .visible = vis,
                          .lora_gate = gate,
                          .commit = commit};
    specd_status st = specd_context_extend(ctx, &sb, 1, NULL, &err);
    specd_context_set_lora(ctx, NULL, NULL); /* the policy's adapter, freed with it */
    if (st != SPECD_OK) fail_msg("stale block: %s", err.message);
}

/* Drives the policy by hand on seq 0 (greedy) and, after each step that committed KV, checks the
 * next step against a full recompute (seq 1) and, after a whole block, against the stale cache
 * (seq 2). */
static void refresh_vs_recompute(const char *opts, int32_t b, int steps, int *n_equal,
                                 int *n_differ) {
    const specd_policy_ops *ops = specd_policy_find("sdar");
    specd_policy_env env = {
        .n_vocab = info->n_vocab, .max_draft = 8, .rule = SPECD_ACCEPT_GREEDY, .target = model};
    env.sampling = specd_sampling_default_params();
    env.sampling.temperature = 0.0f;
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s,block=%d,%s", adapter, b, opts);
    void *st = NULL;
    specd_error err;
    if (ops->create(&env, full, &st, &err) != SPECD_OK) fail_msg("create: %s", err.message);
    int32_t hist[HIST];
    int64_t n = n_prompts[0];
    memcpy(hist, prompts[0], (size_t)n * sizeof(int32_t));
    fixture_prefill(ctx, 0, hist, n - 1);
    const size_t V = (size_t)info->n_vocab;
    int64_t committed_block_at = -1; /* history length before a block committed whole */
    int committed = 0;
    for (int step = 0; step < steps && n < HIST - 2 * MAX_ROWS; step++) {
        specd_step_layout l;
        assert_int_equal(ops->layout(st, hist, n, &l, &err), SPECD_OK);
        int32_t kv_before = specd_context_kv_len(ctx, 0);
        assert_int_equal(kv_before, n - 1);
        fixture_run_layout(ctx, 0, &l, lg_a);
        const size_t bytes = (size_t)l.n_rows * V * sizeof(float);
        if (committed) {
            fixture_prefill(ctx, 1, hist, n - 1); /* the whole history from scratch */
            fixture_run_layout(ctx, 1, &l, lg_b);
            if (memcmp(lg_a, lg_b, bytes) != 0) {
                size_t i = 0;
                while (lg_a[i] == lg_b[i])
                    i++;
                fail_msg("%s step %d: logits after the refresh differ from a full recompute at "
                         "row %zu (%g vs %g)",
                         full, step, i / V, (double)lg_a[i], (double)lg_b[i]);
            }
            ++*n_equal;
        }
        if (committed_block_at >= 0) {
            stale_block_cache(hist, committed_block_at, b, l.lora);
            assert_int_equal(specd_context_kv_len(ctx, 2), n - 1);
            fixture_run_layout(ctx, 2, &l, lg_b);
            double most = 0;
            for (size_t i = 0; i < (size_t)l.n_rows * V; i++)
                most = fmax(most, fabs((double)lg_a[i] - (double)lg_b[i]));
            /* far above rounding: the stale rows went through the adapter and saw the future */
            if (most < 1e-2)
                fail_msg("%s step %d: the block's bidirectional KV gives the same logits as the "
                         "refresh (max |diff| %g): the check could not fail",
                         full, step, most);
            ++*n_differ;
        }
        specd_step_outcome o;
        assert_int_equal(ops->verify(st, lg_a, &o, &err), SPECD_OK);
        int32_t keep[MAX_ROWS];
        for (int32_t i = 0; i < o.n_keep; i++)
            keep[i] = kv_before + o.keep[i];
        assert_int_equal(specd_context_kv_keep(ctx, 0, kv_before, o.n_keep, keep, &err), SPECD_OK);
        committed = o.n_keep > 0;
        committed_block_at = o.n_emitted == b && o.n_accepted == b ? n : -1;
        memcpy(hist + n, o.emitted, (size_t)o.n_emitted * sizeof(int32_t));
        n += o.n_emitted;
    }
    ops->destroy(st);
}

static void test_refresh_equals_recompute(void **s) {
    (void)s;
    int eq = 0, diff = 0;
    refresh_vs_recompute("mode=block", 4, 12, &eq, &diff);
    refresh_vs_recompute("mode=lossless,select=entropy", 3, 10, &eq, &diff);
    fprintf(stderr,
            "sdar refresh: %d steps bitwise equal to a full recompute, %d where the "
            "block's own KV differs\n",
            eq, diff);
    assert_true(eq >= 3);
    assert_true(diff >= 2);
}

static void generate(const char *opts, float temperature, int32_t *out, specd_seq_stats *stats) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    char full[8192];
    snprintf(full, sizeof full, "adapter=%s%s%s", adapter, *opts ? "," : "", opts);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "sdar";
    params.policy_options = full;
    params.sampling.temperature = temperature;
    params.seed = SEED;
    params.max_tokens = N_GEN;
    params.adaptive = 0;
    for (int p = 0; p < N_RUN; p++)
        fixture_run_seq(spec, ctx, prompts[p], n_prompts[p], &params, out + p * N_GEN,
                        stats ? &stats[p] : NULL);
    specd_spec_destroy(spec);
}

static void report(const char *what, const specd_seq_stats *st) {
    int64_t gen = 0, steps = 0, drafted = 0, acc = 0;
    for (int p = 0; p < N_RUN; p++)
        gen += st[p].n_emitted, steps += st[p].n_steps, drafted += st[p].n_draft_tokens,
            acc += st[p].n_accepted;
    fprintf(stderr, "sdar %-36s TPF %.2f  acceptance %.2f\n", what, (double)gen / (double)steps,
            drafted ? (double)acc / (double)drafted : 0.0);
}

/* plain decoding's output at T = 0 (made once, shared by the greedy checks) */
static int32_t plain_greedy[N_PROMPTS * N_GEN];
static int have_plain_greedy;

static void plain_all(float temperature, int32_t *out) {
    for (int p = 0; p < N_RUN; p++)
        fixture_plain_output(ctx, prompts[p], n_prompts[p], temperature, SEED, N_GEN,
                             out + p * N_GEN);
}

static const int32_t *plain_output(float temperature, int32_t *buf) {
    if (temperature > 0.0f) {
        plain_all(temperature, buf);
        return buf;
    }
    if (!have_plain_greedy) plain_all(0.0f, plain_greedy);
    have_plain_greedy = 1;
    return plain_greedy;
}

static void identical(float temperature, const char *const *configs, int n_configs) {
    int32_t buf[N_PROMPTS * N_GEN], got[N_PROMPTS * N_GEN];
    const int32_t *plain = plain_output(temperature, buf);
    for (int c = 0; c < n_configs; c++) {
        specd_seq_stats st[N_PROMPTS];
        generate(configs[c], temperature, got, st);
        for (int i = 0; i < N_RUN * N_GEN; i++)
            if (plain[i] != got[i])
                fail_msg("T=%.2f sdar %s differs from plain at token %d (%d vs %d)",
                         (double)temperature, configs[c], i, got[i], plain[i]);
        int64_t accepted = 0;
        for (int p = 0; p < N_RUN; p++) {
            assert_false(st[p].lossy);
            accepted += st[p].n_accepted;
        }
        if (accepted == 0) fail_msg("sdar %s never committed a draft: says nothing", configs[c]);
        char what[96];
        snprintf(what, sizeof what, "T=%.1f %s", (double)temperature, configs[c]);
        report(what, st);
    }
}

static void test_lossless_greedy(void **s) {
    (void)s;
    static const char *const configs[] = {"", "block=3,select=credit",
                                          "block=2,select=hierarchical"};
    identical(0.0f, configs, (int)(sizeof configs / sizeof configs[0]));
}

static void test_lossless_coupled(void **s) {
    (void)s;
    static const char *const configs[] = {"block=3,select=entropy"};
    identical(0.8f, configs, (int)(sizeof configs / sizeof configs[0]));
}

static void test_block_mode_lossy(void **s) {
    (void)s;
    int32_t got[N_PROMPTS * N_GEN];
    specd_seq_stats st[N_PROMPTS];
    const int32_t *plain = plain_output(0.0f, NULL);
    generate("mode=block", 0.0f, got, st);
    for (int p = 0; p < N_RUN; p++) {
        assert_int_equal(got[p * N_GEN], plain[p * N_GEN]);
        assert_true(st[p].lossy);
    }
    report("T=0.0 mode=block", st);
}

int main(void) {
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    fixture_source_path("artifacts/adapters/smollm2-135m-risd2", adapter, sizeof adapter);
    model = fixture_model_open();
    info = specd_model_get_info(model);
    ctx = fixture_context(model, 3, HIST + MAX_ROWS, 64);
    lg_a = malloc(sizeof(float) * MAX_ROWS * (size_t)info->n_vocab);
    lg_b = malloc(sizeof(float) * MAX_ROWS * (size_t)info->n_vocab);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refresh_equals_recompute),
        cmocka_unit_test(test_lossless_greedy),
        cmocka_unit_test(test_lossless_coupled),
        cmocka_unit_test(test_block_mode_lossy),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    free(lg_a);
    free(lg_b);
    fixture_close(model, ctx);
    return rc;
}
