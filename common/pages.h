/* Large host buffers that a forward reads in full at every step: a model's weights and a KV cache.
 * They come from their own anonymous mapping, aligned to 2 MiB and advised for transparent huge
 * pages (Linux: MADV_HUGEPAGE, which takes effect when
 * /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always"). With 4 KiB pages a decode
 * step misses the TLB on every page of ~100 MB of weights and on every V^T row of the cache (each
 * in its own page): on a 2-core Zen 3, huge pages made decode at 770 cached tokens 1.14x faster
 * (docs/benchmarks.md).
 *
 * SPECD_HUGE_PAGES=0 (or off) in the environment turns this off for the process: buffers then come from
 * specd_alloc and models are mapped from their file (shared with other processes through the
 * page cache). Sanitizer builds always take the specd_alloc path, so ASan sees the KV cache.
 *
 * Every pointer from specd_pages_alloc is released with specd_pages_free and the same size. */
#ifndef SPECD_COMMON_PAGES_H
#define SPECD_COMMON_PAGES_H

#include <stddef.h>

/* 1 unless SPECD_HUGE_PAGES is 0 or off (read once per process; another value is warned of) or the build has a sanitizer. */
int specd_huge_pages_on(void);
/* size zeroed bytes, 64-byte aligned at least; NULL on failure. */
void *specd_pages_alloc(size_t size);
/* Makes a buffer from specd_pages_alloc read-only where it is its own mapping (a write then
 * faults, as one into a read-only file mapping would); a no-op for the specd_alloc path. */
void specd_pages_seal(void *p, size_t size);
void specd_pages_free(void *p, size_t size);

#endif
