/* to_float against an independent implementation: gguf-py's numpy dequantizers, recorded by
 * scripts/golden/make_dequant_golden.py in tests/data/dequant_golden.bin. Each value must match
 * within 1 ulp (in practice they match exactly). With the argument "model" the test checks the
 * recorded rows of the real model instead of the synthetic blocks. */
#include "test_main.h"

#include "common/alloc.h"
#include "kernels/cpu/dtype.h"
#include "specd/gguf.h"

#include <math.h>
#include <string.h>

static int model_mode;

typedef struct reader {
    const uint8_t *p, *end;
} reader;

static const void *take(reader *r, size_t n) {
    assert_true((size_t)(r->end - r->p) >= n);
    const void *q = r->p;
    r->p += n;
    return q;
}

static uint32_t take_u32(reader *r) {
    uint32_t v;
    memcpy(&v, take(r, 4), 4);
    return v;
}

static uint64_t take_u64(reader *r) {
    uint64_t v;
    memcpy(&v, take(r, 8), 8);
    return v;
}

static uint8_t *load_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = specd_alloc((size_t)n);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return buf;
}

static int64_t ulps(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia; /* map to a monotonic integer line */
    if (ib < 0) ib = INT32_MIN - ib;
    return llabs((long long)ia - ib);
}

/* Compares both kernel tables' to_float of raw against want; returns the number of exact hits. */
static int64_t check(uint32_t type, const char *what, const void *raw, const float *want,
                     int64_t n) {
    float *got = specd_alloc_array((size_t)n, sizeof *got);
    assert_non_null(got);
    int64_t exact = 0;
    for (int table = 0; table < 2; table++) {
        const specd_dtype_traits *t =
            table ? specd_dtype_traits_get(type) : specd_dtype_traits_scalar(type);
        assert_non_null(t);
        t->to_float(raw, got, n);
        for (int64_t i = 0; i < n; i++) {
            if (ulps(got[i], want[i]) > 1)
                fail_msg("%s %s (%s table): element %lld is %.9g, gguf-py says %.9g", t->name, what,
                         table ? "fastest" : "scalar", (long long)i, got[i], want[i]);
            if (table == 0 && memcmp(&got[i], &want[i], 4) == 0) exact++;
        }
    }
    specd_free(got);
    return exact;
}

static void test_golden(void **state) {
    (void)state;
    const char *src = getenv("SPECD_SOURCE_DIR");
    assert_non_null(src);
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/data/dequant_golden.bin", src);
    size_t size;
    uint8_t *buf = load_file(path, &size);
    reader r = {buf, buf + size};
    assert_memory_equal(take(&r, 4), "SPDQ", 4);
    assert_int_equal(take_u32(&r), 1);
    uint32_t n_rec = take_u32(&r);
    specd_gguf *model = NULL;
    if (model_mode) {
        specd_error err;
        if (specd_gguf_create(specd_test_model_path(), &model, &err) != SPECD_OK)
            fail_msg("%s", err.message);
    }
    int checked = 0;
    int64_t total = 0, exact = 0;
    for (uint32_t k = 0; k < n_rec; k++) {
        uint32_t type = take_u32(&r), kind = take_u32(&r), name_len = take_u32(&r);
        char name[128];
        assert_true(name_len < sizeof name);
        memcpy(name, take(&r, name_len), name_len);
        name[name_len] = '\0';
        int64_t n = (int64_t)take_u64(&r);
        uint64_t n_bytes = take_u64(&r);
        assert_int_equal(n_bytes, specd_dtype_row_bytes(type, n));
        const void *raw = kind == 0 ? take(&r, n_bytes) : NULL;
        const float *want_unaligned = take(&r, (size_t)n * 4);
        float *want = specd_alloc_array((size_t)n, sizeof *want);
        assert_non_null(want);
        memcpy(want, want_unaligned, (size_t)n * 4);
        if (kind == 0 && !model_mode) {
            /* raw bytes in the file are unaligned: copy them to an aligned buffer */
            void *aligned = specd_alloc(n_bytes);
            assert_non_null(aligned);
            memcpy(aligned, raw, n_bytes);
            exact += check(type, name, aligned, want, n);
            specd_free(aligned);
            total += n;
            checked++;
        } else if (kind == 1 && model_mode) {
            const specd_gguf_tensor *t = specd_gguf_tensor_find(model, name);
            assert_non_null(t);
            assert_int_equal(t->type, type);
            assert_true(t->n_bytes >= n_bytes);
            exact += check(type, name, t->data, want, n);
            total += n;
            checked++;
        }
        specd_free(want);
    }
    assert_true(r.p == r.end);
    print_message("%d records, %lld values, %lld bit-exact, the rest within 1 ulp\n", checked,
                  (long long)total, (long long)exact);
    assert_true(checked >= (model_mode ? 3 : 12));
    specd_gguf_destroy(model);
    specd_free(buf);
}

int main(int argc, char **argv) {
    model_mode = argc > 1 && !strcmp(argv[1], "model");
    if (model_mode && !specd_test_model_path()) return SPECD_TEST_SKIP;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_golden)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
