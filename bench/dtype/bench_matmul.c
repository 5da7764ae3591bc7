/* The two CPU matmul kernels side by side on SmolLM2-135M's shapes, one thread: `fast` numerics
 * (kernels/cpu/matmul_fast.c) against `llama` numerics (kernels/cpu/matmul.c, llama.cpp's
 * order), for 1 to 16 activation rows (a one-token decode, then verify steps of 2 to 16 rows).
 * The two kernels alternate rep by rep so that load drift hits both; medians of the reps.
 * Prints per shape and row count: microseconds of each, each kernel's cost against its own one
 * row (what a verified row costs beside a decode step) and fast's speed-up over llama.
 * Weights of the smaller shapes stay in the L2/L3 cache between reps, so those rows measure the
 * kernels' arithmetic; the head (28 MB) streams from memory as it does in a forward pass.
 * usage: bench_matmul [reps] */
#include "bench/bench_median.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/dtype.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"

#include <stdio.h>
#include <stdlib.h>

enum { MAX_ROWS = 16 };

typedef struct shape {
    const char *name;
    uint32_t type;
    int64_t n_out, n_in;
} shape;

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

/* the activation rows in both kernels' layouts */
typedef struct acts {
    void *fast, *llama;
    size_t fast_rb, llama_rb;
} acts;

static void run_fast(const shape *s, const void *w, const acts *a, int rows, float *y, int simd) {
    specd_matmul_rows_fast(s->type, w, s->n_in, 0, s->n_out, a->fast, a->fast_rb, rows, y,
                           s->n_out, simd);
}

static void run_llama(const shape *s, const void *w, const acts *a, int rows, float *y,
                      int simd) {
    specd_matmul_rows(specd_dtype_traits_get(s->type), s->type, w, s->n_in, 0, s->n_out,
                      a->llama, a->llama_rb, rows, y, s->n_out, simd);
}

static void bench_shape(const shape *s, int reps, int simd) {
    const specd_dtype_traits *t = specd_dtype_traits_get(s->type);
    const uint32_t vdt = t->vec_dot_type;
    const size_t wrb = specd_dtype_row_bytes(s->type, s->n_in);
    float *row = specd_alloc_array((size_t)s->n_in, sizeof *row);
    char *w = specd_alloc(wrb * (size_t)s->n_out);
    for (int64_t o = 0; o < s->n_out; o++) {
        for (int64_t i = 0; i < s->n_in; i++)
            row[i] = frand();
        specd_dtype_traits_scalar(s->type)->from_float(row, w + (size_t)o * wrb, s->n_in);
    }
    acts a = {.fast_rb = specd_fast_row_bytes(s->type, s->n_in),
              .llama_rb = specd_dtype_row_bytes(vdt, s->n_in)};
    a.fast = specd_alloc(a.fast_rb * MAX_ROWS);
    a.llama = specd_alloc(a.llama_rb * MAX_ROWS);
    for (int r = 0; r < MAX_ROWS; r++) {
        for (int64_t i = 0; i < s->n_in; i++)
            row[i] = frand();
        specd_fast_quantize_row(row, s->n_in, (char *)a.fast + (size_t)r * a.fast_rb, simd);
        specd_quantize_rows(specd_dtype_traits_get(vdt), vdt, row, s->n_in, 1, s->n_in,
                            (char *)a.llama + (size_t)r * a.llama_rb);
    }
    float *y = specd_alloc_array((size_t)s->n_out * MAX_ROWS, sizeof *y);
    double *us_f = malloc(sizeof *us_f * (size_t)reps), *us_l = malloc(sizeof *us_l * (size_t)reps);
    const int row_counts[] = {1, 2, 4, 8, 16};
    double one_f = 0, one_l = 0;
    printf("%s (%s, %lld x %lld)\n", s->name, t->name, (long long)s->n_out, (long long)s->n_in);
    printf("  %4s %10s %10s %10s %10s %9s\n", "rows", "fast us", "llama us", "fast/1row",
           "llama/1row", "speed-up");
    for (size_t k = 0; k < sizeof row_counts / sizeof row_counts[0]; k++) {
        const int rows = row_counts[k];
        run_fast(s, w, &a, rows, y, simd); /* warm the caches and the branch predictors */
        run_llama(s, w, &a, rows, y, simd);
        for (int i = 0; i < reps; i++) {
            uint64_t t0 = specd_now_ns();
            run_fast(s, w, &a, rows, y, simd);
            uint64_t t1 = specd_now_ns();
            run_llama(s, w, &a, rows, y, simd);
            uint64_t t2 = specd_now_ns();
            us_f[i] = (double)(t1 - t0) / 1e3;
            us_l[i] = (double)(t2 - t1) / 1e3;
        }
        const double f = bench_median(us_f, reps), l = bench_median(us_l, reps);
        if (rows == 1) one_f = f, one_l = l;
        printf("  %4d %10.1f %10.1f %10.2f %10.2f %8.2fx\n", rows, f, l, f / one_f, l / one_l,
               l / f);
    }
    free(us_f);
    free(us_l);
    specd_free(y);
    specd_free(a.fast);
    specd_free(a.llama);
    specd_free(w);
    specd_free(row);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    specd_cpu_path path;
    char msg[160];
    if (!specd_cpu_path_get(&path, msg, sizeof msg)) {
        fprintf(stderr, "bench_matmul: %s\n", msg);
        return 2;
    }
    const int simd = (int)path;
    const shape shapes[] = {
        {"attention q and o, FFN-shaped input", SPECD_DTYPE_Q4_1, 576, 576},
        {"FFN gate and up", SPECD_DTYPE_Q4_1, 1536, 576},
        {"FFN down", SPECD_DTYPE_Q4_1, 576, 1536},
        {"output head", SPECD_DTYPE_Q8_0, 49152, 576},
    };
    printf("one thread, median of %d reps, the kernels alternating; cpu path: %s\n", reps,
           specd_cpu_path_name(path));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        bench_shape(&shapes[i], reps, simd);
    return 0;
}
