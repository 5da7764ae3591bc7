/* bench/runtime: the CPU runtime's prefill, decode and extend curve on the default model, in the
 * same shape as bench/runtime/llama_bench.py (the llama.cpp anchor; bench/runtime/run runs both and
 * prints ratios). Token ids are (i * 7919 + 13) % n_vocab on both sides.
 *   prefill: one extend of P tokens, logits for the last row
 *   decode:  D one-token decodes with logits
 *   extend:  after a 256-token prefix, k = 1..16 new tokens with logits for all k rows, rolled back
 * Prints medians over RUNS, then peak RSS beside model file + KV cache + 100 MB. The numerics
 * mode is SPECD_NUMERICS's (default fast), named in the output.
 * usage: bench_runtime MODEL THREADS [RUNS] [P] [D] */
#include "specd/runtime.h"

#include "bench/bench_median.h"
#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>


#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SPECD_OK) {                                                                  \
            fprintf(stderr, "bench_runtime: %s\n", err.message);                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_runtime MODEL THREADS [RUNS] [P] [D]\n");
        return 2;
    }
    const char *path = argv[1];
    const int threads = atoi(argv[2]);
    const int runs = argc > 3 ? atoi(argv[3]) : 5;
    const int P = argc > 4 ? atoi(argv[4]) : 512, D = argc > 5 ? atoi(argv[5]) : 256;
    if (runs < 1 || runs > 100 || P < 257 || P > 512 || D < 1 || P + D > 1024) {
        fprintf(stderr, "bench_runtime: RUNS 1..100, P 257..512, D >= 1, P + D <= 1024\n");
        return 2;
    }
    specd_error err;
    specd_model *m;
    CHECK(specd_model_create(path, &m, &err));
    const int32_t V = specd_model_get_info(m)->n_vocab;
    specd_context_params cp = specd_context_default_params();
    cp.n_ctx = 1024;
    cp.n_batch = 512;
    cp.n_threads = threads;
    specd_context *c;
    CHECK(specd_context_create(m, &cp, &c, &err));
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(P + D));
    float *logits = malloc(sizeof(float) * (size_t)V * 16);
    for (int i = 0; i < P + D; i++)
        toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    double pre[100], dec[100], ext[16][100];
    for (int r = 0; r < runs; r++) {
        CHECK(specd_context_kv_truncate(c, 0, 0, &err));
        int32_t last = P - 1;
        specd_seq_batch s = {.seq = 0, .n_tokens = P, .tokens = toks};
        specd_extend_out o = {.n_rows = 1, .rows = &last, .logits = logits};
        uint64_t t0 = specd_now_ns();
        CHECK(specd_context_extend(c, &s, 1, &o, &err));
        pre[r] = P / ((double)(specd_now_ns() - t0) * 1e-9);
        t0 = specd_now_ns();
        for (int i = 0; i < D; i++)
            CHECK(specd_context_decode(c, 0, toks[P + i], logits, &err));
        dec[r] = D / ((double)(specd_now_ns() - t0) * 1e-9);
        CHECK(specd_context_kv_truncate(c, 0, 256, &err));
        for (int k = 1; k <= 16; k++) {
            specd_seq_batch e = {.seq = 0, .n_tokens = k, .tokens = toks + 256};
            specd_extend_out eo = {.n_rows = k, .logits = logits};
            t0 = specd_now_ns();
            CHECK(specd_context_extend(c, &e, 1, &eo, &err));
            ext[k - 1][r] = (double)(specd_now_ns() - t0) * 1e-6;
            CHECK(specd_context_kv_truncate(c, 0, 256, &err));
        }
    }
    printf("specd: numerics %s\n", specd_numerics_name(specd_context_numerics(c)));
    printf("specd: prefill %.1f tok/s\n", bench_median(pre, runs));
    printf("specd: decode %.1f tok/s\n", bench_median(dec, runs));
    printf("specd: extend_ms");
    for (int k = 0; k < 16; k++)
        printf(" %.3f", bench_median(ext[k], runs));
    printf("\n");
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    struct stat st;
    const double mb = 1024.0 * 1024.0;
    const double file_mb = stat(path, &st) == 0 ? (double)st.st_size / mb : 0.0;
    const double kv_mb = (double)specd_context_kv_bytes(c) / mb;
    printf("specd: peak_rss %.1f MB, budget %.1f MB (model file %.1f + KV %.1f + 100), context "
           "%.1f MB\n",
           (double)ru.ru_maxrss / 1024.0, file_mb + kv_mb + 100.0, file_mb, kv_mb,
           (double)specd_context_memory_bytes(c) / mb);
    free(toks);
    free(logits);
    specd_context_destroy(c);
    specd_model_destroy(m);
    return 0;
}
