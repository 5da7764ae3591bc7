/* Helpers shared by the runtime tests: contexts with a thread count, golden-file parsing (the
 * model itself comes from the model fixture, fixture_model.h). */
#ifndef SPECD_TESTS_RUNTIME_RT_TEST_UTIL_H
#define SPECD_TESTS_RUNTIME_RT_TEST_UTIL_H

#include "fixture_model.h"
#include "test_main.h"

#include "kernels/cpu/cpu_dispatch.h"
#include "specd/runtime.h"

#include <string.h>

/* A context in numerics mode `numerics` (specd_numerics), cut to n_layers layers (0 = all). */
static inline specd_context *rt_test_context_mode(const specd_model *m, int n_seq, int n_ctx,
                                                  int n_batch, int n_threads, int32_t numerics,
                                                  int32_t n_layers) {
    specd_context_params p = specd_context_default_params();
    p.numerics = numerics;
    p.n_layers = n_layers;
    p.n_seq = n_seq;
    p.n_ctx = n_ctx;
    p.n_batch = n_batch;
    p.n_threads = n_threads;
    specd_context *c = NULL;
    specd_error err;
    if (specd_context_create(m, &p, &c, &err) != SPECD_OK) {
        fprintf(stderr, "context: %s\n", err.message);
        exit(1);
    }
    return c;
}

/* A context in the default numerics (SPECD_NUMERICS, else fast) with every layer. */
static inline specd_context *rt_test_context(const specd_model *m, int n_seq, int n_ctx,
                                             int n_batch, int n_threads) {
    return rt_test_context_mode(m, n_seq, n_ctx, n_batch, n_threads,
                                specd_context_default_params().numerics, 0);
}

/* The CPU path this process runs (SPECD_CPU_PATH or the best), printed; 0 after printing why when
 * SPECD_CPU_PATH names one this machine cannot run (the test then skips). */
static inline int rt_test_cpu_path(void) {
    specd_cpu_path path;
    char msg[160];
    if (!specd_cpu_path_get(&path, msg, sizeof msg)) {
        fprintf(stderr, "%s: skipped\n", msg);
        return 0;
    }
    fprintf(stderr, "cpu path: %s\n", specd_cpu_path_name(path));
    return 1;
}

/* Opens tests/data/<name> under $SPECD_SOURCE_DIR. */
static inline FILE *rt_test_data(const char *name) {
    const char *src = getenv("SPECD_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/%s", src ? src : ".", name);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    return f;
}

/* Skips '#' comment lines; returns 1 when the next word equals want. */
static inline int rt_expect_word(FILE *f, const char *want) {
    char w[64];
    for (;;) {
        if (fscanf(f, " %63s", w) != 1) return 0;
        if (w[0] != '#') break;
        int ch;
        while ((ch = fgetc(f)) != '\n' && ch != EOF) {
        }
    }
    return strcmp(w, want) == 0;
}

/* Lowest index of the largest value (numpy's argmax rule). */
static inline int32_t rt_argmax(const float *x, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

#endif
