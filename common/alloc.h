/* Host allocations. Built with jemalloc (SPECD_JEMALLOC) they come from its non-standard
 * mallocx/dallocx API: libspecd.a links jemalloc, libspecd.so uses the program's jemalloc when it
 * has one and libc otherwise (alloc.c says why); without it (sanitizer builds) from libc, so ASan
 * sees every byte.
 *
 * Every pointer from specd_alloc* must be released with specd_free (NULL is a no-op).
 * Sizes are checked for overflow: specd_alloc_array returns NULL when n * size overflows. */
#ifndef SPECD_COMMON_ALLOC_H
#define SPECD_COMMON_ALLOC_H

#include <stddef.h>

/* Cache-line (64-byte) aligned, uninitialised. */
void *specd_alloc(size_t size);
/* Cache-line aligned, zeroed, n * size bytes; NULL on overflow or failure. */
void *specd_alloc_array(size_t n, size_t size);
void specd_free(void *ptr);
/* "jemalloc" or "libc": the allocator serving the calls above in this process (fixed for its
 * lifetime). */
const char *specd_alloc_source(void);

/* Returns 1 and stores a*b in *out when it does not overflow size_t, else 0. */
static inline int specd_mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int specd_add_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#endif
