/* KV cache operations on the real model: rollback by truncate, commit of chosen rows (in the
 * extend and afterwards by kv_keep), sibling tokens that see only the cache, memory accounting,
 * and refusal of bad input with nothing changed. Equalities are bitwise: they follow from batch
 * invariance, so any stale or misplaced cache row shows up. */
#include "rt_test_util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

enum { NA = 40 };

static specd_model *model;
static int32_t V;
static int32_t A[NA];

static int setup(void **state) {
    (void)state;
    model = fixture_model_open();
    V = specd_model_get_info(model)->n_vocab;
    for (int i = 0; i < NA; i++)
        A[i] = (int32_t)((i * 7919 + 13) % V);
    return 0;
}
static int teardown(void **state) {
    (void)state;
    specd_model_destroy(model);
    return 0;
}

static void extend(specd_context *c, const int32_t *t, int n, float *last_logits) {
    specd_error err;
    int32_t last = n - 1;
    specd_seq_batch s = {.seq = 0, .n_tokens = n, .tokens = t};
    specd_extend_out o = {.n_rows = last_logits ? 1 : 0, .rows = &last, .logits = last_logits};
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
}

static void test_truncate_rolls_back(void **state) {
    (void)state;
    specd_context *c = rt_test_context(model, 1, 256, 64, 2);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    int32_t junk[10] = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14}, cont[3] = {100, 200, 300};
    extend(c, A, NA, NULL);
    extend(c, junk, 10, NULL);
    assert_int_equal(specd_context_kv_len(c, 0), NA + 10);
    specd_error err;
    assert_int_equal(specd_context_kv_truncate(c, 0, NA, &err), SPECD_OK);
    extend(c, cont, 3, a);
    specd_context *fresh = rt_test_context(model, 1, 256, 64, 1);
    extend(fresh, A, NA, NULL);
    extend(fresh, cont, 3, b);
    assert_memory_equal(a, b, sizeof(float) * V);
    free(a);
    free(b);
    specd_context_destroy(c);
    specd_context_destroy(fresh);
}

