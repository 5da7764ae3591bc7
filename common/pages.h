/* Large host buffers that a forward reads in full at every step: a model's weights and a KV cache.
 * They come from their own anonymous mapping, aligned to 2 MiB and advised for transparent huge
 * pages (Linux: MADV_HUGEPAGE, which takes effect when
 * /sys/kernel/mm/transparent_hugepage/enabled is "madvise" or "always"). With 4 KiB pages a decode
 * step misses the TLB on every page of ~100 MB of weights and on every V^T row of the cache (each
 * in its own page): on a 2-core Zen 3, huge pages made decode at 770 cached tokens 1.14x faster
 * (docs/benchmarks.md).
 *
 * SPECD_HUGE_PAGES=0 (or off) in the environment turns this off for the process: buffers then
 * come from specd_alloc and models are mapped from their file (shared with other processes
 * through the page cache). Sanitizer builds always take the specd_alloc path, so ASan sees the
 * KV cache.
 *
 * Every pointer from specd_pages_alloc is released with specd_pages_free and the same size. */
#ifndef SPECD_COMMON_PAGES_H
#define SPECD_COMMON_PAGES_H

#include <stddef.h>

/* 1 unless SPECD_HUGE_PAGES is 0 or off (read once per process; another value is warned of) or
 * the build has a sanitizer. */
int specd_huge_pages_on(void);
/* size zeroed bytes, 64-byte aligned at least; NULL on failure. */
void *specd_pages_alloc(size_t size);
/* Makes a buffer from specd_pages_alloc read-only where it is its own mapping (a write then
 * faults, as one into a read-only file mapping would); a no-op for the specd_alloc path. */
void specd_pages_seal(void *p, size_t size);
void specd_pages_free(void *p, size_t size);

/* 1 when a private copy of size bytes leaves room: size is at most half of what the system can
 * still give (MemAvailable from /proc/meminfo, lowered to a cgroup v2 limit's headroom where
 * there is one). 0 when it does not, or when neither can be read. A model's file mapping costs no
 * private memory, so loading copies a model into huge pages only when this says so: a model near
 * the size of free memory would otherwise push out the page cache or meet the OOM killer. */
int specd_pages_copy_fits(size_t size);
/* The parsers behind it, for tests: MemAvailable in bytes from /proc/meminfo's text, and a cgroup
 * v2 memory.max minus memory.current (max's "max": no limit). -1 when the text does not say. */
long long specd_meminfo_available(const char *meminfo);
long long specd_cgroup_headroom(const char *memory_max, const char *memory_current);

#endif
