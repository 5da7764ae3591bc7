/* bench/gpu/bench_decode: the CUDA backend's speed on the default model, through the public
 * runtime API only (a context with device SPECD_DEVICE_CUDA). Token ids are (i * 7919 + 13) %
 * n_vocab, as in bench/runtime. Every figure is the median of RUNS runs:
 *   decode   one sequence: a 16-token prompt, then D one-token decodes with logits to the host
 *            (llama-bench's tg shape; scripts/gpu-check prints it beside llama-bench -n D)
 *   extend   after a 64-token prefix, k = 1..16 new rows of one sequence with logits for all k
 *            (a verify step), rolled back; the time of k rows over the time of 1 row
 *   batch    B = 1, 8, 64 sequences each a 16-token prompt, then STEPS extends of one new token
 *            per sequence with logits for every row: new tokens per second over all sequences
 *   memory   the device memory the context holds (weights, KV caches, scratch)
 *   graphs   the decode above again on a second context with SPECD_CUDA_GRAPHS=0 (its kernels
 *            launched one by one; the first context replays one CUDA graph per step shape), in
 *            the same runs, and the ratio
 * launches the kernels one decode step runs (specd_context_device_launches), per layer, and the
 * launch calls the host makes for them with graphs on and off (specd_context_device_graph_stats)
 * Without a CUDA device, a CUDA build or the model, it says why, prints "skipped" and exits 0.
 * The last lines, "FIGURE name value", are what scripts/gpu-check copies into its report.
 *   usage: bench_decode [--device cpu|cuda] [MODEL] [RUNS] [D]
 *   MODEL (or "") defaults to $SPECD_MODEL, $SPECD_TEST_MODEL, then the fetch-model cache. --device cpu
 *   runs the same code on the CPU backend, only to check the benchmark itself on a machine
 *   without a GPU (bench/runtime measures the CPU). */
#include "specd/runtime.h"

#include "bench/bench_median.h"
#include "common/clock.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { PROMPT = 16, PREFIX = 64, K_MAX = 16, EXTEND_REPS = 10, STEPS = 32, MAX_RUNS = 50 };
static const int batch_sizes[] = {1, 8, 64};
enum { N_BATCH_SIZES = 3, MAX_SEQ = 64 };

