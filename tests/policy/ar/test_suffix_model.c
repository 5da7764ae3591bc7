/* Policy `suffix` on the real model: token-identical to plain decoding under greedy and coupled
 * (T 0.8) verification, and the global cache pays on a repeated prompt: the spec's second run of
 * a prompt accepts more drafts than its first, since the first run's tokens are in the cache (the
 * sequence's own trie alone would propose exactly what it did the first time). */
#include "test_main.h"

#include "fixture_model.h"

#include "specd/spec_runtime.h"

#include <string.h>

enum { N_GEN = 32, MAX_PROMPT = 256, N_PROMPTS = 2 };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static specd_context *ctx;
static int32_t greedy_plain[N_GEN]; /* prompt 0's plain greedy output, made once */
static int have_greedy_plain;

static specd_spec *new_spec(void) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.max_draft = 8;
    sp.target = model;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) fail_msg("spec: %s", err.message);
    return spec;
}

static specd_seq_params seq_params(float temperature) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = "suffix";
    p.rule = temperature == 0.0f ? SPECD_ACCEPT_GREEDY : SPECD_ACCEPT_COUPLED;
    p.sampling.temperature = temperature;
    p.seed = 99;
    p.max_tokens = N_GEN;
    p.adaptive = 0; /* every step drafts what the policy proposes */
    return p;
}

static void same_as_plain(const int32_t *got, const int32_t *plain, const char *what) {
    for (int i = 0; i < N_GEN; i++)
        if (got[i] != plain[i])
            fail_msg("suffix %s differs from plain decoding at token %d (%d vs %d)", what, i,
                     got[i], plain[i]);
}

static void identical(float temperature) {
    specd_spec *spec = new_spec(); /* one spec: the second prompt also reads the first's */
    const specd_seq_params p = seq_params(temperature);
    int64_t drafted = 0;
    for (int q = 0; q < N_PROMPTS; q++) {
        int32_t plain[N_GEN], got[N_GEN];
        specd_seq_stats st;
        fixture_plain_output(ctx, prompts[q], n_prompts[q], temperature, p.seed, N_GEN, plain);
        fixture_run_seq(spec, ctx, prompts[q], n_prompts[q], &p, got, &st);
        if (q == 0 && temperature == 0.0f) {
            memcpy(greedy_plain, plain, sizeof plain);
            have_greedy_plain = 1;
        }
        char what[64];
        snprintf(what, sizeof what, "T=%.1f prompt %d", (double)temperature, q);
        same_as_plain(got, plain, what);
        assert_false(st.lossy);
        drafted += st.n_draft_tokens;
    }
    if (drafted == 0) fail_msg("suffix never drafted at T=%.1f: the identity says nothing",
                               (double)temperature);
    specd_spec_destroy(spec);
}

static void test_greedy_identical(void **s) {
    (void)s;
    identical(0.0f);
}

static void test_coupled_identical(void **s) {
    (void)s;
    identical(0.8f);
}

static void test_repeated_prompt_hits_the_cache(void **s) {
    (void)s;
    specd_spec *spec = new_spec();
    const specd_seq_params p = seq_params(0.0f);
    int32_t first[N_GEN], again[N_GEN];
    specd_seq_stats st1, st2;
    if (!have_greedy_plain)
        fixture_plain_output(ctx, prompts[0], n_prompts[0], 0.0f, p.seed, N_GEN, greedy_plain);
    const int32_t *plain = greedy_plain;
    fixture_run_seq(spec, ctx, prompts[0], n_prompts[0], &p, first, &st1);
    fixture_run_seq(spec, ctx, prompts[0], n_prompts[0], &p, again, &st2);
    same_as_plain(first, plain, "first run");
    same_as_plain(again, plain, "second run");
    fprintf(stderr, "suffix, same prompt twice: accepted %lld of %lld, then %lld of %lld; %lld "
            "then %lld steps\n", (long long)st1.n_accepted, (long long)st1.n_draft_tokens,
            (long long)st2.n_accepted, (long long)st2.n_draft_tokens, (long long)st1.n_steps,
            (long long)st2.n_steps);
    assert_true(st2.n_accepted > st1.n_accepted);
    assert_true(st2.n_steps < st1.n_steps);
    specd_spec_destroy(spec);
}

int main(void) {
    model = fixture_model_open();
    ctx = fixture_context(model, 1, 512, 64);
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_coupled_identical),
        cmocka_unit_test(test_repeated_prompt_hits_the_cache),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fixture_close(model, ctx);
    return rc;
}
