#include "common/pages.h"

#include "common/alloc.h"
#include "common/log_internal.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SPECD_PAGES_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SPECD_PAGES_SANITIZED 1
#endif
#endif

enum { HUGE = 2u << 20 };

static int huge_on;
static pthread_once_t huge_once = PTHREAD_ONCE_INIT;

static void read_huge_setting(void) {
#if defined(SPECD_PAGES_SANITIZED)
    huge_on = 0;
#else
    const char *e = getenv("SPECD_HUGE_PAGES");
    huge_on = 1;
    if (!e || !*e || strcmp(e, "1") == 0 || strcmp(e, "on") == 0) return;
    if (strcmp(e, "0") == 0 || strcmp(e, "off") == 0)
        huge_on = 0;
    else
        specd_log(SPECD_LOG_WARN, "SPECD_HUGE_PAGES=%s: not 0, off, 1 or on; huge pages stay on", e);
#endif
}

int specd_huge_pages_on(void) {
    pthread_once(&huge_once, read_huge_setting);
    return huge_on;
}

/* the mapping's length: size rounded up to whole huge pages */
static int mapped_length(size_t size, size_t *len) {
    if (!specd_add_ok(size ? size : 1, HUGE - 1, len)) return 0;
    *len &= ~(size_t)(HUGE - 1);
    return 1;
}

void *specd_pages_alloc(size_t size) {
    if (!specd_huge_pages_on()) return specd_alloc_array(1, size);
    size_t len, span;
    if (!mapped_length(size, &len) || !specd_add_ok(len, HUGE, &span)) return NULL;
    /* map a huge page more than needed and keep the 2 MiB-aligned part: the kernel backs only
     * aligned 2 MiB ranges with huge pages */
    uint8_t *raw = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + HUGE - 1) & ~(uintptr_t)(HUGE - 1));
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + span > p + len) munmap(p + len, (size_t)(raw + span - (p + len)));
#if defined(MADV_HUGEPAGE)
    madvise(p, len, MADV_HUGEPAGE); /* advice: where THP is off it fails and nothing changes */
#endif
    return p;
}

void specd_pages_seal(void *p, size_t size) {
    size_t len;
    if (!p || !specd_huge_pages_on() || !mapped_length(size, &len)) return;
    mprotect(p, len, PROT_READ);
}

void specd_pages_free(void *p, size_t size) {
    if (!p) return;
    if (!specd_huge_pages_on()) {
        specd_free(p);
        return;
    }
    size_t len;
    if (mapped_length(size, &len)) munmap(p, len);
}
