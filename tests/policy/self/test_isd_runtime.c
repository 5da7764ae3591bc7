/* ISD and R-ISD on the real model (paper 000 section 3.2, Appendix G).
 *
 * Identity: under greedy and coupled sampling, plain decoding, ISD without an adapter and R-ISD
 * with a random LoRA adapter emit the same tokens, because the clean rows that decide every token
 * run on base weights and never attend to a mask row. The same random adapter applied to every
 * row (ISD with adapter=) must change the output: that shows the adapter is strong enough for
 * the identity check to fail, so it is the gate, not a harmless adapter, that keeps R-ISD exact.
 * Prompts are llama.cpp's token ids from tests/data. */
#include "test_main.h"

#include "fixture_model.h"

#include "isd_random_adapter.h"
#include "specd/isd.h"
#include "specd/spec_runtime.h"

#include <string.h>
#include <unistd.h>

enum { N_GEN = 16, MAX_PROMPT = 256, N_PROMPTS = 2 };
/* the prompts checked: both, or the first under the sanitizers (SPECD_TEST_PROMPTS) */
enum { N_RUN = SPECD_TEST_PROMPTS(N_PROMPTS) };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static specd_context *ctx;
static char adapter_dir[64];
static char opts_risd[256], opts_isd_lora[256];

static void generate(int p, const char *policy, const char *opts, float temperature,
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
    params.policy_options = opts;
    params.sampling.temperature = temperature;
    params.seed = 1234;
    params.max_tokens = N_GEN;
    /* the policies' own steps throughout: the guard's plain steps would hide what the adapter on
     * clean rows changes, and its choices depend on timing */
    params.adaptive = 0;
    fixture_run_seq(spec, ctx, prompts[p], n_prompts[p], &params, out, stats);
    specd_spec_destroy(spec);
}

static int differs(const int32_t *a, const int32_t *b) {
    for (int i = 0; i < N_GEN; i++)
        if (a[i] != b[i]) return 1;
    return 0;
}

static void check(float temperature) {
    int changed = 0;
    for (int p = 0; p < N_RUN; p++) {
        int32_t plain[N_GEN], isd[N_GEN], risd[N_GEN], risd4[N_GEN], lora_all[N_GEN];
        specd_seq_stats s_plain, s_isd, s_risd, s_risd4, s_all;
        generate(p, "none", NULL, temperature, plain, &s_plain);
        generate(p, "isd", "n=3", temperature, isd, &s_isd);
        generate(p, "risd", opts_risd, temperature, risd, &s_risd);
        generate(p, "risd", "n=4,propose=sample", temperature, risd4, &s_risd4);
        generate(p, "isd", opts_isd_lora, temperature, lora_all, &s_all);
        for (int i = 0; i < N_GEN; i++) {
            if (plain[i] != isd[i])
                fail_msg("T=%.2f prompt %d: isd differs at token %d (%d vs %d)", temperature, p,
                         i, isd[i], plain[i]);
            if (plain[i] != risd[i])
                fail_msg("T=%.2f prompt %d: risd (random adapter) differs at token %d (%d vs %d)",
                         temperature, p, i, risd[i], plain[i]);
            if (plain[i] != risd4[i])
                fail_msg("T=%.2f prompt %d: risd n=4 sampled differs at token %d", temperature, p,
                         i);
        }
        /* the stride steps really verified proposals; every step emitted its accepted
         * proposals plus one token (the last step may be cut at max_tokens) */
        assert_true(s_isd.n_draft_tokens > 0 && s_risd.n_draft_tokens > 0);
        assert_true(s_isd.n_steps + s_isd.n_accepted >= N_GEN && s_isd.n_steps <= N_GEN);
        assert_int_equal(s_plain.n_steps, N_GEN);
        changed |= differs(plain, lora_all);
    }
    /* the adapter on clean rows changes what is emitted: the identity above is the gate's doing */
    assert_true(changed);
}

static void test_greedy_identical(void **s) {
    (void)s;
    check(0.0f);
}

static void test_coupled_identical(void **s) {
    (void)s;
    check(0.8f);
}

/* Bad options are refused with a message naming them. */
static void test_bad_options(void **s) {
    (void)s;
    static const char *const bad[] = {"n=1",          "n=8",      "propose=best",
                                      "mask=49152",   "mask=-2",  "adapter=/nonexistent/dir",
                                      "stride=3"};
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(model)->n_vocab;
    sp.max_draft = 6; /* steps may have 13 rows: n=8 needs 15 */
    sp.target = model;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        for (int r = 0; r < 2; r++) {
            specd_seq_params params = specd_seq_default_params();
            params.policy = r ? "risd" : "isd";
            params.policy_options = bad[i];
            specd_status st = specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params,
                                                  &err);
            if (st == SPECD_OK) fail_msg("%s accepted option %s", params.policy, bad[i]);
            assert_non_null(strstr(err.message, params.policy));
        }
    specd_spec_destroy(spec);
}

int main(void) {
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    model = fixture_model_open();
    ctx = fixture_context(model, 1, 256, 16);
    snprintf(adapter_dir, sizeof adapter_dir, "/tmp/specd_isd_lora_XXXXXX");
    if (!mkdtemp(adapter_dir) ||
        isd_write_random_adapter(specd_model_get_info(model), adapter_dir, 8, 0.1f, 7) != 0) {
        fprintf(stderr, "cannot write the random adapter\n");
        return 1;
    }
    snprintf(opts_risd, sizeof opts_risd, "n=3,adapter=%s", adapter_dir);
    snprintf(opts_isd_lora, sizeof opts_isd_lora, "n=3,adapter=%s", adapter_dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_coupled_identical),
        cmocka_unit_test(test_bad_options),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char p[256];
    snprintf(p, sizeof p, "%s/adapter_config.json", adapter_dir);
    if (!getenv("KEEP")) remove(p);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", adapter_dir);
    if (!getenv("KEEP")) remove(p);
    if (!getenv("KEEP")) rmdir(adapter_dir);
    fixture_close(model, ctx);
    return rc;
}
