/* common/pages.h: big buffers in their own 2 MiB-aligned mappings advised for huge pages, or on
 * the heap with SPECD_HUGE_PAGES=0 or off (ctest runs this program both ways,
 * tests/CMakeLists.txt) and in builds with ASan or TSan. */
#include "test_main.h"

#include "common/pages.h"

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

enum { HUGE = 2u << 20 };

static int expect_huge(void) {
    const char *e = getenv("SPECD_HUGE_PAGES");
    return !SANITIZED && !(e && (strcmp(e, "0") == 0 || strcmp(e, "off") == 0));
}

/* 1 when /proc/self/smaps lists the mapping that holds p with the kernel's "hg" flag (the mapping
 * took MADV_HUGEPAGE), 0 when it lists it without, -1 when no mapping holds p. */
static int advised_huge(const void *p) {
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[512];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            if (found >= 0) break; /* past the mapping's lines */
            if (lo <= (uintptr_t)p && (uintptr_t)p < hi) found = 0;
            continue;
        }
        if (found == 0 && strncmp(line, "VmFlags:", 8) == 0) found = strstr(line, " hg") != NULL;
    }
    fclose(f);
    return found;
}

static void test_setting(void **state) {
    (void)state;
    assert_int_equal(specd_huge_pages_on(), expect_huge());
}

static void test_zeroed_aligned_writable(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 4096, HUGE - 1, HUGE, 3 * HUGE + 12345};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        const size_t n = sizes[i];
        uint8_t *p = specd_pages_alloc(n);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        if (expect_huge()) assert_int_equal((uintptr_t)p % HUGE, 0);
        for (size_t j = 0; j < n; j++)
            assert_int_equal(p[j], 0);
        memset(p, 0x5a, n);
        specd_pages_free(p, n);
    }
}

/* The advice is the part that makes a forward faster: the mapping must carry it where the kernel
 * has transparent huge pages at all. */
static void test_mapping_advised(void **state) {
    (void)state;
    struct stat sb;
    if (!expect_huge() || stat("/sys/kernel/mm/transparent_hugepage/enabled", &sb) != 0) skip();
    const size_t n = 5 * HUGE;
    uint8_t *p = specd_pages_alloc(n);
    assert_non_null(p);
    assert_int_equal(advised_huge(p), 1);
    specd_pages_free(p, n);
    assert_int_equal(advised_huge(p), -1); /* unmapped, whole */
}

/* A sealed buffer (a model's weights) faults on a write, as its file mapping did. */
static void test_seal(void **state) {
    (void)state;
    const size_t n = HUGE + 100;
    uint8_t *p = specd_pages_alloc(n);
    assert_non_null(p);
    p[n - 1] = 7;
    specd_pages_seal(p, n);
    assert_int_equal(p[n - 1], 7);
    if (expect_huge()) {
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
            signal(SIGSEGV, SIG_DFL);
            ((volatile uint8_t *)p)[0] = 1;
            _exit(0);
        }
        int status = 0;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGSEGV);
    }
    specd_pages_free(p, n);
}

/* The parsers read the kernel's formats: /proc/meminfo's "MemAvailable: N kB" line, cgroup v2's
 * memory.max ("max" or bytes) and memory.current. */
static void test_memory_parsers(void **state) {
    (void)state;
    assert_int_equal(specd_meminfo_available("MemTotal:       24576000 kB\n"
                                             "MemFree:         1000000 kB\n"
                                             "MemAvailable:   20000000 kB\n"),
                     20000000LL * 1024);
    assert_int_equal(specd_meminfo_available("MemTotal: 1 kB\n"), -1);
    assert_int_equal(specd_meminfo_available("MemAvailable: lots\n"), -1);
    assert_int_equal(specd_meminfo_available("MemAvailable: 12 MB\n"), -1);
    assert_int_equal(specd_meminfo_available(NULL), -1);
    assert_int_equal(specd_cgroup_headroom("max\n", "123\n"), -1);
    assert_int_equal(specd_cgroup_headroom("1000\n", "400\n"), 600);
    assert_int_equal(specd_cgroup_headroom("1000\n", "1400\n"), 0);
    assert_int_equal(specd_cgroup_headroom("1000x\n", "400\n"), -1);
    assert_int_equal(specd_cgroup_headroom("1000\n", NULL), -1);
}

/* On the machine at hand: a 1 MiB copy fits, and one larger than any machine's memory does not. */
static void test_copy_fits(void **state) {
    (void)state;
    assert_true(specd_pages_copy_fits(1u << 20));
    assert_false(specd_pages_copy_fits((size_t)1 << 50));
    assert_false(specd_pages_copy_fits(SIZE_MAX));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_setting),
        cmocka_unit_test(test_zeroed_aligned_writable),
        cmocka_unit_test(test_mapping_advised),
        cmocka_unit_test(test_seal),
        cmocka_unit_test(test_memory_parsers),
        cmocka_unit_test(test_copy_fits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
