/* Each supported architecture against llama.cpp on a tiny synthetic model (tests/data/arch_*.gguf
 * and goldens from scripts/golden/make_arch_golden.py: llama-cpp-python, F16 KV cache, flash
 * attention off, every token through a one-token decode). The real default model is a llama, so
 * these are the only tests of the qwen2 path (Q/K/V biases, NeoX RoPE) and the qwen3 path
 * (per-head Q/K RMSNorm, NeoX RoPE, head size 128, other than n_embd / n_head), and of an untied
 * output head (qwen2's file has output.weight; the others tie it to the token embedding).
 *
 * The expectation is the one test_runtime_golden holds the real model to, for the same reason:
 * every golden logit equal bit for bit and top-1 equal on every row. We run the sequence twice, as
 * one extend of all its tokens on one thread and as one-token decodes on three, and the two must
 * give identical bits (batch and thread invariance). Both in SPECD_NUMERICS_LLAMA, the mode that
 * promises llama.cpp's bits.
 *
 * Not vacuous: the file must hold the architecture's own tensors with values that matter (biases
 * far from zero, QK-norm weights far from one), the model must report the architecture, and the
 * golden rows must spread over more than a unit with a top-1 that changes with the input (a model
 * whose logits barely depend on its input would match nearly anything). Each of these paths was
 * also checked to fail the test when broken on purpose (biases skipped, RoPE in llama's pair
 * order, QK norm skipped): top-1 then agrees on only 7 to 28 of the 96 rows. */
#include "rt_test_util.h"

#include "kernels/cpu/dtype.h"

#include <math.h>
#include <unistd.h>

enum { MAX_TOK = 256, TOP_K = 32 };

typedef struct arch_case {
    const char *name;
    specd_arch arch;
    int32_t n_head, n_head_kv, head_dim;
    int tied;
    const char *own[3]; /* tensors only this architecture has (layer 0 and 1) */
    float own_ref;      /* their values' neutral point: 0 for biases, 1 for norm weights */
} arch_case;

static const arch_case cases[] = {
    {.name = "llama",
     .arch = SPECD_ARCH_LLAMA,
     .n_head = 2,
     .n_head_kv = 1,
     .head_dim = 64,
     .tied = 1},
    {.name = "qwen2",
     .arch = SPECD_ARCH_QWEN2,
     .n_head = 2,
     .n_head_kv = 1,
     .head_dim = 64,
     .tied = 0,
     .own = {"attn_q.bias", "attn_k.bias", "attn_v.bias"},
     .own_ref = 0.0f},
    {.name = "qwen3",
     .arch = SPECD_ARCH_QWEN3,
     .n_head = 4,
     .n_head_kv = 2,
     .head_dim = 128,
     .tied = 1,
     .own = {"attn_q_norm.weight", "attn_k_norm.weight"},
     .own_ref = 1.0f},
};

static specd_model *load(const char *arch) {
    const char *src = getenv("SPECD_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/arch_%s.gguf", src ? src : ".", arch);
    specd_model *m = NULL;
    specd_error err;
    if (specd_model_create(path, &m, &err) != SPECD_OK) {
        fprintf(stderr, "model %s: %s\n", path, err.message);
        fail();
    }
    return m;
}

/* The architecture's own tensors are in the file with values that change the output. */
static void check_own_tensors(const specd_model *m, const arch_case *ac) {
    const specd_gguf *g = specd_model_gguf(m);
    static const char *const all[] = {"attn_q.bias", "attn_k.bias", "attn_v.bias",
                                      "attn_q_norm.weight", "attn_k_norm.weight"};
    for (int l = 0; l < specd_model_get_info(m)->n_layer; l++) {
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
            int own = 0;
            for (int j = 0; j < 3; j++)
                own |= ac->own[j] && !strcmp(ac->own[j], all[i]);
            char nm[96];
            snprintf(nm, sizeof nm, "blk.%d.%s", l, all[i]);
            const specd_gguf_tensor *t = specd_gguf_tensor_find(g, nm);
            if (!own) {
                assert_null(t);
                continue;
            }
            assert_non_null(t);
            assert_int_equal(t->type, SPECD_DTYPE_F32);
            float far = 0.0f;
            for (int64_t k = 0; k < t->ne[0]; k++) {
                float v;
                memcpy(&v, (const char *)t->data + k * 4, sizeof v);
                float d = fabsf(v - ac->own_ref);
                if (d > far) far = d;
            }
            assert_true(far > 0.15f);
        }
    }
}

