/* libspecd_cuda.so's small row operations of the runtime's forward pass against their CPU twins,
 * bit for bit: add (residuals, and biases with ld_b 0) against float addition, store_f16 (K/V rows
 * into the cache) against kernels/cpu/fp16.h's specd_fp32_to_fp16 (specials included), gather,
 * and move_rows_f16 against the sequential memcpy loop of the CPU's cache compaction (moves whose
 * sources are earlier moves' destinations included). Batch invariance is trivial here (one
 * operation per element) but checked for add. Skipped (exit 77) without the library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/fp16.h"

enum { ROWS = 64, N = 576 };

static int check_add(const gpu_ctx *g) {
    const size_t n = (size_t)ROWS * N, bytes = n * sizeof(float);
    float *a = host_alloc(bytes), *b = host_alloc(bytes), *cpu = host_alloc(bytes);
    float *gpu = host_alloc(bytes), *bias = host_alloc(N * sizeof(float));
    gpu_fill(a, n, 3.0f);
    gpu_fill(b, n, 1e-3f);
    gpu_fill(bias, N, 0.5f);
    float *da = gpu_put(g, a, bytes), *db = gpu_put(g, b, bytes), *dy = gpu_alloc(g, bytes);
    float *dbias = gpu_put(g, bias, N * sizeof(float));
    for (size_t i = 0; i < n; i++)
        cpu[i] = a[i] + b[i];
    gpu_check(g, "add", g->k->add(da, N, db, N, dy, N, ROWS, N, NULL));
    gpu_get(g, gpu, dy, bytes);
    int ok = gpu_same_bits("add", gpu, cpu, n);
    for (int r = 0; r < ROWS; r++) /* each row alone, in place (y = a) */
        gpu_check(g, "add", g->k->add(da + r * N, N, db + r * N, N, da + r * N, N, 1, N, NULL));
    gpu_get(g, gpu, da, bytes);
    ok &= gpu_same_bits("add, rows alone in place", gpu, cpu, n);
    gpu_check(g, "add", g->k->add(db, N, dbias, 0, dy, N, ROWS, N, NULL));
    gpu_get(g, gpu, dy, bytes);
    for (size_t i = 0; i < n; i++)
        cpu[i] = b[i] + bias[i % N];
    ok &= gpu_same_bits("add, bias (ld_b 0)", gpu, cpu, n);
    printf("add: %s\n", ok ? "bitwise" : "FAIL");
    gpu_free(g, da), gpu_free(g, db), gpu_free(g, dy), gpu_free(g, dbias);
    free(a), free(b), free(cpu), free(gpu), free(bias);
    return ok;
}

