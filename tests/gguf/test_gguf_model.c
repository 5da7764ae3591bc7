/* GGUF reader on the real default model: the facts its model card states, read back, and the
 * tensors' bytes equal to the file's (ctest runs it with the file read into huge pages, the
 * default, and mapped: SPECD_HUGE_PAGES=0). */
#include "test_main.h"

#include "kernels/cpu/dtype.h"
#include "specd/gguf.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static specd_gguf *model;

static int open_model(void **state) {
    (void)state;
    specd_error err;
    if (specd_gguf_create(specd_test_model_path(), &model, &err) != SPECD_OK) {
        fprintf(stderr, "%s\n", err.message);
        return -1;
    }
    return 0;
}

static int close_model(void **state) {
    (void)state;
    specd_gguf_destroy(model);
    return 0;
}

static uint32_t u32(const char *key) {
    uint32_t v = 0;
    specd_error err;
    assert_int_equal(specd_gguf_get_u32(model, key, &v, &err), SPECD_OK);
    return v;
}

static void expect_str(const char *key, const char *want) {
    specd_gguf_str s;
    specd_error err;
    assert_int_equal(specd_gguf_get_str(model, key, &s, &err), SPECD_OK);
    assert_int_equal(s.len, strlen(want));
    assert_memory_equal(s.ptr, want, s.len);
}

static void test_hyperparameters(void **state) {
    (void)state;
    assert_int_equal(specd_gguf_version(model), 3);
    expect_str("general.architecture", "llama");
    assert_int_equal(u32("llama.block_count"), 30);
    assert_int_equal(u32("llama.embedding_length"), 576);
    assert_int_equal(u32("llama.feed_forward_length"), 1536);
    assert_int_equal(u32("llama.attention.head_count"), 9);
    assert_int_equal(u32("llama.attention.head_count_kv"), 3);
    assert_int_equal(u32("llama.context_length"), 8192);
    float f;
    specd_error err;
    assert_int_equal(specd_gguf_get_f32(model, "llama.rope.freq_base", &f, &err), SPECD_OK);
    assert_true(f == 100000.0f);
    assert_int_equal(specd_gguf_get_f32(model, "llama.attention.layer_norm_rms_epsilon", &f, &err),
                     SPECD_OK);
    assert_true(f == 1e-5f);
}

static void test_tokenizer_metadata(void **state) {
    (void)state;
    expect_str("tokenizer.ggml.model", "gpt2");
    expect_str("tokenizer.ggml.pre", "smollm");
    specd_gguf_type et;
    uint64_t n;
    specd_error err;
    assert_int_equal(specd_gguf_get_array(model, "tokenizer.ggml.tokens", &et, &n, NULL, &err),
                     SPECD_OK);
    assert_int_equal(et, SPECD_GGUF_STRING);
    assert_int_equal(n, 49152);
    assert_int_equal(specd_gguf_get_array(model, "tokenizer.ggml.merges", &et, &n, NULL, &err),
                     SPECD_OK);
    assert_int_equal(n, 48900);
    assert_int_equal(u32("tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(u32("tokenizer.ggml.eos_token_id"), 2);
    specd_gguf_str s;
    assert_int_equal(specd_gguf_get_array_str(model, "tokenizer.ggml.tokens", 1, &s, &err),
                     SPECD_OK);
    assert_int_equal(s.len, strlen("<|im_start|>"));
    assert_memory_equal(s.ptr, "<|im_start|>", s.len);
    int add_bos = 1;
    assert_int_equal(specd_gguf_get_bool(model, "tokenizer.ggml.add_bos_token", &add_bos, &err),
                     SPECD_OK);
    assert_int_equal(add_bos, 0);
    assert_int_equal(specd_gguf_get_str(model, "tokenizer.chat_template", &s, &err), SPECD_OK);
    assert_non_null(memmem(s.ptr, s.len, "<|im_start|>", 12));
}

static void test_tensors(void **state) {
    (void)state;
    /* token_embd + 9 per block (2 norms, q k v o, gate up down); output tied */
    assert_int_equal(specd_gguf_tensor_count(model), 1 + 30 * 9 + 1);
    const specd_gguf_tensor *t = specd_gguf_tensor_find(model, "token_embd.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SPECD_DTYPE_Q8_0);
    assert_int_equal(t->ne[0], 576);
    assert_int_equal(t->ne[1], 49152);
    assert_int_equal(t->n_bytes, 576 / 32 * 34 * 49152);
    assert_null(specd_gguf_tensor_find(model, "output.weight"));
    t = specd_gguf_tensor_find(model, "blk.29.ffn_down.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SPECD_DTYPE_Q4_1);
    assert_int_equal(t->ne[0], 1536);
    assert_int_equal(t->ne[1], 576);
    t = specd_gguf_tensor_find(model, "output_norm.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SPECD_DTYPE_F32);
    /* every tensor's data is aligned and a whole number of rows */
    for (int64_t i = 0; i < specd_gguf_tensor_count(model); i++) {
        t = specd_gguf_tensor_at(model, i);
        assert_int_equal((uintptr_t)t->data % specd_gguf_alignment(model), 0);
        assert_int_equal(t->n_bytes % specd_dtype_row_bytes(t->type, t->ne[0]), 0);
    }
}

/* Every tensor's bytes as the reader serves them equal the file's: a reader over the file's bytes
 * read with stdio is the reference. */
static void test_tensor_bytes_are_the_files(void **state) {
    (void)state;
    FILE *f = fopen(specd_test_model_path(), "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    const long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    uint8_t *bytes = malloc((size_t)n);
    assert_non_null(bytes);
    assert_int_equal(fread(bytes, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    specd_gguf *ref;
    specd_error err;
    assert_int_equal(specd_gguf_create_from_memory(bytes, (size_t)n, &ref, &err), SPECD_OK);
    assert_int_equal(specd_gguf_tensor_count(ref), specd_gguf_tensor_count(model));
    for (int64_t i = 0; i < specd_gguf_tensor_count(model); i++) {
        const specd_gguf_tensor *a = specd_gguf_tensor_at(model, i), *b = specd_gguf_tensor_at(ref, i);
        assert_int_equal(a->n_bytes, b->n_bytes);
        assert_memory_equal(a->data, b->data, a->n_bytes);
    }
    specd_gguf_destroy(ref);
    free(bytes);
}

int main(void) {
    if (!specd_test_model_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hyperparameters),
        cmocka_unit_test(test_tokenizer_metadata),
        cmocka_unit_test(test_tensors),
        cmocka_unit_test(test_tensor_bytes_are_the_files),
    };
    return cmocka_run_group_tests(tests, open_model, close_model);
}
