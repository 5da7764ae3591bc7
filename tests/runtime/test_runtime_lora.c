/* LoRA on the real model: adapters written here as PEFT files (adapter_config.json +
 * adapter_model.safetensors). Checks, bitwise: gate 0 equals the base model; a zero B equals the
 * base model; a non-zero adapter changes the output; gate g with alpha equals gate 2g with alpha/2
 * (the applied factor is gate * alpha / r); per-token gates in one extend equal separate runs.
 * And refusal with a clear message: shape mismatch, unknown module, corrupt safetensors (header
 * length, offsets, JSON), missing files. */
#include "rt_test_util.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

static specd_model *model;
static int32_t V;
static char dir[64];

static int setup(void **state) {
    (void)state;
    model = fixture_model_open();
    V = specd_model_get_info(model)->n_vocab;
    strcpy(dir, "/tmp/specd_loraXXXXXX");
    assert_non_null(mkdtemp(dir));
    return 0;
}
static int teardown(void **state) {
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    unlink(p);
    rmdir(dir);
    specd_model_destroy(model);
    return 0;
}

static void write_text(const char *name, const char *text) {
    char p[128];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void write_config(const char *modules, double alpha) {
    char cfg[512];
    snprintf(cfg, sizeof cfg,
             "{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": %g, \"target_modules\": [%s], "
             "\"fan_in_fan_out\": false}",
             alpha, modules);
    write_text("adapter_config.json", cfg);
}

typedef struct spec {
    const char *name;
    int64_t rows, cols;
    float fill; /* NAN = pseudo-random */
} spec;

/* Writes F32 tensors; header_len_override / offset_bump corrupt the file on purpose. */
static void write_st(const spec *s, int n, uint64_t header_len_override, int offset_bump) {
    char hdr[4096];
    size_t off = 0, pos = 0;
    pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = 0; i < n; i++) {
        size_t bytes = (size_t)(s[i].rows * s[i].cols) * 4;
        pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos,
                                ", \"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], "
                                "\"data_offsets\": [%zu, %zu]}",
                                s[i].name, (long long)s[i].rows, (long long)s[i].cols, off,
                                off + bytes + (size_t)(i == n - 1 ? offset_bump : 0));
        off += bytes;
    }
    pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos, "}");
    char p[128];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    uint64_t hl = header_len_override ? header_len_override : pos;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, pos, f);
    uint32_t rng = 7;
    for (int i = 0; i < n; i++)
        for (int64_t k = 0; k < s[i].rows * s[i].cols; k++) {
            rng = rng * 1664525u + 1013904223u;
            float v =
                isnan(s[i].fill) ? ((float)(rng >> 8) / 16777216.0f - 0.5f) * 0.2f : s[i].fill;
            fwrite(&v, 4, 1, f);
        }
    fclose(f);
}

#define QA "base_model.model.model.layers.3.self_attn.q_proj.lora_A.weight"
#define QB "base_model.model.model.layers.3.self_attn.q_proj.lora_B.weight"
#define DA "base_model.model.model.layers.10.mlp.down_proj.lora_A.weight"
#define DB "base_model.model.model.layers.10.mlp.down_proj.lora_B.weight"

static void run(specd_context *c, const specd_lora *lo, const float *gates, float *logits) {
    static const int32_t toks[6] = {1, 4093, 198, 19161, 253, 1890};
    specd_error err;
    assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
    assert_int_equal(specd_context_set_lora(c, lo, &err), SPECD_OK);
    specd_seq_batch s = {.seq = 0, .n_tokens = 6, .tokens = toks, .lora_gate = gates};
    specd_extend_out o = {.n_rows = 6, .logits = logits};
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
}

static specd_lora *load(specd_status want, const char *msg) {
    specd_lora *lo = NULL;
    specd_error err;
    specd_error_clear(&err);
    assert_int_equal(specd_lora_create(model, dir, &lo, &err), want);
    if (msg && !strstr(err.message, msg)) {
        fprintf(stderr, "message '%s' lacks '%s'\n", err.message, msg);
        fail();
    }
    return lo;
}

