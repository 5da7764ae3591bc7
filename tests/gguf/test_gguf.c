/* GGUF reader on synthetic files: a valid file read back exactly, and each kind of corrupt or
 * hostile file refused with the right status and a message naming what is wrong. */
#include "test_main.h"

#include "gguf/gguf_builder.h"
#include "specd/gguf.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Offsets of fields in the file make_valid writes, so tests can corrupt them. */
typedef struct layout {
    size_t n_kv_at, tensors_at, data_at;
} layout;

static const float w_data[8] = {1, -2, 3.5f, 4, 0.25f, -6, 7, 8};

static void add_kvs(gguf_builder *b) {
    static const char *const toks[] = {"a", "bc", "<s>"};
    gb_kv_str(b, "general.architecture", "llama");
    gb_kv_u32(b, "llama.block_count", 2);
    gb_kv_f32(b, "llama.rope.freq_base", 10000.0f);
    gb_kv_strs(b, "tokenizer.ggml.tokens", toks, 3);
    gb_kv_bool(b, "test.flag", 1);
    gb_key(b, "test.ints", 9); /* array of i32 */
    gb_u32(b, 5);
    gb_u64(b, 3);
    gb_u32(b, 1);
    gb_u32(b, (uint32_t)-2);
    gb_u32(b, 3);
    gb_key(b, "test.neg", 5); /* i32 */
    gb_u32(b, (uint32_t)-5);
    gb_key(b, "test.big", 10); /* u64 */
    gb_u64(b, 1ull << 40);
}
#define N_KV 8

static layout make_valid(gguf_builder *b) {
    layout l;
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 2, N_KV);
    l.n_kv_at = 16;
    add_kvs(b);
    l.tensors_at = b->len;
    const uint64_t ne_w[2] = {4, 2}, ne_q[1] = {64};
    gb_tensor(b, "w", 2, ne_w, 0, 0);
    gb_tensor(b, "q", 1, ne_q, 8, 32);
    gb_pad(b, 32);
    l.data_at = b->len;
    gb_bytes(b, w_data, sizeof w_data);
    for (int blk = 0; blk < 2; blk++) {
        uint16_t d = 0x3c00; /* 1.0 */
        gb_bytes(b, &d, 2);
        for (int j = 0; j < 32; j++)
            gb_u8(b, (uint8_t)(j - 16 + blk));
    }
    return l;
}

static specd_status open_bytes(const gguf_builder *b, specd_gguf **g, specd_error *err) {
    *g = NULL;
    return specd_gguf_create_from_memory(b->buf, b->len, g, err);
}

/* Expects the bytes to be refused with status and a message containing needle. */
static void expect_refused(const gguf_builder *b, specd_status status, const char *needle) {
    specd_gguf *g = NULL;
    specd_error err;
    specd_error_clear(&err);
    specd_status st = specd_gguf_create_from_memory(b->buf, b->len, &g, &err);
    if (st != status || !strstr(err.message, needle))
        fprintf(stderr, "got %s '%s', expected %s containing '%s'\n", specd_status_name(st),
                err.message, specd_status_name(status), needle);
    assert_int_equal(st, status);
    assert_null(g);
    assert_non_null(strstr(err.message, needle));
}

