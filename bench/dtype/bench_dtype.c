/* Matrix-vector products with each weight type's dot kernel: the fastest table this CPU runs
 * (AVX2/FMA where available) against the scalar reference table, measured in the same run; the
 * scalar time is the anchor. Shape: 1536 x 576 (SmolLM2's FFN gate), activation quantized once.
 * Prints per type: scalar and fastest microseconds per matvec (median of the repeats), the
 * speed-up, and the weight bytes streamed per second by the fastest kernel.
 * usage: bench_dtype [repeats] */
#include "common/alloc.h"
#include "common/clock.h"
#include "kernels/cpu/dtype.h"

#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 1536, COLS = 576 };

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1p-53 * 2.0 - 1.0);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Median ns of one matvec over reps runs; out receives the products. */
static uint64_t time_matvec(const specd_dtype_traits *t, const uint8_t *w, size_t row_bytes,
                            const void *act, float *out, int reps) {
    uint64_t *ns = malloc(sizeof *ns * (size_t)reps);
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = specd_now_ns();
        for (int i = 0; i < ROWS; i++)
            t->vec_dot(COLS, &out[i], w + (size_t)i * row_bytes, act);
        ns[r] = specd_now_ns() - t0;
    }
    qsort(ns, (size_t)reps, sizeof *ns, cmp_u64);
    uint64_t med = ns[reps / 2];
    free(ns);
    return med;
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    const uint32_t types[] = {SPECD_DTYPE_F32,  SPECD_DTYPE_F16,  SPECD_DTYPE_BF16,
                              SPECD_DTYPE_Q8_0, SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1};
    float *x = specd_alloc_array((size_t)ROWS * COLS, sizeof *x), *a = specd_alloc_array(COLS, 4);
    float *o1 = specd_alloc_array(ROWS, 4), *o2 = specd_alloc_array(ROWS, 4);
    for (size_t i = 0; i < (size_t)ROWS * COLS; i++)
        x[i] = frand();
    for (int i = 0; i < COLS; i++)
        a[i] = frand();
    printf("matvec %d x %d, median of %d; anchor = scalar reference, same run\n", ROWS, COLS, reps);
    printf("%-5s %12s %12s %9s %10s  %s\n", "type", "scalar us", "fastest us", "speed-up", "GB/s",
           "max |diff|");
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const specd_dtype_traits *s = specd_dtype_traits_scalar(types[k]);
        const specd_dtype_traits *f = specd_dtype_traits_get(types[k]);
        size_t rb = specd_dtype_row_bytes(types[k], COLS);
        uint8_t *w = specd_alloc(rb * ROWS);
        for (int i = 0; i < ROWS; i++)
            s->from_float(x + (size_t)i * COLS, w + (size_t)i * rb, COLS);
        void *act = specd_alloc(specd_dtype_row_bytes(s->vec_dot_type, COLS));
        f->from_float ? specd_dtype_traits_get(s->vec_dot_type)->from_float(a, act, COLS) : (void)0;
        uint64_t ts = time_matvec(s, w, rb, act, o1, reps);
        uint64_t tf = time_matvec(f, w, rb, act, o2, reps);
        float maxd = 0;
        for (int i = 0; i < ROWS; i++) {
            float d = o1[i] > o2[i] ? o1[i] - o2[i] : o2[i] - o1[i];
            if (d > maxd) maxd = d;
        }
        printf("%-5s %12.1f %12.1f %8.2fx %10.2f  %g\n", s->name, ts / 1e3, tf / 1e3,
               (double)ts / (double)tf, (double)(rb * ROWS) / (double)tf, maxd);
        specd_free(w);
        specd_free(act);
    }
    printf("fastest table: %s\n",
           specd_dtype_traits_get(0)->vec_dot == specd_dtype_traits_scalar(0)->vec_dot
               ? "scalar (no AVX2/FMA)"
               : "AVX2/FMA");
    specd_free(x);
    specd_free(a);
    specd_free(o1);
    specd_free(o2);
    return 0;
}
