#include "test_main.h"

#include "common/alloc.h"

#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <string.h>

/* The environment ctest sets (tests/CMakeLists.txt):
 *   SPECD_TEST_ALLOCATOR      the allocator this program must get: jemalloc or libc
 *   SPECD_TEST_LATE_JEMALLOC  a libjemalloc to load once the choice is made */

/* Usable size of p as the allocator that specd_alloc_source names sees it: jemalloc's sallocx
 * (looked up, since this program may not link jemalloc) or malloc_usable_size. A pointer from
 * another allocator would not give a size at least as large as the one asked for. */
static size_t usable_size(void *p) {
    if (strcmp(specd_alloc_source(), "jemalloc") == 0) {
        size_t (*sallocx)(const void *, int);
        *(void **)&sallocx = dlsym(RTLD_DEFAULT, "sallocx");
        assert_non_null(sallocx);
        return sallocx(p, 0);
    }
    return malloc_usable_size(p);
}

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

static void test_source_is_the_expected_one(void **state) {
    (void)state;
    const char *want = getenv("SPECD_TEST_ALLOCATOR");
    assert_non_null(want);
    assert_string_equal(specd_alloc_source(), want);
}

static void test_pointers_come_from_the_source(void **state) {
    (void)state;
    for (size_t size = 1; size <= (1u << 20); size *= 4) {
        void *p = specd_alloc(size), *q = specd_alloc_array(size, 3);
        assert_non_null(p);
        assert_non_null(q);
        assert_true(usable_size(p) >= size);
        assert_true(usable_size(q) >= 3 * size);
        specd_free(p);
        specd_free(q);
    }
}

/* A jemalloc that arrives after the choice changes nothing: what was allocated before is freed by
 * the allocator that gave it, and later allocations keep the same allocator. With glibc's default
 * surplus the load itself fails (jemalloc's initial-exec TLS does not fit), which is why
 * libspecd.so does not link jemalloc. */
static void test_late_jemalloc_changes_nothing(void **state) {
    (void)state;
    const char *lib = getenv("SPECD_TEST_LATE_JEMALLOC");
    if (!lib || !*lib) skip();
    const char *before = specd_alloc_source();
    void *p = specd_alloc(4096);
    assert_non_null(p);
    void *h = dlopen(lib, RTLD_NOW | RTLD_GLOBAL);
    printf("# dlopen(%s) after start: %s\n", lib, h ? "loaded" : dlerror());
    assert_string_equal(specd_alloc_source(), before);
    assert_true(usable_size(p) >= 4096);
    specd_free(p);
    void *q = specd_alloc(4096);
    assert_true(usable_size(q) >= 4096);
    specd_free(q);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_alignment_and_use),
        cmocka_unit_test(test_array_is_zeroed),
        cmocka_unit_test(test_array_overflow_is_refused),
        cmocka_unit_test(test_free_null_is_noop),
        cmocka_unit_test(test_source_is_the_expected_one),
        cmocka_unit_test(test_pointers_come_from_the_source),
        cmocka_unit_test(test_late_jemalloc_changes_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