static void test_valid_file_reads_back(void **state) {
    (void)state;
    gguf_builder b;
    layout l = make_valid(&b);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    assert_int_equal(specd_gguf_version(g), 3);
    assert_int_equal(specd_gguf_alignment(g), 32);
    assert_int_equal(specd_gguf_data_offset(g), l.data_at);
    assert_int_equal(specd_gguf_key_count(g), N_KV);

    specd_gguf_str s;
    assert_int_equal(specd_gguf_get_str(g, "general.architecture", &s, &err), SPECD_OK);
    assert_int_equal(s.len, 5);
    assert_memory_equal(s.ptr, "llama", 5);
    uint32_t u;
    assert_int_equal(specd_gguf_get_u32(g, "llama.block_count", &u, &err), SPECD_OK);
    assert_int_equal(u, 2);
    float f;
    assert_int_equal(specd_gguf_get_f32(g, "llama.rope.freq_base", &f, &err), SPECD_OK);
    assert_true(f == 10000.0f);
    int flag;
    assert_int_equal(specd_gguf_get_bool(g, "test.flag", &flag, &err), SPECD_OK);
    assert_int_equal(flag, 1);
    int64_t i64;
    assert_int_equal(specd_gguf_get_i64(g, "test.neg", &i64, &err), SPECD_OK);
    assert_int_equal(i64, -5);
    assert_int_equal(specd_gguf_get_i64(g, "test.big", &i64, &err), SPECD_OK);
    assert_true(i64 == (int64_t)(1ll << 40));

    specd_gguf_type et;
    uint64_t n;
    const void *data;
    assert_int_equal(specd_gguf_get_array(g, "test.ints", &et, &n, &data, &err), SPECD_OK);
    assert_int_equal(et, SPECD_GGUF_I32);
    assert_int_equal(n, 3);
    int32_t ints[3];
    memcpy(ints, data, sizeof ints);
    assert_int_equal(ints[1], -2);
    assert_int_equal(specd_gguf_get_array_str(g, "tokenizer.ggml.tokens", 2, &s, &err), SPECD_OK);
    assert_int_equal(s.len, 3);
    assert_memory_equal(s.ptr, "<s>", 3);

    int64_t k = specd_gguf_key_find(g, "test.flag");
    assert_int_equal(k, 4);
    assert_int_equal(specd_gguf_key_type(g, k), SPECD_GGUF_BOOL);
    s = specd_gguf_key_name(g, k);
    assert_memory_equal(s.ptr, "test.flag", 9);
    assert_int_equal(specd_gguf_key_find(g, "test.fla"), -1);
    assert_int_equal(specd_gguf_key_type(g, N_KV), SPECD_GGUF_INVALID);
    assert_null(specd_gguf_key_name(g, -1).ptr);

    assert_int_equal(specd_gguf_tensor_count(g), 2);
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, "w");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 2);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->n_bytes, 32);
    assert_ptr_equal(t->data, b.buf + l.data_at);
    assert_memory_equal(t->data, w_data, sizeof w_data);
    t = specd_gguf_tensor_find(g, "q");
    assert_non_null(t);
    assert_ptr_equal(t, specd_gguf_tensor_at(g, 1));
    assert_int_equal(t->type, 8);
    assert_int_equal(t->n_bytes, 68);
    assert_ptr_equal(t->data, b.buf + l.data_at + 32);
    assert_null(specd_gguf_tensor_find(g, "x"));
    assert_null(specd_gguf_tensor_at(g, 2));
    specd_gguf_destroy(g);
    specd_gguf_destroy(NULL);
    gb_free(&b);
}

