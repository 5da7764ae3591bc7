#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

#if defined(SPECD_WITH_JEMALLOC)
#include <jemalloc/jemalloc.h>
#endif

enum { SPECD_ALIGN = 64 };

void *specd_alloc(size_t size) {
    if (size == 0) size = 1;
#if defined(SPECD_WITH_JEMALLOC)
    return mallocx(size, MALLOCX_ALIGN(SPECD_ALIGN));
#else
    size_t rounded;
    if (!specd_add_ok(size, SPECD_ALIGN - 1, &rounded)) return NULL;
    return aligned_alloc(SPECD_ALIGN, rounded & ~(size_t)(SPECD_ALIGN - 1));
#endif
}

void *specd_alloc_array(size_t n, size_t size) {
    size_t total;
    if (!specd_mul_ok(n, size, &total)) return NULL;
#if defined(SPECD_WITH_JEMALLOC)
    return mallocx(total ? total : 1, MALLOCX_ALIGN(SPECD_ALIGN) | MALLOCX_ZERO);
#else
    void *p = specd_alloc(total);
    if (p) memset(p, 0, total);
    return p;
#endif
}

void specd_free(void *ptr) {
    if (!ptr) return;
#if defined(SPECD_WITH_JEMALLOC)
    dallocx(ptr, 0);
#else
    free(ptr);
#endif
}
