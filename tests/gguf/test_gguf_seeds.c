/* Files written by another implementation (gguf-py's GGUFWriter, via
 * scripts/golden/make_gguf_seeds.py; they double as the fuzz seed corpus): every valid_* file is
 * read with the values it was written with, every trunc_* prefix is refused. */
#include "test_main.h"

#include "kernels/cpu/dtype.h"
#include "specd/gguf.h"

#include <dirent.h>
#include <string.h>

static const char *corpus_dir(char *buf, size_t cap) {
    const char *src = getenv("SPECD_SOURCE_DIR");
    assert_non_null(src);
    snprintf(buf, cap, "%s/tests/fuzz/corpus/fuzz_gguf", src);
    return buf;
}

static specd_gguf *open_seed(const char *name) {
    char dir[900], path[1024];
    snprintf(path, sizeof path, "%s/%s", corpus_dir(dir, sizeof dir), name);
    specd_gguf *g = NULL;
    specd_error err;
    if (specd_gguf_create(path, &g, &err) != SPECD_OK) fail_msg("%s", err.message);
    return g;
}

static void test_every_seed(void **state) {
    (void)state;
    char dir[900];
    DIR *d = opendir(corpus_dir(dir, sizeof dir));
    assert_non_null(d);
    int valid = 0, truncated = 0;
    for (struct dirent *e; (e = readdir(d));) {
        int is_valid = !strncmp(e->d_name, "valid_", 6),
            is_trunc = !strncmp(e->d_name, "trunc_", 6);
        if (!is_valid && !is_trunc) continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        specd_gguf *g = NULL;
        specd_error err;
        specd_status st = specd_gguf_create(path, &g, &err);
        if (is_valid && st != SPECD_OK) fail_msg("%s", err.message);
        if (is_trunc && st != SPECD_E_FORMAT) fail_msg("%s: %s", e->d_name, specd_status_name(st));
        valid += is_valid;
        truncated += is_trunc;
        specd_gguf_destroy(g);
    }
    closedir(d);
    assert_true(valid >= 4);
    assert_true(truncated >= 5);
}

static void test_every_value_type(void **state) {
    (void)state;
    specd_gguf *g = open_seed("valid_every_type.gguf");
    specd_error err;
    uint32_t u;
    int64_t v;
    float f;
    assert_int_equal(specd_gguf_get_u32(g, "t.u8", &u, &err), SPECD_OK);
    assert_int_equal(u, 200);
    assert_int_equal(specd_gguf_get_i64(g, "t.i8", &v, &err), SPECD_OK);
    assert_int_equal(v, -100);
    assert_int_equal(specd_gguf_get_u32(g, "t.u16", &u, &err), SPECD_OK);
    assert_int_equal(u, 60000);
    assert_int_equal(specd_gguf_get_i64(g, "t.i16", &v, &err), SPECD_OK);
    assert_int_equal(v, -30000);
    assert_int_equal(specd_gguf_get_u32(g, "t.u32", &u, &err), SPECD_OK);
    assert_int_equal(u, 4000000000u);
    assert_int_equal(specd_gguf_get_i64(g, "t.i32", &v, &err), SPECD_OK);
    assert_int_equal(v, -2000000000);
    assert_int_equal(specd_gguf_get_i64(g, "t.i64", &v, &err), SPECD_OK);
    assert_true(v == -(1ll << 62));
    assert_int_equal(specd_gguf_get_i64(g, "t.u64", &v, &err), SPECD_E_FORMAT); /* 2^63 + 5 */
    uint64_t u64;
    assert_int_equal(specd_gguf_get_u64(g, "t.u64", &u64, &err), SPECD_OK);
    assert_true(u64 == (1ull << 63) + 5);
    assert_int_equal(specd_gguf_get_u64(g, "t.i8", &u64, &err), SPECD_E_FORMAT);
    double f64;
    assert_int_equal(specd_gguf_get_f64(g, "t.f64", &f64, &err), SPECD_OK);
    assert_true(f64 == 2.5e300);
    assert_int_equal(specd_gguf_get_f64(g, "t.f32", &f64, &err), SPECD_OK);
    assert_true(f64 == 1.5);
    assert_int_equal(specd_gguf_get_f32(g, "t.f32", &f, &err), SPECD_OK);
    assert_true(f == 1.5f);
    assert_int_equal(specd_gguf_get_f32(g, "t.f64", &f, &err), SPECD_E_FORMAT); /* 2.5e300 */
    int b;
    assert_int_equal(specd_gguf_get_bool(g, "t.bool", &b, &err), SPECD_OK);
    assert_int_equal(b, 1);
    specd_gguf_str s;
    assert_int_equal(specd_gguf_get_str(g, "t.str", &s, &err), SPECD_OK);
    assert_int_equal(s.len, strlen("h\xc3\xa9llo \"quoted\"\n"));
    assert_memory_equal(s.ptr, "h\xc3\xa9llo \"quoted\"\n", s.len);
    specd_gguf_type et;
    uint64_t n;
    assert_int_equal(specd_gguf_get_array(g, "t.arr_str", &et, &n, NULL, &err), SPECD_OK);
    assert_int_equal(et, SPECD_GGUF_STRING);
    assert_int_equal(n, 3);
    assert_int_equal(specd_gguf_get_array_str(g, "t.arr_str", 1, &s, &err), SPECD_OK);
    assert_int_equal(s.len, 0);
    specd_gguf_destroy(g);
}

static void test_tensors_and_alignment(void **state) {
    (void)state;
    specd_gguf *g = open_seed("valid_llama.gguf");
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, "blk.0.attn_q.weight");
    assert_non_null(t);
    assert_int_equal(t->type, SPECD_DTYPE_Q4_1);
    assert_int_equal(t->ne[0], 32);
    assert_int_equal(t->ne[1], 4);
    t = specd_gguf_tensor_find(g, "blk.0.attn_v.weight");
    assert_int_equal(t->type, SPECD_DTYPE_F16);
    t = specd_gguf_tensor_find(g, "output_norm.weight");
    assert_int_equal(t->type, SPECD_DTYPE_BF16);
    specd_gguf_destroy(g);

    g = open_seed("valid_kquants_align64.gguf");
    assert_int_equal(specd_gguf_alignment(g), 64);
    t = specd_gguf_tensor_find(g, "q4k");
    assert_int_equal(t->type, SPECD_DTYPE_Q4_K);
    assert_int_equal(t->ne[0], 256);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(specd_gguf_tensor_find(g, "q6k")->type, SPECD_DTYPE_Q6_K);
    for (int64_t i = 0; i < specd_gguf_tensor_count(g); i++)
        assert_int_equal((uintptr_t)specd_gguf_tensor_at(g, i)->data % 64, 0);
    specd_gguf_destroy(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_seed),
        cmocka_unit_test(test_every_value_type),
        cmocka_unit_test(test_tensors_and_alignment),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
