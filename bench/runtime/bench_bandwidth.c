/* bench/runtime: read bandwidth of this machine as a decode sees it, for the roofline line of
 * bench/runtime/run. Streams over a buffer of BYTES (the model file's size: a decode reads every
 * weight once) with THREADS threads, each summing its contiguous share with 32-byte loads, as the
 * runtime's threadpool splits a matmul's rows. Prints the median over PASSES timed passes (after
 * one untimed pass that faults the pages in) in GB/s (1e9 bytes).
 * usage: bench_bandwidth BYTES THREADS [PASSES] */
#include "common/clock.h"
#include "common/threadpool.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    uint64_t sink; /* keeps the sums live */
} job;

#if defined(__x86_64__)
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint8_t *p, size_t n) {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_load_si256((const __m256i *)(p + i)));
        a1 = _mm256_add_epi64(a1, _mm256_load_si256((const __m256i *)(p + i + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_load_si256((const __m256i *)(p + i + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_load_si256((const __m256i *)(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
    uint64_t l[4];
    _mm256_storeu_si256((__m256i *)l, s);
    return l[0] + l[1] + l[2] + l[3];
}
#endif

static uint64_t sum_plain(const uint8_t *p, size_t n) {
    uint64_t s = 0, v;
    for (size_t i = 0; i + 8 <= n; i += 8) {
        memcpy(&v, p + i, 8);
        s += v;
    }
    return s;
}

static void pass(void *arg, int ith, int nth) {
    job *j = arg;
    const size_t lines = j->bytes / 128;
    const size_t b = lines * (size_t)ith / (size_t)nth * 128;
    const size_t e = lines * (size_t)(ith + 1) / (size_t)nth * 128;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx2")) {
        __atomic_fetch_add(&j->sink, sum_avx2(j->buf + b, e - b), __ATOMIC_RELAXED);
        return;
    }
#endif
    __atomic_fetch_add(&j->sink, sum_plain(j->buf + b, e - b), __ATOMIC_RELAXED);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_bandwidth BYTES THREADS [PASSES]\n");
        return 2;
    }
    const size_t bytes = (size_t)strtoull(argv[1], NULL, 10) & ~(size_t)127;
    const int threads = atoi(argv[2]);
    const int passes = argc > 3 ? atoi(argv[3]) : 9;
    if (bytes < 1024 || threads < 1 || passes < 1 || passes > 1000) {
        fprintf(stderr, "bench_bandwidth: BYTES >= 1024, THREADS >= 1, PASSES 1..1000\n");
        return 2;
    }
    uint8_t *buf = aligned_alloc(64, bytes);
    if (!buf) return 1;
    for (size_t i = 0; i < bytes; i++)
        buf[i] = (uint8_t)(i * 131u);
    specd_threadpool *pool = NULL;
    specd_error err;
    if (specd_threadpool_create(threads, &pool, &err) != SPECD_OK) {
        fprintf(stderr, "bench_bandwidth: %s\n", err.message);
        return 1;
    }
    job j = {.buf = buf, .bytes = bytes};
    specd_threadpool_run(pool, pass, &j);
    double *gbs = malloc(sizeof(double) * (size_t)passes);
    for (int p = 0; p < passes; p++) {
        const uint64_t t0 = specd_now_ns();
        specd_threadpool_run(pool, pass, &j);
        gbs[p] = (double)bytes / (double)(specd_now_ns() - t0);
    }
    qsort(gbs, (size_t)passes, sizeof *gbs, cmp_double);
    const double med =
        passes % 2 ? gbs[passes / 2] : 0.5 * (gbs[passes / 2 - 1] + gbs[passes / 2]);
    const uint64_t sink = j.sink;
    printf("bandwidth: read %.2f GB/s (%zu bytes, %d threads, median of %d passes; sink %llu)\n",
           med, bytes, threads, passes, (unsigned long long)(sink & 0xff));
    specd_threadpool_destroy(pool);
    free(gbs);
    free(buf);
    return 0;
}
