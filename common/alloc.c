#include "common/alloc.h"

#include <stdlib.h>
#include <string.h>

/* Which allocator serves specd_alloc is fixed by how this file is built (common/CMakeLists.txt):
 *   SPECD_ALLOC_JEMALLOC  the library links jemalloc and calls it (libspecd.a, the specd programs)
 *   SPECD_ALLOC_LOOKUP    the library does not link jemalloc (libspecd.so): it uses the process's
 *                         jemalloc when one is loaded at the first allocation, else libc
 *   neither               libc (SPECD_JEMALLOC=OFF, sanitizer builds)
 * libspecd.so must not link jemalloc: libjemalloc keeps its thread state in initial-exec TLS, a
 * static TLS block glibc reserves only when the process starts, so dlopen of a library that needs
 * it (Python importing specd) fails once the small surplus reserved for late loads is used up. */
#if defined(SPECD_ALLOC_JEMALLOC) || defined(SPECD_ALLOC_LOOKUP)
#include <jemalloc/jemalloc.h>
#endif
#if defined(SPECD_ALLOC_LOOKUP)
#include <dlfcn.h>
#include <pthread.h>
#endif

enum { SPECD_ALIGN = 64 };

static void *libc_alloc(size_t size) {
    size_t rounded;
    if (!specd_add_ok(size, SPECD_ALIGN - 1, &rounded)) return NULL;
    return aligned_alloc(SPECD_ALIGN, rounded & ~(size_t)(SPECD_ALIGN - 1));
}

#if defined(SPECD_ALLOC_LOOKUP)
/* Decided once, at the first allocation, and never revisited: every pointer specd_free sees was
 * allocated under the same decision, so it always returns to the allocator it came from, even if
 * a jemalloc entered the global scope afterwards (it cannot through dlopen for the TLS reason
 * above, and RTLD_LOCAL loads are not in the global scope at all). */
static void *(*process_mallocx)(size_t, int);
static void (*process_dallocx)(void *, int);
static pthread_once_t lookup_once = PTHREAD_ONCE_INIT;

static void look_up_process_jemalloc(void) {
    void *m = dlsym(RTLD_DEFAULT, "mallocx"), *d = dlsym(RTLD_DEFAULT, "dallocx");
    Dl_info mi, di;
    /* both halves from one jemalloc, or neither */
    if (!m || !d || !dladdr(m, &mi) || !dladdr(d, &di) || mi.dli_fbase != di.dli_fbase) return;
    /* POSIX guarantees a data pointer from dlsym converts to a function pointer */
    *(void **)&process_mallocx = m;
    *(void **)&process_dallocx = d;
}

static int use_jemalloc(void) {
    pthread_once(&lookup_once, look_up_process_jemalloc);
    return process_mallocx != NULL;
}
#define JE_MALLOCX process_mallocx
#define JE_DALLOCX process_dallocx
#elif defined(SPECD_ALLOC_JEMALLOC)
static int use_jemalloc(void) { return 1; }
#define JE_MALLOCX mallocx
#define JE_DALLOCX dallocx
#endif

const char *specd_alloc_source(void) {
#if defined(JE_MALLOCX)
    if (use_jemalloc()) return "jemalloc";
#endif
    return "libc";
}

void *specd_alloc(size_t size) {
    if (size == 0) size = 1;
#if defined(JE_MALLOCX)
    if (use_jemalloc()) return JE_MALLOCX(size, MALLOCX_ALIGN(SPECD_ALIGN));
#endif
    return libc_alloc(size);
}

void *specd_alloc_array(size_t n, size_t size) {
    size_t total;
    if (!specd_mul_ok(n, size, &total)) return NULL;
#if defined(JE_MALLOCX)
    if (use_jemalloc()) return JE_MALLOCX(total ? total : 1, MALLOCX_ALIGN(SPECD_ALIGN) | MALLOCX_ZERO);
#endif
    void *p = specd_alloc(total);
    if (p) memset(p, 0, total);
    return p;
}

void specd_free(void *ptr) {
    if (!ptr) return;
#if defined(JE_MALLOCX)
    if (use_jemalloc()) {
        JE_DALLOCX(ptr, 0);
        return;
    }
#endif
    free(ptr);
}
