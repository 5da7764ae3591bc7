/* R-ISD with an adapter that carries a trained mask embedding (specd_lora_mask_embedding;
 * tools/train/train_isd.py --train-mask-embedding), on the real model:
 *  - the policy feeds the vector as the input of exactly the step's mask rows (input_embd with
 *    its row flags), also when the host runs the target (the vector is then read from the
 *    adapter's directory without a model);
 *  - against the same LoRA weights without the vector, the mask rows' logits change and the
 *    clean row's are bitwise the same (clean rows never see a mask row), and R-ISD with it emits
 *    exactly what plain decoding emits (greedy and coupled): the vector only changes proposals;
 *  - a malformed one (wrong length, a NaN, the config flag without the tensor or the tensor
 *    without the flag) is refused by the loader and by the policy with a message that names it.
 * Prompts are llama.cpp's token ids from tests/data. */
#include "test_main.h"

#include "fixture_model.h"

#include "isd_random_adapter.h"
#include "specd/isd.h"
#include "specd/spec_runtime.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

enum { N_GEN = 16, MAX_PROMPT = 256, N_PROMPTS = 2, N_DIRS = 6 };
/* the prompts checked: both, or the first under the sanitizers (SPECD_TEST_PROMPTS) */
enum { N_RUN = SPECD_TEST_PROMPTS(N_PROMPTS) };

/* the adapters: the same LoRA weights with and without the vector, then malformed ones */
enum { PLAIN, MASKED, SHORT, NAN_ENTRY, FLAG_ONLY, TENSOR_ONLY };

static int32_t prompts[N_PROMPTS][MAX_PROMPT];
static int64_t n_prompts[N_PROMPTS];
static specd_model *model;
static const specd_model_info *info;
static specd_context *ctx;
static char dirs[N_DIRS][64];
static float *mask_vec; /* n_embd */

static specd_spec *make_spec(int with_target) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = info->n_vocab;
    sp.max_draft = 6;
    sp.target = with_target ? model : NULL;
    specd_spec *spec;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    return spec;
}

static void open_seq(specd_spec *spec, const char *opts, float temperature) {
    specd_seq_params params = specd_seq_default_params();
    params.policy = "risd";
    params.policy_options = opts;
    params.sampling.temperature = temperature;
    params.seed = 99;
    params.max_tokens = N_GEN;
    params.adaptive = 0; /* the policy's own steps, never the guard's plain ones */
    specd_error err;
    if (specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err) != SPECD_OK)
        fail_msg("open risd %s: %s", opts, err.message);
}

static void opts_for(int which, int n, char *out, size_t size) {
    snprintf(out, size, "n=%d,adapter=%s", n, dirs[which]);
}

/* The first step's layout feeds the vector on the mask rows and nothing on the clean row. */
static void check_layout(const specd_step_layout *lay, int n) {
    assert_int_equal(lay->n_tokens, n); /* propose step: pending + N - 1 masks */
    assert_non_null(lay->input_embd);
    assert_non_null(lay->input_embd_rows);
    for (int32_t i = 0; i < lay->n_tokens; i++) {
        assert_int_equal(lay->input_embd_rows[i] != 0, i >= 1);
        if (i >= 1)
            assert_memory_equal(lay->input_embd + (size_t)i * (size_t)info->n_embd, mask_vec,
                                sizeof(float) * (size_t)info->n_embd);
    }
}

/* One propose step of R-ISD (n = 3) on the model: rows [pending | MASK | MASK]. */
static void first_step_logits(int which, float *logits) {
    char opts[256];
    opts_for(which, 3, opts, sizeof opts);
    specd_spec *spec = make_spec(1);
    open_seq(spec, opts, 0.0f);
    specd_step_layout lay;
    specd_error err;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    if (which == MASKED)
        check_layout(&lay, 3);
    else
        assert_null(lay.input_embd);
    fixture_prefill(ctx, 0, prompts[0], n_prompts[0] - 1);
    fixture_run_layout(ctx, 0, &lay, logits);
    specd_context_set_lora(ctx, NULL, NULL);
    specd_spec_destroy(spec);
}

