/* The model fixture of the tests (fixture_model.h). */
#include "fixture_model.h"

#include "golden_prompts.h"
#include "test_main.h"

#include "specd/spec_runtime.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

specd_model *fixture_model_open(void) {
    const char *path = specd_test_model_path();
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) {
        fprintf(stderr, "no model at SPECD_TEST_MODEL (%s): skipped\n", path ? path : "unset");
        exit(SPECD_TEST_SKIP);
    }
    fclose(f);
    specd_model *m = NULL;
    specd_error err;
    if (specd_model_create(path, &m, &err) != SPECD_OK) {
        fprintf(stderr, "model %s: %s\n", path, err.message);
        exit(1);
    }
    return m;
}

specd_context *fixture_context(const specd_model *m, int32_t n_seq, int32_t n_ctx,
                               int32_t n_batch) {
    specd_context_params p = specd_context_default_params();
    p.n_seq = n_seq;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    specd_context *c = NULL;
    specd_error err;
    if (specd_context_create(m, &p, &c, &err) != SPECD_OK) {
        fprintf(stderr, "context: %s\n", err.message);
        exit(1);
    }
    return c;
}

void fixture_prefill(specd_context *ctx, int32_t seq, const int32_t *tokens, int64_t n) {
    specd_error err;
    if (specd_context_kv_truncate(ctx, seq, 0, &err) != SPECD_OK)
        fail_msg("prefill seq %d: %s", seq, err.message);
    const int32_t chunk = specd_context_n_batch(ctx);
    for (int64_t i = 0; i < n; i += chunk) {
        int32_t m = n - i < chunk ? (int32_t)(n - i) : chunk;
        specd_seq_batch b = {.seq = seq, .n_tokens = m, .tokens = tokens + i};
        if (specd_context_extend(ctx, &b, 1, NULL, &err) != SPECD_OK)
            fail_msg("prefill seq %d: %s", seq, err.message);
    }
}

void fixture_run_layout(specd_context *ctx, int32_t seq, const specd_step_layout *l,
                        float *logits) {
    specd_error err;
    if (specd_context_set_lora(ctx, l->lora, &err) != SPECD_OK)
        fail_msg("layout's adapter: %s", err.message);
    specd_seq_batch b = specd_step_seq_batch(l, seq);
    specd_extend_out o = {.n_rows = l->n_rows, .rows = l->rows, .logits = logits};
    specd_status st = specd_context_extend(ctx, &b, 1, &o, &err);
    /* the adapter is the policy's: the context must not keep it past the step (a later case may
     * have destroyed the policy) */
    specd_context_set_lora(ctx, NULL, NULL);
    if (st != SPECD_OK) fail_msg("layout's extend: %s", err.message);
}

void fixture_run_seq(specd_spec *spec, specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                     const specd_seq_params *params, int32_t *out, specd_seq_stats *stats) {
    const char *policy = params->policy_ops ? params->policy_ops->name : params->policy;
    const char *opts = params->policy_options ? params->policy_options : "";
    specd_error err;
    if (specd_spec_seq_open(spec, 0, prompt, n_prompt, params, &err) != SPECD_OK)
        fail_msg("open %s %s: %s", policy ? policy : "none", opts, err.message);
    specd_run_stats rs;
    if (specd_spec_run(spec, 0, ctx, 0, NULL, NULL, &rs, &err) != SPECD_OK)
        fail_msg("run %s %s: %s", policy ? policy : "none", opts, err.message);
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    assert_int_equal(n, params->max_tokens);
    memcpy(out, toks, (size_t)n * sizeof(int32_t));
    if (stats) assert_int_equal(specd_spec_seq_stats(spec, 0, stats, &err), SPECD_OK);
    specd_spec_seq_close(spec, 0);
}

void fixture_plain_output(specd_context *ctx, const int32_t *prompt, int64_t n_prompt,
                          float temperature, uint64_t seed, int32_t n_gen, int32_t *out) {
    const specd_model *m = specd_context_model(ctx);
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = specd_model_get_info(m)->n_vocab;
    sp.target = m;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) fail_msg("spec: %s", err.message);
    specd_seq_params params = specd_seq_default_params();
    params.policy = "none";
    params.sampling.temperature = temperature;
    params.seed = seed;
    params.max_tokens = n_gen;
    params.adaptive = 0;
    fixture_run_seq(spec, ctx, prompt, n_prompt, &params, out, NULL);
    specd_spec_destroy(spec);
}

void fixture_golden_prompts(int n, int max_len, int32_t *ids, int64_t *lens) {
    if (specd_golden_prompts_read(getenv("SPECD_SOURCE_DIR"), n, max_len, ids, lens) != 0) {
        fprintf(stderr, "golden prompts missing (SPECD_SOURCE_DIR)\n");
        exit(1);
    }
}

void fixture_source_path(const char *rel, char *out, size_t size) {
    const char *src = getenv("SPECD_SOURCE_DIR");
    if (!src || snprintf(out, size, "%s/%s", src, rel) >= (int)size) {
        fprintf(stderr, "no source directory for %s (SPECD_SOURCE_DIR)\n", rel);
        exit(1);
    }
}

void fixture_close(specd_model *m, specd_context *ctx) {
    specd_context_destroy(ctx);
    specd_model_destroy(m);
}