/* Logits of all n tokens: one extend on one thread, then one-token decodes on three. */
static void run(const specd_model *m, const int32_t *tokens, int n, float *extended,
                float *decoded) {
    const int32_t V = specd_model_get_info(m)->n_vocab;
    specd_error err;
    specd_context *c = rt_test_context_mode(m, 1, MAX_TOK, MAX_TOK, 1, SPECD_NUMERICS_LLAMA, 0);
    specd_seq_batch s = {.seq = 0, .n_tokens = n, .tokens = tokens};
    specd_extend_out o = {.n_rows = n, .logits = extended};
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
    specd_context_destroy(c);
    c = rt_test_context_mode(m, 1, MAX_TOK, MAX_TOK, 3, SPECD_NUMERICS_LLAMA, 0);
    for (int i = 0; i < n; i++)
        assert_int_equal(specd_context_decode(c, 0, tokens[i], decoded + (size_t)i * V, &err),
                         SPECD_OK);
    assert_int_equal(specd_context_kv_len(c, 0), n);
    specd_context_destroy(c);
}

static void check_arch(const arch_case *ac) {
    specd_model *m = load(ac->name);
    const specd_model_info *in = specd_model_get_info(m);
    assert_int_equal(in->arch, ac->arch);
    assert_int_equal(in->n_layer, 2);
    assert_int_equal(in->n_embd, 128);
    assert_int_equal(in->n_head, ac->n_head);
    assert_int_equal(in->n_head_kv, ac->n_head_kv);
    assert_int_equal(in->head_dim, ac->head_dim);
    assert_int_equal(in->n_vocab, 512);
    assert_int_equal(in->tied_output, ac->tied);
    check_own_tensors(m, ac);

    char golden[64];
    snprintf(golden, sizeof golden, "arch_%s_logits_golden.txt", ac->name);
    FILE *f = rt_test_data(golden);
    int version, top_k, n_vocab, k, n;
    assert_true(rt_expect_word(f, "specd-logits-golden"));
    assert_int_equal(fscanf(f, "%d top_k %d n_vocab %d", &version, &top_k, &n_vocab), 3);
    assert_int_equal(top_k, TOP_K);
    assert_int_equal(n_vocab, in->n_vocab);
    assert_true(rt_expect_word(f, "prompt"));
    assert_int_equal(fscanf(f, "%d %d", &k, &n), 2);
    assert_true(n >= 32 && n <= MAX_TOK);
    assert_true(rt_expect_word(f, "tokens"));
    int32_t tokens[MAX_TOK];
    for (int i = 0; i < n; i++)
        assert_int_equal(fscanf(f, "%d", &tokens[i]), 1);

    const size_t V = (size_t)in->n_vocab;
    float *extended = malloc(sizeof(float) * V * (size_t)n);
    float *decoded = malloc(sizeof(float) * V * (size_t)n);
    assert_non_null(extended);
    assert_non_null(decoded);
    run(m, tokens, n, extended, decoded);

    int invariant = 0, agree = 0, spread = 0;
    uint8_t *seen = calloc(V, 1);
    assert_non_null(seen);
    float max_delta = 0.0f;
    for (int i = 0; i < n; i++) {
        const float *row = extended + (size_t)i * V;
        invariant += !memcmp(row, decoded + (size_t)i * V, sizeof(float) * V);
        int pos;
        assert_true(rt_expect_word(f, "row"));
        assert_int_equal(fscanf(f, "%d", &pos), 1);
        assert_int_equal(pos, i);
        int32_t id0 = -1;
        float top = 0.0f, last = 0.0f;
        for (int j = 0; j < TOP_K; j++) {
            int id;
            float val;
            assert_int_equal(fscanf(f, "%d %f", &id, &val), 2);
            assert_true(id >= 0 && (size_t)id < V);
            if (j == 0) id0 = id, top = val;
            last = val;
            float d = fabsf(row[id] - val);
            if (!(d <= max_delta)) max_delta = d; /* NaN propagates into the failure */
        }
        spread += top - last > 1.0f;
        int32_t ours = rt_argmax(row, (int32_t)V);
        agree += ours == id0;
        seen[id0] = 1;
        if (ours != id0)
            fprintf(stderr, "%s row %d: top-1 %d (%.6f), llama.cpp %d (%.6f)\n", ac->name, i, ours,
                    (double)row[ours], id0, (double)row[id0]);
    }
    fprintf(stderr,
            "%s: %d rows, top-1 agrees on %d, max |delta| %.3g vs llama.cpp, extend == decode "
            "bitwise on %d\n",
            ac->name, n, agree, (double)max_delta, invariant);
    /* not degenerate: most rows spread, and the winner changes with the input */
    int distinct = 0;
    for (size_t v = 0; v < V; v++)
        distinct += seen[v];
    fprintf(stderr, "%s: top-32 spans over 1 logit on %d rows; %d distinct top-1 ids\n", ac->name,
            spread, distinct);
    assert_true(spread >= n - n / 10);
    assert_true(distinct >= n / 4);
    assert_int_equal(invariant, n);
    assert_int_equal(agree, n);
    assert_true(max_delta == 0.0f);
    fclose(f);
    free(extended);
    free(decoded);
    free(seen);
    specd_model_destroy(m);
}

