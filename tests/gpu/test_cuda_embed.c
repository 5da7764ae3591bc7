/* libspecd_cuda.so's input rows against the CPU's dequantization (to_float of each table type):
 * token rows gathered from F32, F16, Q4_0, Q4_1 and Q8_0 tables, float vectors copied where the
 * id is negative, and a NaN row for an id past the vocabulary. Skipped (exit 77) without the
 * kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/dtype.h"

enum { VOCAB = 1000, EMBD = 576, ROWS = 40, BAD_ROW = 7 };

static int check(const gpu_ctx *g, uint32_t type) {
    const specd_dtype_traits *t = specd_dtype_traits_scalar(type);
    const size_t row_bytes = specd_dtype_row_bytes(type, EMBD);
    float *tf = host_alloc((size_t)VOCAB * EMBD * sizeof(float));
    uint8_t *table = host_alloc(VOCAB * row_bytes);
    float *vec = host_alloc((size_t)ROWS * EMBD * sizeof(float));
    float *cpu = host_alloc((size_t)ROWS * EMBD * sizeof(float));
    float *gpu = host_alloc((size_t)ROWS * EMBD * sizeof(float));
    gpu_fill(tf, (size_t)VOCAB * EMBD, 0.5f);
    gpu_fill(vec, (size_t)ROWS * EMBD, 4.0f);
    for (int v = 0; v < VOCAB; v++)
        t->from_float(tf + (size_t)v * EMBD, table + v * row_bytes, EMBD);
    int32_t ids[ROWS];
    for (int r = 0; r < ROWS; r++) {
        ids[r] = r % 5 == 3 ? -1 : (int32_t)(gpu_rng_next() % VOCAB);
        if (r == 0) ids[r] = VOCAB - 1;
        if (r == BAD_ROW) ids[r] = VOCAB; /* past the vocabulary */
        float *out = cpu + (size_t)r * EMBD;
        if (ids[r] < 0)
            memcpy(out, vec + (size_t)r * EMBD, EMBD * sizeof(float));
        else if (ids[r] < VOCAB)
            t->to_float(table + (size_t)ids[r] * row_bytes, out, EMBD);
    }
    void *dt = gpu_put(g, table, VOCAB * row_bytes);
    int32_t *dids = gpu_put(g, ids, sizeof ids);
    float *dvec = gpu_put(g, vec, (size_t)ROWS * EMBD * sizeof(float));
    float *dy = gpu_alloc(g, (size_t)ROWS * EMBD * sizeof(float));
    gpu_check(g, "embed", g->k->embed(type, dt, VOCAB, EMBD, dids, dvec, EMBD, dy, EMBD, ROWS, NULL));
    gpu_get(g, gpu, dy, (size_t)ROWS * EMBD * sizeof(float));
    int nan_row = 1;
    for (int e = 0; e < EMBD; e++)
        nan_row &= isnan(gpu[(size_t)BAD_ROW * EMBD + e]);
    /* the bad row is compared as zeros on both sides, having been checked for NaN */
    memset(gpu + (size_t)BAD_ROW * EMBD, 0, EMBD * sizeof(float));
    char name[48];
    snprintf(name, sizeof name, "embed %s", t->name);
    int ok = gpu_compare(name, gpu, cpu, (size_t)ROWS * EMBD, 1e-7);
    printf("%s: id past the vocabulary gives %s\n", name, nan_row ? "a NaN row" : "NO NaN row  FAIL");
    gpu_free(g, dt), gpu_free(g, dids), gpu_free(g, dvec), gpu_free(g, dy);
    free(tf), free(table), free(vec), free(cpu), free(gpu);
    return ok && nan_row;
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const uint32_t types[] = {SPECD_DTYPE_F32, SPECD_DTYPE_F16, SPECD_DTYPE_Q4_0,
                              SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0};
    int ok = 1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        ok &= check(&g, types[i]);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