static void test_mask_rows_change_clean_rows_do_not(void **s) {
    (void)s;
    const size_t V = (size_t)info->n_vocab;
    float *a = malloc(sizeof(float) * 3 * V), *b = malloc(sizeof(float) * 3 * V);
    assert_non_null(a);
    assert_non_null(b);
    first_step_logits(PLAIN, a);
    first_step_logits(MASKED, b);
    assert_memory_equal(a, b, sizeof(float) * V); /* the pending (clean) row */
    for (int r = 1; r < 3; r++) {
        double d = 0.0;
        for (size_t v = 0; v < V; v++) d = fmax(d, fabs((double)a[r * V + v] - b[r * V + v]));
        if (!(d > 1e-2)) fail_msg("mask row %d: the vector changed its logits by only %g", r, d);
    }
    free(a);
    free(b);
}

/* A host that runs the target itself (no sp.target): the policy reads the vector from the
 * directory and still feeds it; the host loads the LoRA weights from lora_path. */
static void test_host_runs_target(void **s) {
    (void)s;
    char opts[256];
    opts_for(MASKED, 4, opts, sizeof opts);
    specd_spec *spec = make_spec(0);
    open_seq(spec, opts, 0.8f);
    specd_step_layout lay;
    specd_error err;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    check_layout(&lay, 4);
    assert_null(lay.lora);
    assert_non_null(lay.lora_path);
    assert_string_equal(lay.lora_path, dirs[MASKED]);
    specd_spec_destroy(spec);
}

static void generate(const char *policy, const char *opts, float temperature, int32_t *out,
                     specd_seq_stats *stats) {
    specd_spec *spec = make_spec(1);
    specd_seq_params params = specd_seq_default_params();
    params.policy = policy;
    params.policy_options = opts;
    params.sampling.temperature = temperature;
    params.seed = 1234;
    params.max_tokens = N_GEN;
    params.adaptive = 0;
    for (int p = 0; p < N_RUN; p++)
        fixture_run_seq(spec, ctx, prompts[p], n_prompts[p], &params, out + p * N_GEN,
                        stats ? &stats[p] : NULL);
    specd_spec_destroy(spec);
}

static void identical(float temperature) {
    int32_t plain[N_PROMPTS * N_GEN], risd3[N_PROMPTS * N_GEN], risd4[N_PROMPTS * N_GEN];
    specd_seq_stats st[N_PROMPTS];
    char o3[256], o4[256];
    opts_for(MASKED, 3, o3, sizeof o3);
    snprintf(o4, sizeof o4, "n=4,propose=sample,adapter=%s", dirs[MASKED]);
    generate("none", NULL, temperature, plain, NULL);
    generate("risd", o3, temperature, risd3, st);
    generate("risd", o4, temperature, risd4, NULL);
    for (int i = 0; i < N_RUN * N_GEN; i++) {
        if (plain[i] != risd3[i])
            fail_msg("T=%.2f: risd n=3 with a mask embedding differs at token %d (%d vs %d)",
                     temperature, i, risd3[i], plain[i]);
        if (plain[i] != risd4[i])
            fail_msg("T=%.2f: risd n=4 sampled with a mask embedding differs at token %d",
                     temperature, i);
    }
    for (int p = 0; p < N_RUN; p++) assert_true(st[p].n_draft_tokens > 0);
}

static void test_greedy_identical(void **s) {
    (void)s;
    identical(0.0f);
}

static void test_coupled_identical(void **s) {
    (void)s;
    identical(0.8f);
}

/* Each malformed adapter: the loader, the policy (both with and without a target) refuse it
 * and say why. */