static void test_getters_refuse_wrong_types(void **state) {
    (void)state;
    gguf_builder b;
    make_valid(&b);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    uint32_t u = 99;
    assert_int_equal(specd_gguf_get_u32(g, "no.such.key", &u, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "no.such.key"));
    assert_int_equal(u, 99);
    assert_int_equal(specd_gguf_get_u32(g, "test.neg", &u, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "test.neg"));
    assert_int_equal(specd_gguf_get_u32(g, "test.big", &u, &err), SPECD_E_FORMAT);
    assert_int_equal(specd_gguf_get_u32(g, "general.architecture", &u, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "string"));
    assert_int_equal(u, 99);
    float f;
    assert_int_equal(specd_gguf_get_f32(g, "llama.block_count", &f, &err), SPECD_E_FORMAT);
    int flag;
    assert_int_equal(specd_gguf_get_bool(g, "llama.block_count", &flag, &err), SPECD_E_FORMAT);
    specd_gguf_str s;
    assert_int_equal(specd_gguf_get_str(g, "tokenizer.ggml.tokens", &s, &err), SPECD_E_FORMAT);
    assert_int_equal(specd_gguf_get_array(g, "llama.block_count", NULL, NULL, NULL, &err),
                     SPECD_E_FORMAT);
    assert_int_equal(specd_gguf_get_array_str(g, "tokenizer.ggml.tokens", 3, &s, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_gguf_get_array_str(g, "test.ints", 0, &s, &err), SPECD_E_FORMAT);
    specd_gguf_destroy(g);
    gb_free(&b);
}

/* Every proper prefix of a valid file is refused (except those that only cut the data of no
 * tensor, which do not exist here: both tensors end at the end of the file). */
static void test_every_truncation_is_refused(void **state) {
    (void)state;
    gguf_builder b;
    make_valid(&b);
    for (size_t n = 0; n < b.len; n++) {
        specd_gguf *g = NULL;
        specd_error err;
        specd_error_clear(&err);
        specd_status st = specd_gguf_create_from_memory(b.buf, n, &g, &err);
        assert_int_equal(st, SPECD_E_FORMAT);
        assert_null(g);
        assert_true(strlen(err.message) > 0);
    }
    gb_free(&b);
}

static void test_bad_header(void **state) {
    (void)state;
    gguf_builder b;
    make_valid(&b);
    memcpy(b.buf, "GGUG", 4);
    expect_refused(&b, SPECD_E_FORMAT, "magic");
    memcpy(b.buf, "GGUF", 4);
    uint32_t v = 1;
    memcpy(b.buf + 4, &v, 4);
    expect_refused(&b, SPECD_E_UNSUPPORTED, "version 1");
    v = 4;
    memcpy(b.buf + 4, &v, 4);
    expect_refused(&b, SPECD_E_FORMAT, "version 4");
    v = 0x03000000; /* v3 written big-endian */
    memcpy(b.buf + 4, &v, 4);
    expect_refused(&b, SPECD_E_UNSUPPORTED, "big-endian");
    v = 2; /* v2 has the same layout as v3 */
    memcpy(b.buf + 4, &v, 4);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    assert_int_equal(specd_gguf_version(g), 2);
    specd_gguf_destroy(g);
    gb_free(&b);
}

static void test_hostile_counts(void **state) {
    (void)state;
    gguf_builder b;
    make_valid(&b);
    uint64_t big = UINT64_MAX;
    memcpy(b.buf + 16, &big, 8);
    expect_refused(&b, SPECD_E_FORMAT, "metadata keys cannot fit");
    gb_free(&b);
    make_valid(&b);
    memcpy(b.buf + 8, &big, 8);
    expect_refused(&b, SPECD_E_FORMAT, "tensors cannot fit");
    gb_free(&b);
    /* a string length of 2^64-1 right after the header */
    make_valid(&b);
    memcpy(b.buf + 24, &big, 8);
    expect_refused(&b, SPECD_E_FORMAT, "string length");
    gb_free(&b);
}

static void test_bad_values(void **state) {
    (void)state;
    gguf_builder b;
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 1);
    gb_key(&b, "nested", 9);
    gb_u32(&b, 9);
    gb_u64(&b, 1);
    expect_refused(&b, SPECD_E_FORMAT, "nested");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_key(&b, "weird", 13);
    gb_u32(&b, 0);
    expect_refused(&b, SPECD_E_FORMAT, "unknown value type 13");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv_bool(&b, "flag", 2);
    expect_refused(&b, SPECD_E_FORMAT, "flag");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_key(&b, "huge.array", 9);
    gb_u32(&b, 10); /* u64 */
    gb_u64(&b, UINT64_MAX / 4);
    expect_refused(&b, SPECD_E_FORMAT, "huge.array");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_key(&b, "many.strings", 9);
    gb_u32(&b, 8);
    gb_u64(&b, 1000);
    gb_str(&b, "only one");
    expect_refused(&b, SPECD_E_FORMAT, "many.strings");
    gb_free(&b);

    gb_header(&b, 3, 0, 2);
    gb_kv_u32(&b, "dup", 1);
    gb_kv_u32(&b, "dup", 2);
    expect_refused(&b, SPECD_E_FORMAT, "duplicate key name 'dup'");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv_f32(&b, "general.alignment", 32.0f);
    expect_refused(&b, SPECD_E_FORMAT, "general.alignment");
    gb_free(&b);

    gb_header(&b, 3, 0, 1);
    gb_kv_u32(&b, "general.alignment", 48);
    expect_refused(&b, SPECD_E_FORMAT, "power of two");
    gb_free(&b);
}

/* One tensor "t" of the given shape/type/offset and data_bytes of data. */
static void one_tensor(gguf_builder *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset, size_t data_bytes) {
    memset(b, 0, sizeof *b);
    gb_header(b, 3, 1, 0);
    gb_tensor(b, "t", n_dims, ne, type, offset);
    gb_pad(b, 32);
    for (size_t i = 0; i < data_bytes; i++)
        gb_u8(b, 0);
}

