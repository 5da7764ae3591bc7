/* The mission property on the real model: speculative decoding on specd's runtime emits exactly
 * the tokens of plain decoding, under greedy and coupled sampling, for a policy whose drafts are
 * often right (n-gram) and for one whose drafts are always wrong (every step rejects and rolls
 * the KV cache back). Prompts are llama.cpp's token ids from tests/data. */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/spec_runtime.h"

#include <string.h>

enum { N_GEN = 32, N_PROMPTS = 2, MAX_PROMPT = 256 };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static specd_context *ctx;

static specd_status wrong_create(const specd_policy_env *e, const char *o, void **st,
                                 specd_error *err) {
    (void)e, (void)o, (void)err;
    *st = NULL;
    return SPECD_OK;
}
static void wrong_destroy(void *st) { (void)st; }
/* Proposes tokens the model will not choose (ids of rare byte tokens). */
static specd_status wrong_propose(void *st, const int32_t *h, int64_t n, int32_t max_draft,
                                  int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                  specd_error *err) {
    (void)st, (void)h, (void)n, (void)q, (void)err;
    int32_t k = max_draft < 3 ? max_draft : 3;
    for (int32_t i = 0; i < k; i++) draft[i] = 49000 + i;
    *n_draft = k;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops wrong_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                           .name = "wrong", .create = wrong_create,
                                           .destroy = wrong_destroy, .propose = wrong_propose};

static char draft_opts[1200];

static void generate(int p, const char *policy, const specd_policy_ops *ops, float temperature,
                     int32_t *out, specd_seq_stats *stats) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.max_draft = 6;
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    specd_seq_params params = specd_seq_default_params();
    params.policy = policy;
    params.policy_ops = ops;
    if (policy && !strcmp(policy, "draft")) params.policy_options = draft_opts;
    if (policy && !strcmp(policy, "layerskip")) params.policy_options = "layers=10,k=3";
    params.sampling.temperature = temperature;
    params.seed = 1234;
    params.max_tokens = N_GEN;
    params.adaptive = 0;
    fixture_run_seq(spec, ctx, prompts[p], n_prompts[p], &params, out, stats);
    specd_spec_destroy(spec);
}

/* Every policy against plain decoding; the draft policy drafts with the target itself. */
static void check(float temperature) {
    static const char *const policies[] = {"ngram", "draft", "layerskip", NULL};
    int64_t accepted[4] = {0};
    for (int p = 0; p < N_PROMPTS; p++) {
        int32_t plain[N_GEN], spec[N_GEN];
        specd_seq_stats s_plain, s_spec;
        generate(p, "none", NULL, temperature, plain, &s_plain);
        for (int k = 0; k < 4; k++) {
            const char *name = policies[k] ? policies[k] : "wrong";
            generate(p, policies[k], policies[k] ? NULL : &wrong_ops, temperature, spec, &s_spec);
            for (int i = 0; i < N_GEN; i++)
                if (plain[i] != spec[i])
                    fail_msg("T=%.2f prompt %d: %s differs at token %d (%d vs %d)", temperature,
                             p, name, i, spec[i], plain[i]);
            assert_true(s_spec.n_draft_tokens > 0 || k == 0);
            if (!policies[k]) assert_int_equal(s_spec.n_accepted, 0);
            accepted[k] += s_spec.n_accepted;
        }
    }
    /* drafts were really accepted (the draft policy runs the target itself: nearly all) */
    assert_true(accepted[0] + accepted[2] > 0);
    assert_true(accepted[1] > 0);
}

static void test_greedy_identical(void **s) {
    (void)s;
    check(0.0f);
}

static void test_coupled_identical(void **s) {
    (void)s;
    check(0.8f);
}

int main(void) {
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    model = fixture_model_open();
    snprintf(draft_opts, sizeof draft_opts, "model=%s,k=4", specd_test_model_path());
    ctx = fixture_context(model, 1, 512, 64);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_coupled_identical),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