static int check_store(const gpu_ctx *g) {
    const int32_t rows = 8, cache_rows = 20;
    const size_t n = (size_t)rows * N;
    float *x = host_alloc(n * sizeof(float));
    gpu_fill(x, n, 70000.0f); /* past F16's range: overflow to infinity */
    for (size_t i = 0; i < n; i += 7)
        x[i] *= 1e-9f; /* subnormal halves and underflow to zero */
    x[1] = NAN, x[2] = -NAN, x[3] = INFINITY, x[4] = -0.0f, x[5] = 65519.0f, x[6] = 65520.0f;
    const int32_t dst[8] = {3, 0, 19, 7, 8, 12, 1, 15};
    uint16_t *cache = host_alloc((size_t)cache_rows * N * 2),
             *want = host_alloc((size_t)cache_rows * N * 2);
    memset(want, 0x5a, (size_t)cache_rows * N * 2);
    for (int32_t r = 0; r < rows; r++)
        for (int32_t i = 0; i < N; i++)
            want[(size_t)dst[r] * N + (size_t)i] = specd_fp32_to_fp16(x[(size_t)r * N + (size_t)i]);
    float *dx = gpu_put(g, x, n * sizeof(float));
    int32_t *ddst = gpu_put(g, dst, sizeof dst);
    uint16_t *dc = gpu_alloc(g, (size_t)cache_rows * N * 2);
    memset(cache, 0x5a, (size_t)cache_rows * N * 2);
    int rc = g->rt->memcpy(dc, cache, (size_t)cache_rows * N * 2, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    if (rc) gpu_die(g, "cudaMemcpy", rc);
    gpu_check(g, "store_f16", g->k->store_f16(dx, N, rows, N, ddst, dc, N, NULL));
    gpu_get(g, cache, dc, (size_t)cache_rows * N * 2);
    size_t equal = 0;
    for (size_t i = 0; i < (size_t)cache_rows * N; i++)
        equal += cache[i] == want[i];
    const int ok = equal == (size_t)cache_rows * N;
    printf("store_f16: %zu/%zu halves equal the CPU's specd_fp32_to_fp16%s\n", equal,
           (size_t)cache_rows * N, ok ? "" : "  FAIL");
    gpu_free(g, dx), gpu_free(g, ddst), gpu_free(g, dc);
    free(x), free(cache), free(want);
    return ok;
}

static int check_gather(const gpu_ctx *g) {
    const size_t n = (size_t)ROWS * N, bytes = n * sizeof(float);
    float *x = host_alloc(bytes), *y = host_alloc(bytes), *want = host_alloc(bytes);
    gpu_fill(x, n, 1.0f);
    int32_t rows[ROWS];
    for (int j = 0; j < ROWS; j++)
        rows[j] = (j * 37 + 5) % ROWS;
    for (int j = 0; j < ROWS; j++)
        memcpy(want + (size_t)j * N, x + (size_t)rows[j] * N, N * sizeof(float));
    float *dx = gpu_put(g, x, bytes), *dy = gpu_alloc(g, bytes);
    int32_t *dr = gpu_put(g, rows, sizeof rows);
    gpu_check(g, "gather", g->k->gather(dx, N, dr, ROWS, N, dy, N, NULL));
    gpu_get(g, y, dy, bytes);
    const int ok = gpu_same_bits("gather", y, want, n);
    printf("gather: %s\n", ok ? "bitwise" : "FAIL");
    gpu_free(g, dx), gpu_free(g, dy), gpu_free(g, dr);
    free(x), free(y), free(want);
    return ok;
}

static int check_move(const gpu_ctx *g) {
    enum { PLANES = 3, PROWS = 40, LD = 72, W = 64 };
    const size_t plane = (size_t)PROWS * LD + 16, total = plane * PLANES;
    uint16_t *h = host_alloc(total * 2), *want = host_alloc(total * 2),
             *got = host_alloc(total * 2);
    for (size_t i = 0; i < total; i++)
        h[i] = (uint16_t)(gpu_rng_next() >> 48);
    /* keep rows 2, 3, 9, 10, 11, 30 from row 1 on: row 3 moves to 2 after row 2 moved to 1 */
    const int32_t src[6] = {2, 3, 9, 10, 11, 30}, dst[6] = {1, 2, 3, 4, 5, 6};
    memcpy(want, h, total * 2);
    for (int p = 0; p < PLANES; p++)
        for (int j = 0; j < 6; j++)
            memcpy(want + p * plane + (size_t)dst[j] * LD, want + p * plane + (size_t)src[j] * LD,
                   W * 2);
    uint16_t *dh = gpu_put(g, h, total * 2);
    int32_t *ds = gpu_put(g, src, sizeof src), *dd = gpu_put(g, dst, sizeof dst);
    gpu_check(g, "move_rows_f16",
              g->k->move_rows_f16(dh, (int64_t)plane, PLANES, LD, W, ds, dd, 6, NULL));
    gpu_get(g, got, dh, total * 2);
    const int ok = memcmp(got, want, total * 2) == 0;
    printf("move_rows_f16: %s\n", ok ? "the CPU loop's bytes" : "differs from the CPU loop  FAIL");
    gpu_free(g, dh), gpu_free(g, ds), gpu_free(g, dd);
    free(h), free(want), free(got);
    return ok;
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    int ok = check_add(&g);
    ok &= check_store(&g);
    ok &= check_gather(&g);
    ok &= check_move(&g);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
