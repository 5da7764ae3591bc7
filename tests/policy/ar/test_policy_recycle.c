/* recycle (Token Recycling) on the real model: token-identical to plain decoding under greedy
 * (T 0) and coupled sampling (T 0.8), on a golden prompt and a repetitive one, with the default
 * tree and with a tree wider than 2 * max_draft nodes (max_step_rows raised); and it accepts drafts
 * on the repetitive prompt with prompt seeding off, so the table the target's verified rows fill
 * (observe_rows) is what drafted them. Each plain output is decoded once. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/spec.h"

#include <string.h>

enum { N_GEN = 24, MAX_PROMPT = 128, MAX_STEP_ROWS = 33 };

static specd_model *model;
static specd_context *ctx;
static int32_t golden[MAX_PROMPT], repetitive[3 * 24];
static int64_t n_golden, n_repetitive;
static int32_t plain_out[2][2][N_GEN]; /* [repetitive][T 0.8] */
static int have_plain[2][2];

/* Runs recycle with opts on a spec of step_rows rows (0: the default); checks the output is
 * plain decoding's. Returns the tokens accepted. */
static int64_t check_identity(const int32_t *prompt, int64_t n_prompt, float temperature,
                              const char *opts, int32_t step_rows) {
    int32_t spec_out[N_GEN];
    const uint64_t seed = 7;
    int rep = prompt == repetitive, hot = temperature != 0.0f;
    int32_t *plain = plain_out[rep][hot];
    if (!have_plain[rep][hot])
        fixture_plain_output(ctx, prompt, n_prompt, temperature, seed, N_GEN, plain);
    have_plain[rep][hot] = 1;
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.target = model;
    sp.max_step_rows = step_rows;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) fail_msg("spec: %s", err.message);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "recycle";
    p.policy_options = opts;
    p.sampling.temperature = temperature;
    p.rule = temperature == 0.0f ? SPECD_ACCEPT_GREEDY : SPECD_ACCEPT_COUPLED;
    p.seed = seed;
    p.max_tokens = N_GEN;
    p.adaptive = 0; /* draft every step: the guard's timing must not decide what is tested */
    specd_seq_stats st;
    fixture_run_seq(spec, ctx, prompt, n_prompt, &p, spec_out, &st);
    specd_spec_destroy(spec);
    for (int32_t i = 0; i < N_GEN; i++)
        if (spec_out[i] != plain[i])
            fail_msg("recycle %s at T %.1f: token %d is %d, plain decoding's %d", opts,
                     (double)temperature, i, spec_out[i], plain[i]);
    assert_true(st.n_draft_tokens > 0); /* it did draft */
    return st.n_accepted;
}

static void test_identity_default_tree(void **s) {
    (void)s;
    check_identity(golden, n_golden, 0.0f, "", 0);
    check_identity(repetitive, n_repetitive, 0.8f, "", 0);
}

static void test_identity_wide_tree(void **s) {
    (void)s;
    /* 32 nodes: more than 2 * max_draft, the accept engine's bound before ABI 3's session */
    check_identity(golden, n_golden, 0.8f, "tree=large", MAX_STEP_ROWS);
}

static void test_accepts_from_observed_rows(void **s) {
    (void)s;
    int64_t accepted = check_identity(repetitive, n_repetitive, 0.0f, "seed=0", 0);
    assert_true(accepted > 0);
}

int main(void) {
    model = fixture_model_open();
    ctx = fixture_context(model, 1, 512, MAX_STEP_ROWS);
    fixture_golden_prompts(1, MAX_PROMPT, golden, &n_golden);
    /* the golden prompt's first 24 tokens, three times: text the model goes on repeating */
    int64_t piece = n_golden < 24 ? n_golden : 24;
    for (int r = 0; r < 3; r++)
        memcpy(repetitive + r * piece, golden, (size_t)piece * sizeof *golden);
    n_repetitive = 3 * piece;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_default_tree),
        cmocka_unit_test(test_identity_wide_tree),
        cmocka_unit_test(test_accepts_from_observed_rows),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