static void test_lora_math(void **state) {
    (void)state;
    const specd_model_info *in = specd_model_get_info(model);
    const int64_t E = in->n_embd, F = in->n_ff, NQ = (int64_t)in->n_head * in->head_dim;
    specd_context *c = rt_test_context(model, 1, 64, 16, 2);
    const size_t n = (size_t)6 * V;
    float *base = malloc(n * 4), *a = malloc(n * 4), *b = malloc(n * 4);
    float g0[6] = {0}, g1[6] = {1, 1, 1, 1, 1, 1}, g2[6] = {2, 2, 2, 2, 2, 2};
    run(c, NULL, NULL, base);

    write_config("\"q_proj\", \"down_proj\"", 8.0);
    spec zero_b[4] = {{QA, 4, E, NAN}, {QB, NQ, 4, 0.0f}, {DA, 4, F, NAN}, {DB, E, 4, 0.0f}};
    write_st(zero_b, 4, 0, 0);
    specd_lora *lo = load(SPECD_OK, NULL);
    assert_int_equal(specd_lora_rank(lo), 4);
    run(c, lo, g1, a);
    assert_memory_equal(a, base, n * 4); /* B = 0: no effect */
    specd_lora_destroy(lo);

    spec full[4] = {{QA, 4, E, NAN}, {QB, NQ, 4, NAN}, {DA, 4, F, NAN}, {DB, E, 4, NAN}};
    write_st(full, 4, 0, 0);
    lo = load(SPECD_OK, NULL);
    run(c, lo, g0, a);
    assert_memory_equal(a, base, n * 4); /* gate 0: the base model exactly */
    run(c, lo, g1, a);
    assert_memory_not_equal(a, base, n * 4);
    specd_lora_destroy(lo);
    write_config("\"q_proj\", \"down_proj\"", 4.0); /* half alpha, double gate: same factor */
    lo = load(SPECD_OK, NULL);
    run(c, lo, g2, b);
    assert_memory_equal(a, b, n * 4);
    /* per-token gates: tokens 0-2 plain, 3-5 adapted; each row as in the uniform runs only up to
     * the first adapted token (later rows attend to adapted K/V) */
    float mixed[6] = {0, 0, 0, 2, 2, 2};
    run(c, lo, mixed, b);
    assert_memory_equal(b, base, (size_t)3 * V * 4);
    assert_memory_not_equal(b + (size_t)3 * V, base + (size_t)3 * V, (size_t)V * 4);
    specd_lora_destroy(lo);
    specd_context_destroy(c);
    free(base);
    free(a);
    free(b);
}

static void test_bad_adapters(void **state) {
    (void)state;
    const specd_model_info *in = specd_model_get_info(model);
    const int64_t E = in->n_embd, NQ = (int64_t)in->n_head * in->head_dim;
    write_config("\"q_proj\"", 8.0);
    spec bad_shape[2] = {{QA, 4, E + 1, 0.1f}, {QB, NQ, 4, 0.1f}};
    write_st(bad_shape, 2, 0, 0);
    load(SPECD_E_MISMATCH, "shape");
    spec ok[2] = {{QA, 4, E, 0.1f}, {QB, NQ, 4, 0.1f}};
    write_config("\"q_proj\", \"lm_head\"", 8.0);
    write_st(ok, 2, 0, 0);
    load(SPECD_E_UNSUPPORTED, "unknown target module");
    write_config("\"k_proj\"", 8.0); /* weights for a module the config does not name */
    load(SPECD_E_UNSUPPORTED, "unknown module");
    write_config("\"q_proj\"", 8.0);
    write_st(ok, 1, 0, 0);
    load(SPECD_E_FORMAT, "without its pair");
    write_st(ok, 2, 1u << 20, 0);
    load(SPECD_E_FORMAT, "header length");
    write_st(ok, 2, 0, 4);
    load(SPECD_E_FORMAT, "data_offsets");
    write_st(ok, 2, 5, 0);
    load(SPECD_E_FORMAT, "json");
    write_text("adapter_config.json",
               "{\"r\": 4, \"lora_alpha\": 8, \"target_modules\": [\"q_proj\"");
    load(SPECD_E_FORMAT, "json");
    write_text("adapter_config.json", "{\"r\": 0, \"lora_alpha\": 8, \"target_modules\": []}");
    load(SPECD_E_FORMAT, "r missing");
    char p[128];
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    unlink(p);
    write_config("\"q_proj\"", 8.0);
    load(SPECD_E_IO, "cannot open");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lora_math),
        cmocka_unit_test(test_bad_adapters),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