static void test_bad_tensors(void **state) {
    (void)state;
    gguf_builder b;
    const uint64_t ne4[5] = {32, 2, 3, 4, 5};
    one_tensor(&b, 4, ne4, 0, 0, 32 * 2 * 3 * 4 * 4);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    assert_int_equal(specd_gguf_tensor_at(g, 0)->ne[3], 4);
    specd_gguf_destroy(g);
    gb_free(&b);

    one_tensor(&b, 5, ne4, 0, 0, 0);
    expect_refused(&b, SPECD_E_FORMAT, "5 dimensions");
    gb_free(&b);
    one_tensor(&b, 0, ne4, 0, 0, 0);
    expect_refused(&b, SPECD_E_FORMAT, "0 dimensions");
    gb_free(&b);
    const uint64_t zero[2] = {32, 0};
    one_tensor(&b, 2, zero, 0, 0, 0);
    expect_refused(&b, SPECD_E_FORMAT, "dimension 1 is 0");
    gb_free(&b);
    const uint64_t over[2] = {1ull << 40, 1ull << 40};
    one_tensor(&b, 2, over, 0, 0, 0);
    expect_refused(&b, SPECD_E_FORMAT, "overflow");
    gb_free(&b);
    const uint64_t bytes_over[2] = {1ull << 32, 1ull << 30}; /* 2^62 elements, 2^64 bytes */
    one_tensor(&b, 2, bytes_over, 0, 0, 0);
    expect_refused(&b, SPECD_E_FORMAT, "overflow");
    gb_free(&b);
    const uint64_t row[1] = {256};
    one_tensor(&b, 1, row, 13, 0, 176); /* Q5_K: real ggml type, not ours */
    expect_refused(&b, SPECD_E_UNSUPPORTED, "Q5_K");
    gb_free(&b);
    one_tensor(&b, 1, row, 99, 0, 0);
    expect_refused(&b, SPECD_E_UNSUPPORTED, "type 99");
    gb_free(&b);
    const uint64_t odd[1] = {40};
    one_tensor(&b, 1, odd, 8, 0, 68);
    expect_refused(&b, SPECD_E_FORMAT, "not a whole number of Q8_0 blocks");
    gb_free(&b);
    one_tensor(&b, 1, row, 0, 8, 2048);
    expect_refused(&b, SPECD_E_FORMAT, "not a multiple of the alignment");
    gb_free(&b);
    one_tensor(&b, 1, row, 0, 0, 1023);
    expect_refused(&b, SPECD_E_FORMAT, "outside the file");
    gb_free(&b);
    one_tensor(&b, 1, row, 0, UINT64_MAX - 31, 1024);
    expect_refused(&b, SPECD_E_FORMAT, "outside the file");
    gb_free(&b);

    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, row, 0, 0);
    gb_tensor(&b, "a", 1, row, 0, 1024);
    gb_pad(&b, 32);
    for (int i = 0; i < 2048; i++)
        gb_u8(&b, 0);
    expect_refused(&b, SPECD_E_FORMAT, "duplicate tensor name 'a'");
    gb_free(&b);

    gb_header(&b, 3, 2, 0);
    gb_tensor(&b, "a", 1, row, 0, 0);
    gb_tensor(&b, "b", 1, row, 0, 992);
    gb_pad(&b, 32);
    for (int i = 0; i < 2048; i++)
        gb_u8(&b, 0);
    expect_refused(&b, SPECD_E_FORMAT, "overlap");
    gb_free(&b);
}

static void test_custom_alignment(void **state) {
    (void)state;
    gguf_builder b;
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 1, 1);
    gb_kv_u32(&b, "general.alignment", 64);
    const uint64_t ne[1] = {16};
    gb_tensor(&b, "t", 1, ne, 0, 0);
    gb_pad(&b, 64);
    size_t data_at = b.len;
    for (int i = 0; i < 64; i++)
        gb_u8(&b, (uint8_t)i);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    assert_int_equal(specd_gguf_alignment(g), 64);
    assert_int_equal(specd_gguf_data_offset(g), data_at);
    assert_ptr_equal(specd_gguf_tensor_at(g, 0)->data, b.buf + data_at);
    specd_gguf_destroy(g);
    gb_free(&b);
}