/* The first occurrence of `find` in the file arch_<arch>.gguf, its bytes read into *buf. */
static size_t locate(const char *arch, const char *find, char **buf, size_t *size) {
    char name[64];
    snprintf(name, sizeof name, "arch_%s.gguf", arch);
    FILE *f = rt_test_data(name);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    *buf = malloc((size_t)n);
    assert_non_null(*buf);
    assert_int_equal(fread(*buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    const size_t len = strlen(find);
    for (size_t i = 0; i + len <= *size; i++)
        if (!memcmp(*buf + i, find, len)) return i;
    fail_msg("%s not in %s", find, name);
    return 0;
}

/* Loads the patched bytes from a temporary file: want status st with `needle` in the message. */
static void expect_refused(const char *buf, size_t size, specd_status st, const char *needle) {
    char path[] = "/tmp/specd_rt_archXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, size), (ssize_t)size);
    close(fd);
    specd_model *m = NULL;
    specd_error err;
    assert_int_equal(specd_model_create(path, &m, &err), st);
    assert_null(m);
    unlink(path);
    if (!strstr(err.message, needle)) fail_msg("message '%s' lacks '%s'", err.message, needle);
}

/* A qwen2 file without one of its biases, a qwen3 file without a QK-norm weight or with one of the
 * wrong size, and an unknown architecture are refused, naming what is wrong. */
static void test_bad_arch_files(void **state) {
    (void)state;
    char *buf;
    size_t size, at;
    at = locate("qwen2", "blk.1.attn_v.bias", &buf, &size);
    buf[at + strlen("blk.1.attn_v.bia")] = 'z';
    expect_refused(buf, size, SPECD_E_FORMAT, "blk.1.attn_v.bias is missing");
    free(buf);

    at = locate("qwen3", "blk.0.attn_k_norm.weight", &buf, &size);
    buf[at + strlen("blk.0.attn_k_norm.weigh")] = 'x';
    expect_refused(buf, size, SPECD_E_FORMAT, "blk.0.attn_k_norm.weight is missing");
    free(buf);

    /* tensor info: name, n_dims (u32), ne[0] (u64, little-endian) ...: 128 -> 64 */
    at = locate("qwen3", "blk.1.attn_q_norm.weight", &buf, &size);
    at += strlen("blk.1.attn_q_norm.weight") + 4;
    assert_int_equal((unsigned char)buf[at], 128);
    buf[at] = 64;
    expect_refused(buf, size, SPECD_E_FORMAT, "blk.1.attn_q_norm.weight");
    free(buf);

    /* general.architecture's value follows its key, type (u32) and length (u64) */
    at = locate("qwen2", "general.architecture", &buf, &size);
    at += strlen("general.architecture") + 4 + 8;
    assert_memory_equal(buf + at, "qwen2", 5);
    buf[at + 4] = '9';
    expect_refused(buf, size, SPECD_E_UNSUPPORTED, "qwen9");
    free(buf);
}

static void test_llama(void **state) {
    (void)state;
    check_arch(&cases[0]);
}

static void test_qwen2(void **state) {
    (void)state;
    check_arch(&cases[1]);
}

static void test_qwen3(void **state) {
    (void)state;
    check_arch(&cases[2]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_bad_arch_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
