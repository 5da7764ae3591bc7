#include "common/pages.h"

#include "common/alloc.h"
#include "common/log_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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
        specd_log(SPECD_LOG_WARN, "SPECD_HUGE_PAGES=%s: not 0, off, 1 or on; huge pages stay on",
                  e);
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

long long specd_meminfo_available(const char *meminfo) {
    const char *line = meminfo ? strstr(meminfo, "MemAvailable:") : NULL;
    if (!line) return -1;
    char *end = NULL;
    errno = 0;
    long long kib = strtoll(line + strlen("MemAvailable:"), &end, 10);
    if (errno || end == line + strlen("MemAvailable:") || kib < 0 || kib > LLONG_MAX / 1024)
        return -1;
    while (*end == ' ') end++;
    if (strncmp(end, "kB", 2) != 0) return -1;
    return kib * 1024;
}

static long long parse_count(const char *text) {
    char *end = NULL;
    errno = 0;
    long long v = text ? strtoll(text, &end, 10) : -1;
    if (!text || errno || end == text || v < 0 || (*end && *end != '\n')) return -1;
    return v;
}

long long specd_cgroup_headroom(const char *memory_max, const char *memory_current) {
    if (!memory_max || strncmp(memory_max, "max", 3) == 0) return -1;
    long long max = parse_count(memory_max), cur = parse_count(memory_current);
    if (max < 0 || cur < 0) return -1;
    return max > cur ? max - cur : 0;
}

/* a small text file read whole (proc and cgroup files report a size of 0) */
static int read_small(const char *path, char *buf, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t got = 0;
    while (got + 1 < cap) {
        ssize_t r = read(fd, buf + got, cap - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    buf[got] = '\0';
    return got > 0;
}

int specd_pages_copy_fits(size_t size) {
    char buf[8192], max[64], cur[64];
    long long avail = read_small("/proc/meminfo", buf, sizeof buf) ? specd_meminfo_available(buf)
                                                                    : -1;
    if (avail < 0) return 0;
    if (read_small("/sys/fs/cgroup/memory.max", max, sizeof max) &&
        read_small("/sys/fs/cgroup/memory.current", cur, sizeof cur)) {
        long long room = specd_cgroup_headroom(max, cur);
        if (room >= 0 && room < avail) avail = room;
    }
    return (unsigned long long)size <= (unsigned long long)avail / 2;
}
