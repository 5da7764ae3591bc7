/* Shared helpers of the kernel tests in tests/gpu: the kernel library and the CUDA runtime
 * (or a skip, exit 77, with one line saying why), device buffers, random inputs, and the
 * comparison every test prints: the normalised error against the CPU twin as ggml's
 * test-backend-ops measures it, sum((gpu - cpu)^2) / sum(cpu^2), and how many elements are
 * bitwise equal. Any CUDA failure ends the test with a message (exit 1). */
#ifndef SPECD_TESTS_GPU_HARNESS_H
#define SPECD_TESTS_GPU_HARNESS_H

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ctest's skip code (SKIP_RETURN_CODE in tests/CMakeLists.txt), as tests/test_main.h has it;
 * restated so these tests build without cmocka (scripts/gpu-check builds them on machines that
 * lack it). */
#ifndef SPECD_TEST_SKIP
#define SPECD_TEST_SKIP 77
#endif

typedef struct gpu_ctx {
    const specd_cuda_kernels *k;
    const specd_cudart *rt;
} gpu_ctx;

/* The kernels and the runtime with a device, or the process exits as skipped. A kernel library
 * named in SPECD_CUDA_LIBRARY (as ctest and scripts/gpu-check name the one just built) that does
 * not load is a failure, not a skip: it would hide a broken build. */
static inline gpu_ctx gpu_open_or_skip(void) {
    specd_error err;
    gpu_ctx g = {specd_cuda_kernels_get(&err), NULL};
    if (!g.k) {
        const char *named = getenv("SPECD_CUDA_LIBRARY");
        printf("%s: %s\n", named && *named ? "FAIL" : "skipped", err.message);
        exit(named && *named ? 1 : SPECD_TEST_SKIP);
    }
    if (specd_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        exit(SPECD_TEST_SKIP);
    }
    g.rt = specd_cudart_get(&err);
    if (!g.rt) {
        printf("skipped: %s\n", err.message);
        exit(SPECD_TEST_SKIP);
    }
    return g;
}

static inline void gpu_die(const gpu_ctx *g, const char *what, int rc) {
    if (rc == SPECD_CUDA_E_ARGUMENT)
        printf("FAIL: %s refused its arguments: %s\n", what, g->k->last_refusal());
    else
        printf("FAIL: %s: CUDA error %d (%s)\n", what, rc,
               rc > 0 && g->rt->get_error_string ? g->rt->get_error_string(rc) : "?");
    exit(1);
}

/* A launcher's status, then the stream drained (a kernel that faults reports here). */
static inline void gpu_check(const gpu_ctx *g, const char *what, int rc) {
    if (rc == SPECD_CUDA_OK) rc = g->k->stream_sync(NULL);
    if (rc != SPECD_CUDA_OK) gpu_die(g, what, rc);
}

static inline void *gpu_alloc(const gpu_ctx *g, size_t bytes) {
    void *p = NULL;
    int rc = g->rt->malloc(&p, bytes ? bytes : 1);
    if (rc != SPECD_CUDA_SUCCESS) gpu_die(g, "cudaMalloc", rc);
    return p;
}

static inline void *gpu_put(const gpu_ctx *g, const void *host, size_t bytes) {
    void *p = gpu_alloc(g, bytes);
    int rc = g->rt->memcpy(p, host, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    if (rc != SPECD_CUDA_SUCCESS) gpu_die(g, "cudaMemcpy to the device", rc);
    return p;
}

static inline void gpu_get(const gpu_ctx *g, void *host, const void *dev, size_t bytes) {
    int rc = g->rt->memcpy(host, dev, bytes, SPECD_CUDA_MEMCPY_DEVICE_TO_HOST);
    if (rc != SPECD_CUDA_SUCCESS) gpu_die(g, "cudaMemcpy to the host", rc);
}

static inline void gpu_free(const gpu_ctx *g, void *p) { g->rt->free(p); }

static inline void *host_alloc(size_t bytes) {
    void *p = calloc(1, bytes ? bytes : 1);
    if (!p) {
        printf("FAIL: out of host memory\n");
        exit(1);
    }
    return p;
}

static uint64_t gpu_rng_state = 0x2545f4914f6cdd1dull;

static inline uint64_t gpu_rng_next(void) {
    uint64_t z = (gpu_rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* uniform in [-scale, scale) */
static inline void gpu_fill(float *x, size_t n, float scale) {
    for (size_t i = 0; i < n; i++)
        x[i] = (float)((double)(gpu_rng_next() >> 11) * 0x1p-52 - 1.0) * scale;
}

/* Prints "name: nmse E (threshold T), B/N bitwise equal" and returns 1 when E <= T. */
static inline int gpu_compare(const char *name, const float *gpu, const float *cpu, size_t n,
                              double threshold) {
    double err = 0.0, ref = 0.0;
    size_t equal = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)gpu[i] - (double)cpu[i];
        err += d * d;
        ref += (double)cpu[i] * (double)cpu[i];
        equal += memcmp(&gpu[i], &cpu[i], sizeof(float)) == 0;
    }
    const double nmse = ref > 0.0 ? err / ref : err;
    const int ok = nmse <= threshold; /* false for NaN */
    printf("%s: nmse %.3e (threshold %.0e), %zu/%zu bitwise equal%s\n", name, nmse, threshold,
           equal, n, ok ? "" : "  FAIL");
    return ok;
}

/* 1 when a and b hold the same bits; otherwise prints the first difference. */
static inline int gpu_same_bits(const char *what, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            printf("%s: element %zu differs: %.9g vs %.9g  FAIL\n", what, i, (double)a[i],
                   (double)b[i]);
            return 0;
        }
    return 1;
}

#endif
