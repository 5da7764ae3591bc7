/* bench/runtime: where the forward's time goes, per op, for a decode and for extends of 1, 2, 4, 8
 * and 16 rows (logits for every row, as bench_runtime's extend curve), through the runtime's
 * SPECD_PROFILE mode (model/runtime/runtime_internal.h): each context prints its per-op table to
 * stderr when destroyed, one table per extend size.
 *   decode:  a prefill of 512 tokens (its own table), then D one-token decodes with logits
 *   extend:  after a 256-token prefix, RUNS extends of each size, rolled back after each
 * usage: bench_profile MODEL THREADS [RUNS] [D] */
#include "specd/runtime.h"

#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SPECD_OK) {                                                                  \
            fprintf(stderr, "bench_profile: %s\n", err.message);                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_profile MODEL THREADS [RUNS] [D]\n");
        return 2;
    }
    const int threads = atoi(argv[2]);
    const int runs = argc > 3 ? atoi(argv[3]) : 20;
    const int D = argc > 4 ? atoi(argv[4]) : 256;
    if (runs < 1 || D < 1 || D > 512) {
        fprintf(stderr, "bench_profile: RUNS >= 1, D 1..512\n");
        return 2;
    }
    /* BENCH_PROFILE_CLOCK=cpu: thread CPU time per op (a loaded machine) */
    const char *clk = getenv("BENCH_PROFILE_CLOCK");
    setenv("SPECD_PROFILE", clk && *clk ? clk : "1", 1);
    specd_error err;
    specd_model *m;
    CHECK(specd_model_create(argv[1], &m, &err));
    const int32_t V = specd_model_get_info(m)->n_vocab;
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 512;
    cp.n_threads = threads;
    int32_t toks[1024];
    float *logits = malloc(sizeof(float) * (size_t)V * 16);
    if (!logits) return 1;
    for (int i = 0; i < 1024; i++)
        toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    static const int sizes[] = {1, 2, 4, 8, 16};
    for (int mode = 0; mode < 2; mode++) {
        specd_context *c;
        CHECK(specd_context_create(m, &cp, &c, &err));
        const int P = mode == 0 ? 512 : 256;
        int32_t last = P - 1;
        specd_seq_batch s = {.seq = 0, .n_tokens = P, .tokens = toks};
        specd_extend_out o = {.n_rows = 1, .rows = &last, .logits = logits};
        CHECK(specd_context_extend(c, &s, 1, &o, &err));
        if (mode == 0) {
            fprintf(stderr, "== decode: %d tokens after a %d-token prefill, %d threads\n", D, P,
                    threads);
            for (int i = 0; i < D; i++)
                CHECK(specd_context_decode(c, 0, toks[P + i], logits, &err));
        } else {
            fprintf(stderr, "== extend: %d runs per size after a %d-token prefix, %d threads\n",
                    runs, P, threads);
            for (int r = 0; r < runs; r++)
                for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
                    specd_seq_batch e = {.seq = 0, .n_tokens = sizes[z], .tokens = toks + P};
                    specd_extend_out eo = {.n_rows = sizes[z], .logits = logits};
                    CHECK(specd_context_extend(c, &e, 1, &eo, &err));
                    CHECK(specd_context_kv_truncate(c, 0, P, &err));
                }
        }
        specd_context_destroy(c);
    }
    free(logits);
    specd_model_destroy(m);
    return 0;
}