static void test_commit_mask_and_keep(void **state) {
    (void)state;
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V),
          *d = malloc(sizeof(float) * V);
    specd_error err;
    /* extend [x, m1, m2] committing only x, then y: same as plain A x y */
    specd_context *c = rt_test_context(model, 1, 256, 64, 2);
    extend(c, A, NA, NULL);
    int32_t xm[3] = {42, 43, 44};
    uint8_t commit[3] = {1, 0, 0};
    specd_seq_batch s = {.seq = 0, .n_tokens = 3, .tokens = xm, .commit = commit};
    assert_int_equal(specd_context_extend(c, &s, 1, NULL, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_len(c, 0), NA + 1);
    assert_int_equal(specd_context_decode(c, 0, 77, a, &err), SPECD_OK);
    specd_context *f = rt_test_context(model, 1, 256, 64, 1);
    extend(f, A, NA, NULL);
    extend(f, xm, 1, NULL);
    assert_int_equal(specd_context_decode(f, 0, 77, b, &err), SPECD_OK);
    assert_memory_equal(a, b, sizeof(float) * V);

    /* commit {1,0,1} inside the extend == extend all then kv_keep the same rows */
    uint8_t c101[3] = {1, 0, 1};
    assert_int_equal(specd_context_kv_truncate(c, 0, NA, &err), SPECD_OK);
    s.commit = c101;
    assert_int_equal(specd_context_extend(c, &s, 1, NULL, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_len(c, 0), NA + 2);
    assert_int_equal(specd_context_decode(c, 0, 77, a, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_truncate(f, 0, NA, &err), SPECD_OK);
    s.commit = NULL;
    assert_int_equal(specd_context_extend(f, &s, 1, NULL, &err), SPECD_OK);
    int32_t keep[2] = {NA, NA + 2};
    assert_int_equal(specd_context_kv_keep(f, 0, NA, 2, keep, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_len(f, 0), NA + 2);
    assert_int_equal(specd_context_decode(f, 0, 77, b, &err), SPECD_OK);
    assert_memory_equal(a, b, sizeof(float) * V);
    /* and differs from keeping all three (the dropped row really is gone) */
    assert_int_equal(specd_context_kv_truncate(f, 0, NA, &err), SPECD_OK);
    assert_int_equal(specd_context_extend(f, &s, 1, NULL, &err), SPECD_OK);
    assert_int_equal(specd_context_decode(f, 0, 77, d, &err), SPECD_OK);
    assert_memory_not_equal(a, d, sizeof(float) * V);
    free(a);
    free(b);
    free(d);
    specd_context_destroy(c);
    specd_context_destroy(f);
}

/* Two candidates for the same position, each seeing only the cache and itself (a tree of width 2):
 * each equals decoding it alone. */
static void test_siblings_by_visibility(void **state) {
    (void)state;
    specd_error err;
    specd_context *c = rt_test_context(model, 1, 256, 64, 2);
    extend(c, A, NA, NULL);
    int32_t t[2] = {500, 600}, pos[2] = {NA, NA};
    const int w = NA + 2;
    uint8_t vis[2 * (NA + 2)];
    memset(vis, 1, sizeof vis);
    vis[0 * w + NA + 1] = 0; /* token 0 does not see token 1 */
    vis[1 * w + NA] = 0;     /* token 1 does not see token 0 */
    float *lg = malloc(sizeof(float) * 2 * V), *b = malloc(sizeof(float) * V);
    uint8_t commit[2] = {0, 0};
    specd_seq_batch s = {
        .seq = 0, .n_tokens = 2, .tokens = t, .pos = pos, .visible = vis, .commit = commit};
    specd_extend_out o = {.n_rows = 2, .logits = lg};
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
    assert_int_equal(specd_context_kv_len(c, 0), NA);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(specd_context_decode(c, 0, t[k], b, &err), SPECD_OK);
        assert_memory_equal(lg + (size_t)k * V, b, sizeof(float) * V);
        assert_int_equal(specd_context_kv_truncate(c, 0, NA, &err), SPECD_OK);
    }
    free(lg);
    free(b);
    specd_context_destroy(c);
}

static void test_memory_reported(void **state) {
    (void)state;
    const specd_model_info *in = specd_model_get_info(model);
    specd_context *c = rt_test_context(model, 3, 100, 8, 1);
    size_t want = (size_t)3 * in->n_layer * 2 * 100 * in->n_head_kv * in->head_dim * 2;
    assert_int_equal(specd_context_kv_bytes(c), want);
    assert_true(specd_context_memory_bytes(c) > want);
    specd_context_destroy(c);
}

typedef struct bad_case {
    specd_seq_batch s;
    const specd_extend_out *o;
    specd_status want;
    const char *what;
} bad_case;

static void test_bad_input_changes_nothing(void **state) {
    (void)state;
    specd_context *c = rt_test_context(model, 2, 64, 16, 2);
    extend(c, A, 10, NULL);
    float *lg = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++)
        lg[i] = -7.0f;
    int32_t ok_tok[2] = {1, 2}, bad_tok[2] = {1, V}, row = 0, rows2[2] = {1, 1};
    specd_error err;
    specd_extend_out o = {.n_rows = 1, .rows = &row, .logits = lg};
    bad_case cases[8];
    uint8_t empty_vis[2 * 64] = {0};
    float nan_gate[2] = {0.0f, NAN}, one_gate[2] = {1.0f, 0.0f};
    specd_extend_out dup = {.n_rows = 2, .rows = rows2, .logits = lg};
    specd_extend_out far = {.n_rows = 1, .rows = (int32_t[]){2}, .logits = lg};
    int32_t many[60] = {0};
    cases[0] =
        (bad_case){{.seq = 2, .n_tokens = 2, .tokens = ok_tok}, &o, SPECD_E_INVALID_ARG, "seq"};
    cases[1] =
        (bad_case){{.seq = 0, .n_tokens = 2, .tokens = bad_tok}, &o, SPECD_E_INVALID_ARG, "token"};
    cases[2] = (bad_case){{.seq = 0, .n_tokens = 2, .tokens = ok_tok, .visible = empty_vis},
                          &o,
                          SPECD_E_INVALID_ARG,
                          "sees no"};
    cases[3] = (bad_case){{.seq = 0, .n_tokens = 2, .tokens = ok_tok, .lora_gate = nan_gate},
                          &o,
                          SPECD_E_NUMERIC,
                          "finite"};
    cases[4] = (bad_case){{.seq = 0, .n_tokens = 2, .tokens = ok_tok, .lora_gate = one_gate},
                          &o,
                          SPECD_E_STATE,
                          "adapter"};
    cases[5] = (bad_case){
        {.seq = 0, .n_tokens = 2, .tokens = ok_tok}, &dup, SPECD_E_INVALID_ARG, "repeated"};
    cases[6] = (bad_case){
        {.seq = 0, .n_tokens = 2, .tokens = ok_tok}, &far, SPECD_E_INVALID_ARG, "out of range"};
    cases[7] =
        (bad_case){{.seq = 0, .n_tokens = 16, .tokens = many}, &o, SPECD_E_INVALID_ARG, "n_ctx"};
    extend(c, A + 10, 16, NULL);
    extend(c, A + 26, 14, NULL);
    extend(c, A, 10, NULL); /* kv_len 50 of 64: 16 more do not fit */
    for (int k = 0; k < 8; k++) {
        assert_int_equal(specd_context_extend(c, &cases[k].s, 1, cases[k].o, &err), cases[k].want);
        if (!strstr(err.message, cases[k].what)) {
            fprintf(stderr, "case %d: message '%s' lacks '%s'\n", k, err.message, cases[k].what);
            fail();
        }
        assert_int_equal(specd_context_kv_len(c, 0), 50);
        assert_int_equal(specd_context_kv_len(c, 1), 0);
        for (int i = 0; i < V; i++)
            assert_true(lg[i] == -7.0f);
    }
    /* the same sequence twice in one extend */
    specd_seq_batch two[2] = {{.seq = 0, .n_tokens = 1, .tokens = ok_tok},
                              {.seq = 0, .n_tokens = 1, .tokens = ok_tok}};
    assert_int_equal(specd_context_extend(c, two, 2, NULL, &err), SPECD_E_INVALID_ARG);
    /* more than n_batch */
    specd_seq_batch big = {.seq = 1, .n_tokens = 17, .tokens = many};
    assert_int_equal(specd_context_extend(c, &big, 1, NULL, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_context_kv_truncate(c, 0, 51, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_context_kv_truncate(c, 5, 0, &err), SPECD_E_INVALID_ARG);
    int32_t desc[2] = {45, 44};
    assert_int_equal(specd_context_kv_keep(c, 0, 40, 2, desc, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_context_kv_len(c, 0), 50);
    free(lg);
    specd_context_destroy(c);
}

static void test_bad_model_file(void **state) {
    (void)state;
    specd_model *m = NULL;
    specd_error err;
    assert_int_not_equal(specd_model_create("/nonexistent/model.gguf", &m, &err), SPECD_OK);
    assert_null(m);
    char path[] = "/tmp/specd_rt_badXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "GGUF\3\0\0\0garbage", 15), 15);
    close(fd);
    assert_int_equal(specd_model_create(path, &m, &err), SPECD_E_FORMAT);
    assert_null(m);
    unlink(path);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_truncate_rolls_back),
        cmocka_unit_test(test_commit_mask_and_keep),
        cmocka_unit_test(test_siblings_by_visibility),
        cmocka_unit_test(test_memory_reported),
        cmocka_unit_test(test_bad_input_changes_nothing),
        cmocka_unit_test(test_bad_model_file),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
