#include "test_main.h"

#include "common/alloc.h"

#include <stdint.h>
#include <string.h>

static void test_alignment_and_use(void **state) {
    (void)state;
    for (size_t size = 0; size < 5000; size += 37) {
        unsigned char *p = specd_alloc(size);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, size);
        specd_free(p);
    }
}

static void test_array_is_zeroed(void **state) {
    (void)state;
    uint32_t *p = specd_alloc_array(1000, sizeof *p);
    assert_non_null(p);
    for (int i = 0; i < 1000; i++) assert_int_equal(p[i], 0);
    specd_free(p);
}

static void test_array_overflow_is_refused(void **state) {
    (void)state;
    assert_null(specd_alloc_array(SIZE_MAX / 2, 3));
    size_t out;
    assert_false(specd_mul_ok(SIZE_MAX, 2, &out));
    assert_true(specd_mul_ok(1u << 20, 1u << 10, &out));
    assert_int_equal(out, (size_t)1 << 30);
    assert_false(specd_add_ok(SIZE_MAX, 1, &out));
}

static void test_free_null_is_noop(void **state) {
    (void)state;
    specd_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_use),
        cmocka_unit_test(test_array_is_zeroed),
        cmocka_unit_test(test_array_overflow_is_refused),
        cmocka_unit_test(test_free_null_is_noop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