static double seconds_since(uint64_t t0) { return (double)(specd_now_ns() - t0) * 1e-9; }

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) != SPECD_OK) {                                                                  \
            fprintf(stderr, "bench_decode: %s failed: %s\n", #call, err.message);                  \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static const char *default_model(char *buf, size_t size) {
    const char *env = getenv("SPECD_MODEL");
    if (env && *env)
        return env;
    env = getenv("SPECD_TEST_MODEL");
    if (env && *env)
        return env;
    const char *dir = getenv("SPECD_MODEL_DIR");
    if (dir && *dir)
        snprintf(buf, size, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", dir);
    else
        snprintf(buf, size, "%s/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf",
                 getenv("HOME") ? getenv("HOME") : ".");
    return buf;
}

/* Replaces seq's cache with the first n ids of toks. */
static specd_status prefill(specd_context *c, int32_t seq, const int32_t *toks, int32_t n,
                            specd_error *err) {
    specd_status st = specd_context_kv_truncate(c, seq, 0, err);
    if (st != SPECD_OK)
        return st;
    specd_seq_batch s = {.seq = seq, .n_tokens = n, .tokens = toks};
    return specd_context_extend(c, &s, 1, NULL, err);
}

int main(int argc, char **argv) {
    char buf[4096];
    specd_error err;
    int32_t device = SPECD_DEVICE_CUDA, device_index = 0;
    if (argc > 2 && strcmp(argv[1], "--device") == 0) {
        if (specd_device_parse(argv[2], &device, &device_index, &err) != SPECD_OK) {
            fprintf(stderr, "bench_decode: %s\n", err.message);
            return 2;
        }
        argc -= 2;
        argv += 2;
    }
    const char *path = argc > 1 && *argv[1] ? argv[1] : default_model(buf, sizeof buf);
    const int runs = argc > 2 ? atoi(argv[2]) : 5;
    const int D = argc > 3 ? atoi(argv[3]) : 128;
    if (runs < 1 || runs > MAX_RUNS || D < 1 || D > 1024) {
        fprintf(stderr, "usage: bench_decode [--device cpu|cuda] [MODEL] [RUNS 1..%d] [D 1..1024]\n",
                MAX_RUNS);
        return 2;
    }
    specd_model *m;
    if (specd_model_create(path, &m, &err) != SPECD_OK) {
        printf("bench_decode: skipped: no model at %s (%s)\n", path, err.message);
        return 0;
    }
    const specd_model_info *info = specd_model_get_info(m);
    const int32_t V = info->n_vocab;

    specd_context_params cp = specd_context_default_params();
    cp.device = device;
    cp.device_index = device_index;
    cp.n_seq = MAX_SEQ;
    cp.n_ctx = PROMPT + D + PREFIX + K_MAX + STEPS + 8;
    cp.n_batch = MAX_SEQ;
    specd_context *c, *c_off;
    if (specd_context_create(m, &cp, &c, &err) != SPECD_OK) {
        printf("bench_decode: skipped: no %s context (%s)\n", specd_device_name(device),
               err.message);
        specd_model_destroy(m);
        return 0;
    }
    /* the graphs-off twin: one sequence is all its decode needs (the weights are shared) */
    specd_context_params cp_off = cp;
    cp_off.n_seq = 1;
    setenv("SPECD_CUDA_GRAPHS", "0", 1);
    const specd_status st_off = specd_context_create(m, &cp_off, &c_off, &err);
    unsetenv("SPECD_CUDA_GRAPHS");
    if (st_off != SPECD_OK) {
        fprintf(stderr, "bench_decode: the graphs-off context: %s\n", err.message);
        return 1;
    }
    if (specd_context_device(c) != device) {
        fprintf(stderr, "bench_decode: asked for a %s context and got %s\n",
                specd_device_name(device), specd_device_name(specd_context_device(c)));
        return 1;
    }
    const int32_t n_tok = cp.n_ctx;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)n_tok);
    float *logits = malloc(sizeof(float) * (size_t)V * MAX_SEQ);
    if (!toks || !logits) {
        fprintf(stderr, "bench_decode: out of memory\n");
        return 1;
    }
    for (int32_t i = 0; i < n_tok; i++)
        toks[i] = (int32_t)(((int64_t)i * 7919 + 13) % V);
    printf("bench_decode: %s (%d layers, n_embd %d, n_vocab %d), device %s, %d runs\n", path,
           info->n_layer, info->n_embd, V, specd_device_name(device), runs);

    /* Warm-up: the first calls pay for lazy module loads and allocator growth. */
    specd_device_graph_stats gs_on, gs_off;
    CHECK(prefill(c, 0, toks, PROMPT, &err));
    CHECK(prefill(c_off, 0, toks, PROMPT, &err));
    for (int i = 0; i < 8; i++) {
        CHECK(specd_context_decode(c, 0, toks[PROMPT + i], logits, &err));
        CHECK(specd_context_decode(c_off, 0, toks[PROMPT + i], logits, &err));
    }
    const int32_t launches = specd_context_device_launches(c);
    const int32_t launches_off = specd_context_device_launches(c_off);
    specd_context_device_graph_stats(c, &gs_on);
    specd_context_device_graph_stats(c_off, &gs_off);

    double dec[MAX_RUNS], dec_off[MAX_RUNS], ext[K_MAX + 1][MAX_RUNS], bat[N_BATCH_SIZES][MAX_RUNS];
    for (int r = 0; r < runs; r++) {
        CHECK(prefill(c, 0, toks, PROMPT, &err));
        uint64_t t0 = specd_now_ns();
        for (int i = 0; i < D; i++)
            CHECK(specd_context_decode(c, 0, toks[PROMPT + i], logits, &err));
        dec[r] = D / seconds_since(t0);
        CHECK(prefill(c_off, 0, toks, PROMPT, &err));
        t0 = specd_now_ns();
        for (int i = 0; i < D; i++)
            CHECK(specd_context_decode(c_off, 0, toks[PROMPT + i], logits, &err));
        dec_off[r] = D / seconds_since(t0);

        CHECK(prefill(c, 0, toks, PREFIX, &err));
        for (int k = 1; k <= K_MAX; k++) {
            double reps[EXTEND_REPS];
            for (int i = 0; i < EXTEND_REPS; i++) {
                specd_seq_batch e = {.seq = 0, .n_tokens = k, .tokens = toks + PREFIX};
                specd_extend_out eo = {.n_rows = k, .logits = logits};
                t0 = specd_now_ns();
                CHECK(specd_context_extend(c, &e, 1, &eo, &err));
                reps[i] = seconds_since(t0);
                CHECK(specd_context_kv_truncate(c, 0, PREFIX, &err));
            }
            ext[k][r] = bench_median(reps, EXTEND_REPS);
        }

        for (int b = 0; b < N_BATCH_SIZES; b++) {
            const int B = batch_sizes[b];
            specd_seq_batch sb[MAX_SEQ];
            for (int s = 0; s < B; s++)
                CHECK(prefill(c, s, toks + s, PROMPT, &err));
            t0 = specd_now_ns();
            for (int step = 0; step < STEPS; step++) {
                for (int s = 0; s < B; s++)
                    sb[s] = (specd_seq_batch){
                        .seq = s, .n_tokens = 1, .tokens = toks + PROMPT + s + step};
                specd_extend_out bo = {.n_rows = B, .logits = logits};
                CHECK(specd_context_extend(c, sb, B, &bo, &err));
            }
            bat[b][r] = (double)B * STEPS / seconds_since(t0);
        }
    }

    const double decode = bench_median(dec, runs), decode_off = bench_median(dec_off, runs);
    specd_device_graph_stats gs;
    specd_context_device_graph_stats(c, &gs);
    double ext_ms[K_MAX + 1];
    for (int k = 1; k <= K_MAX; k++)
        ext_ms[k] = bench_median(ext[k], runs) * 1e3;
    double batch[N_BATCH_SIZES];
    for (int b = 0; b < N_BATCH_SIZES; b++)
        batch[b] = bench_median(bat[b], runs);
    size_t w = 0, kv = 0, scratch = 0;
    specd_context_device_memory(c, &w, &kv, &scratch);

    printf("\ndecode, one sequence (%d-token prompt, %d tokens, logits to host): %.1f tok/s "
           "(%.3f ms/token)\n",
           PROMPT, D, decode, 1e3 / decode);
    if (device != SPECD_DEVICE_CUDA)
        printf("  no CUDA graphs on this backend; the same decode on the second context: %.1f "
               "tok/s\n",
               decode_off);
    else
        printf("  with CUDA graphs %s: %.1f tok/s; SPECD_CUDA_GRAPHS=0 (kernels launched one by "
               "one): %.1f tok/s (%.3f ms/token); graphs / no graphs %.2fx\n",
               gs.enabled ? "on" : "OFF (unavailable or a capture failed)", decode, decode_off,
               1e3 / decode_off, decode / decode_off);
    printf("  graphs over the whole run: %lld captures, %lld graph steps, %lld evictions, %d "
           "cached (of %d), %lld failed captures\n",
           (long long)gs.captures, (long long)gs.replays, (long long)gs.evictions, gs.cached,
           gs.capacity, (long long)gs.fallbacks);
    printf("\nextend of k rows after a %d-token prefix, logits for every row:\n", PREFIX);
    printf("%4s %10s %14s %12s\n", "k", "ms", "ms / extend(1)", "rows/s");
    for (int k = 1; k <= K_MAX; k++)
        printf("%4d %10.3f %14.2f %12.0f\n", k, ext_ms[k], ext_ms[k] / ext_ms[1],
               k / (ext_ms[k] * 1e-3));
    printf("\nbatched decode (%d-token prompts, %d steps of one token per sequence):\n", PROMPT,
           STEPS);
    printf("%10s %14s %18s\n", "sequences", "tok/s total", "ms per step");
    for (int b = 0; b < N_BATCH_SIZES; b++)
        printf("%10d %14.1f %18.3f\n", batch_sizes[b], batch[b],
               1e3 * batch_sizes[b] / batch[b]);
    const double mib = 1024.0 * 1024.0;
    printf("\ndevice memory: weights %.1f MiB, KV caches %.1f MiB (%d sequences x %d rows), "
           "scratch %.1f MiB, total %.1f MiB\n",
           (double)w / mib, (double)kv / mib, cp.n_seq, cp.n_ctx, (double)scratch / mib,
           (double)(w + kv + scratch) / mib);
    if (launches > 0) {
        printf("kernels per decode step: %d, %.1f per layer (%d layers; embed, output norm "
               "and head included)\n",
               launches, (double)launches / info->n_layer, info->n_layer);
        printf("host launch calls per decode step: %d with graphs (%s), %d without (%.1f per "
               "layer)\n",
               gs_on.last_host_launches,
               gs_on.last_graphed ? "one graph launch" : "NOT run as a graph", launches_off,
               (double)launches_off / info->n_layer);
    } else
        printf("kernel launches: not counted on this backend\n");

    printf("\nFIGURE decode_tok_s %.1f\n", decode);
    printf("FIGURE decode_ms_per_token %.4f\n", 1e3 / decode);
    printf("FIGURE decode_tok_s_graphs_off %.1f\n", decode_off);
    printf("FIGURE decode_graphs_speedup %.3f\n", decode / decode_off);
    printf("FIGURE graphs_enabled %d\n", gs.enabled);
    for (int k = 1; k <= K_MAX; k++)
        printf("FIGURE extend_ms_k%d %.4f\nFIGURE extend_ratio_k%d %.3f\n", k, ext_ms[k], k,
               ext_ms[k] / ext_ms[1]);
    for (int b = 0; b < N_BATCH_SIZES; b++)
        printf("FIGURE batch%d_tok_s %.1f\n", batch_sizes[b], batch[b]);
    if (launches > 0)
        printf("FIGURE launches_per_step %d\nFIGURE launches_per_layer %.1f\n"
               "FIGURE host_launches_per_step_graphs %d\n"
               "FIGURE host_launches_per_step_no_graphs %d\n"
               "FIGURE host_launches_per_layer_no_graphs %.1f\n",
               launches, (double)launches / info->n_layer, gs_on.last_host_launches, launches_off,
               (double)launches_off / info->n_layer);
    printf("FIGURE device_weights_mib %.1f\nFIGURE device_kv_mib %.1f\n"
           "FIGURE device_scratch_mib %.1f\n",
           (double)w / mib, (double)kv / mib, (double)scratch / mib);

    free(toks);
    free(logits);
    specd_context_destroy(c);
    specd_context_destroy(c_off);
    specd_model_destroy(m);
    return 0;
}