static void test_empty_arrays(void **state) {
    (void)state;
    gguf_builder b;
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 2);
    gb_key(&b, "empty.u32", 9);
    gb_u32(&b, 4);
    gb_u64(&b, 0);
    gb_kv_strs(&b, "empty.str", NULL, 0);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    specd_gguf_type et;
    uint64_t n = 9;
    assert_int_equal(specd_gguf_get_array(g, "empty.u32", &et, &n, NULL, &err), SPECD_OK);
    assert_int_equal(et, SPECD_GGUF_U32);
    assert_int_equal(n, 0);
    assert_int_equal(specd_gguf_get_array(g, "empty.str", &et, &n, NULL, &err), SPECD_OK);
    assert_int_equal(n, 0);
    specd_gguf_str s;
    assert_int_equal(specd_gguf_get_array_str(g, "empty.str", 0, &s, &err), SPECD_E_INVALID_ARG);
    specd_gguf_destroy(g);
    gb_free(&b);
}

static void test_integer_limits(void **state) {
    (void)state;
    gguf_builder b;
    memset(&b, 0, sizeof b);
    gb_header(&b, 3, 0, 4);
    gb_key(&b, "i8.min", 1);
    gb_u8(&b, 0x80);
    gb_key(&b, "i64.min", 11);
    gb_u64(&b, 1ull << 63);
    gb_key(&b, "u64.max", 10);
    gb_u64(&b, UINT64_MAX);
    gb_key(&b, "u16.max", 2);
    gb_u8(&b, 0xff);
    gb_u8(&b, 0xff);
    specd_gguf *g;
    specd_error err;
    assert_int_equal(open_bytes(&b, &g, &err), SPECD_OK);
    int64_t v;
    uint64_t u;
    uint32_t u32;
    assert_int_equal(specd_gguf_get_i64(g, "i8.min", &v, &err), SPECD_OK);
    assert_int_equal(v, -128);
    assert_int_equal(specd_gguf_get_u32(g, "i8.min", &u32, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "-128"));
    assert_int_equal(specd_gguf_get_i64(g, "i64.min", &v, &err), SPECD_OK);
    assert_true(v == INT64_MIN);
    assert_int_equal(specd_gguf_get_u64(g, "i64.min", &u, &err), SPECD_E_FORMAT);
    assert_int_equal(specd_gguf_get_u64(g, "u64.max", &u, &err), SPECD_OK);
    assert_true(u == UINT64_MAX);
    assert_int_equal(specd_gguf_get_i64(g, "u64.max", &v, &err), SPECD_E_FORMAT);
    assert_int_equal(specd_gguf_get_u32(g, "u16.max", &u32, &err), SPECD_OK);
    assert_int_equal(u32, 65535);
    specd_gguf_destroy(g);
    gb_free(&b);
}

static void test_files(void **state) {
    (void)state;
    specd_gguf *g = NULL;
    specd_error err;
    assert_int_equal(specd_gguf_create("/nonexistent/model.gguf", &g, &err), SPECD_E_IO);
    assert_non_null(strstr(err.message, "/nonexistent/model.gguf"));
    assert_null(g);
    assert_int_equal(specd_gguf_create("/tmp", &g, &err), SPECD_E_IO);
    assert_non_null(strstr(err.message, "not a regular file"));

    char path[] = "/tmp/specd_test_gguf_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(specd_gguf_create(path, &g, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "empty"));

    gguf_builder b;
    make_valid(&b);
    assert_int_equal(write(fd, b.buf, b.len - 1), (ssize_t)(b.len - 1));
    assert_int_equal(specd_gguf_create(path, &g, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, path));
    assert_non_null(strstr(err.message, "outside the file"));
    assert_int_equal(write(fd, b.buf + b.len - 1, 1), 1);
    assert_int_equal(specd_gguf_create(path, &g, &err), SPECD_OK);
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, "w");
    assert_non_null(t);
    assert_memory_equal(t->data, w_data, sizeof w_data);
    specd_gguf_destroy(g);
    close(fd);
    unlink(path);
    gb_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file_reads_back),
        cmocka_unit_test(test_getters_refuse_wrong_types),
        cmocka_unit_test(test_every_truncation_is_refused),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_custom_alignment),
        cmocka_unit_test(test_empty_arrays),
        cmocka_unit_test(test_integer_limits),
        cmocka_unit_test(test_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
