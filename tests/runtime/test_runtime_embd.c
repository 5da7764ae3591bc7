/* Float-vector input rows (specd_seq_batch.embd) on the real model: a row fed its
 * own token's embedding as a vector gives bitwise the logits of the token id; another vector
 * changes that row and the rows after it (they attend to it), never the rows before; a non-finite
 * vector is refused. */
#include "rt_test_util.h"

#include "model/runtime/runtime_internal.h"

#include <math.h>

enum { N = 6 };

static void test_embd_rows(void **state) {
    (void)state;
    specd_model *m = fixture_model_open();
    const specd_model_info *in = specd_model_get_info(m);
    const size_t V = (size_t)in->n_vocab, E = (size_t)in->n_embd;
    specd_context *c = rt_test_context(m, 1, 64, N, 2);
    const int32_t toks[N] = {504, 2114, 314, 260, 3180, 30};
    float *ref = malloc(sizeof(float) * N * V), *got = malloc(sizeof(float) * N * V);
    float *embd = malloc(sizeof(float) * N * E);
    const rt_matrix *te = &m->tok_embd;
    const size_t row_bytes = specd_dtype_row_bytes(te->type, (int64_t)E);
    for (int i = 0; i < N; i++)
        te->traits->to_float((const char *)te->data + (size_t)toks[i] * row_bytes, embd + i * E,
                             (int64_t)E);
    specd_error err;
    specd_seq_batch s = {.seq = 0, .n_tokens = N, .tokens = toks};
    specd_extend_out o = {.n_rows = N, .logits = ref};
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);

    const uint8_t flags[N] = {0, 1, 0, 1, 1, 0};
    s.embd = embd;
    s.embd_rows = flags;
    o.logits = got;
    assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
    assert_memory_equal(ref, got, sizeof(float) * N * V);

    for (size_t x = 0; x < E; x++) embd[3 * E + x] += 0.05f;
    assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_OK);
    assert_memory_equal(ref, got, sizeof(float) * 3 * V); /* rows before it: unchanged */
    for (int r = 3; r < N; r++)
        assert_memory_not_equal(ref + r * V, got + r * V, sizeof(float) * V);

    embd[1 * E + 7] = NAN;
    assert_int_equal(specd_context_kv_truncate(c, 0, 0, &err), SPECD_OK);
    assert_int_equal(specd_context_extend(c, &s, 1, &o, &err), SPECD_E_NUMERIC);
    free(ref);
    free(got);
    free(embd);
    specd_context_destroy(c);
    specd_model_destroy(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_embd_rows)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