static void test_malformed_refused(void **s) {
    (void)s;
    static const struct {
        int which;
        const char *why;
    } bad[] = {{SHORT, "length"},
               {NAN_ENTRY, "not finite"},
               {FLAG_ONLY, "no tensor mask_embedding"},
               {TENSOR_ONLY, "without \"specd_mask_embedding\""}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        specd_error err;
        specd_lora *lo = NULL;
        specd_status st = specd_lora_create(model, dirs[bad[i].which], &lo, &err);
        if (st == SPECD_OK) fail_msg("loader accepted %s", dirs[bad[i].which]);
        assert_null(lo);
        if (!strstr(err.message, bad[i].why) || !strstr(err.message, "mask_embedding"))
            fail_msg("loader on case %zu: '%s' does not say '%s'", i, err.message, bad[i].why);
        for (int with_target = 1; with_target >= 0; with_target--) {
            /* without a model the length cannot be checked: the host's load of lora_path does */
            if (!with_target && bad[i].which == SHORT) continue;
            char opts[256];
            opts_for(bad[i].which, 3, opts, sizeof opts);
            specd_spec *spec = make_spec(with_target);
            specd_seq_params params = specd_seq_default_params();
            params.policy = "risd";
            params.policy_options = opts;
            st = specd_spec_seq_open(spec, 0, prompts[0], n_prompts[0], &params, &err);
            if (st == SPECD_OK) fail_msg("risd opened with %s (target %d)", opts, with_target);
            if (!strstr(err.message, "risd") || !strstr(err.message, bad[i].why))
                fail_msg("risd on case %zu: '%s' does not say '%s'", i, err.message, bad[i].why);
            specd_spec_destroy(spec);
        }
    }
    /* the model-free reader reports the wrong length as it is, for the host to compare */
    int32_t n = 0;
    specd_error err;
    assert_int_equal(specd_lora_read_mask_embedding(dirs[SHORT], NULL, 0, &n, &err), SPECD_OK);
    assert_int_equal(n, info->n_embd - 1);
    assert_int_equal(specd_lora_read_mask_embedding(dirs[PLAIN], NULL, 0, &n, &err), SPECD_OK);
    assert_int_equal(n, 0);
    /* the accessor on the good one returns the vector as written */
    specd_lora *lo;
    assert_int_equal(specd_lora_create(model, dirs[MASKED], &lo, &err), SPECD_OK);
    const float *v = specd_lora_mask_embedding(lo, &n);
    assert_int_equal(n, info->n_embd);
    assert_memory_equal(v, mask_vec, sizeof(float) * (size_t)info->n_embd);
    specd_lora_destroy(lo);
    assert_null(specd_lora_mask_embedding(NULL, &n));
    assert_int_equal(n, 0);
}

static void remove_dir(const char *dir) {
    char p[512];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    remove(p);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    remove(p);
    rmdir(dir);
}

int main(void) {
    fixture_golden_prompts(N_PROMPTS, MAX_PROMPT, &prompts[0][0], n_prompts);
    model = fixture_model_open();
    info = specd_model_get_info(model);
    ctx = fixture_context(model, 1, 256, 16);
    /* a vector of the embeddings' scale (rows have norm ~3 over 576 entries), from a fixed LCG */
    const int32_t E = info->n_embd;
    mask_vec = malloc(sizeof(float) * (size_t)E);
    float *bad = malloc(sizeof(float) * (size_t)E);
    uint32_t x = 5;
    for (int32_t i = 0; i < E; i++) {
        x = x * 1664525u + 1013904223u;
        mask_vec[i] = 0.25f * (2.0f * (float)(x >> 8) / 16777216.0f - 1.0f);
    }
    memcpy(bad, mask_vec, sizeof(float) * (size_t)E);
    bad[5] = NAN;
    const struct {
        const float *v;
        int32_t n;
        int flag;
    } spec[N_DIRS] = {{NULL, 0, 0},     {mask_vec, E, 1}, {mask_vec, E - 1, 1},
                      {bad, E, 1},      {NULL, 0, 1},     {mask_vec, E, 0}};
    for (int i = 0; i < N_DIRS; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/tmp/specd_isd_mask_XXXXXX");
        /* the same seed: every adapter has the same LoRA weights */
        if (!mkdtemp(dirs[i]) || isd_write_random_adapter_mask(info, dirs[i], 8, 0.1f, 7, spec[i].v,
                                                               spec[i].n, spec[i].flag) != 0) {
            fprintf(stderr, "cannot write adapter %d\n", i);
            return 1;
        }
    }
    free(bad);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mask_rows_change_clean_rows_do_not),
        cmocka_unit_test(test_host_runs_target),
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_coupled_identical),
        cmocka_unit_test(test_malformed_refused),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (int i = 0; i < N_DIRS; i++)
        if (!getenv("KEEP")) remove_dir(dirs[i]);
    free(mask_vec);
    fixture_close(model, ctx);
    return rc;
}
