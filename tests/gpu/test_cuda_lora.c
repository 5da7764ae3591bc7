/* libspecd_cuda.so's gated LoRA against the CPU forward pass's arithmetic for one row
 * (the lora op of model/runtime/forward_cpu.c, internal to the runtime and so restated below):
 * t = A x and s = B t as float sums in index order, y += (gate * scale) * s, rows with gate 0
 * untouched; and batch invariance: each row alone has the bits it has inside batches of 2..64
 * rows. Skipped (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

enum { ROWS = 64, N_IN = 576, N_OUT = 192, RANK = 16 };

static void cpu_lora(const float *a, const float *b, float scale, const float *x, float gate,
                     float *y) {
    if (gate == 0.0f) return;
    float t[RANK];
    for (int k = 0; k < RANK; k++) {
        float s = 0.0f;
        for (int i = 0; i < N_IN; i++)
            s += a[k * N_IN + i] * x[i];
        t[k] = s;
    }
    const float cg = gate * scale;
    for (int o = 0; o < N_OUT; o++) {
        float s = 0.0f;
        for (int k = 0; k < RANK; k++)
            s += b[o * RANK + k] * t[k];
        y[o] += cg * s;
    }
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const float scale = 2.0f;
    const size_t ny = (size_t)ROWS * N_OUT;
    float *a = host_alloc(RANK * N_IN * sizeof(float)), *b = host_alloc(N_OUT * RANK * sizeof(float));
    float *x = host_alloc((size_t)ROWS * N_IN * sizeof(float)), *y0 = host_alloc(ny * sizeof(float));
    float *cpu = host_alloc(ny * sizeof(float)), *gpu = host_alloc(ny * sizeof(float));
    float *alone = host_alloc(ny * sizeof(float)), gate[ROWS];
    gpu_fill(a, RANK * N_IN, 0.1f);
    gpu_fill(b, N_OUT * RANK, 0.1f);
    gpu_fill(x, (size_t)ROWS * N_IN, 1.0f);
    gpu_fill(y0, ny, 1.0f);
    for (int r = 0; r < ROWS; r++)
        gate[r] = r % 4 == 1 ? 0.0f : 0.25f + (float)(r % 7) * 0.125f;
    memcpy(cpu, y0, ny * sizeof(float));
    for (int r = 0; r < ROWS; r++)
        cpu_lora(a, b, scale, x + (size_t)r * N_IN, gate[r], cpu + (size_t)r * N_OUT);
    float *da = gpu_put(&g, a, RANK * N_IN * sizeof(float)), *db = gpu_put(&g, b, N_OUT * RANK * sizeof(float));
    float *dx = gpu_put(&g, x, (size_t)ROWS * N_IN * sizeof(float)), *dgate = gpu_put(&g, gate, sizeof gate);
    float *dy = gpu_put(&g, y0, ny * sizeof(float)), *dw = gpu_alloc(&g, ROWS * RANK * sizeof(float));
    gpu_check(&g, "lora", g.k->lora(da, db, N_IN, N_OUT, RANK, scale, dx, N_IN, dgate, ROWS, dy,
                                    N_OUT, dw, ROWS * RANK, NULL));
    gpu_get(&g, gpu, dy, ny * sizeof(float));
    char name[64];
    snprintf(name, sizeof name, "lora rank %d, %dx%d, %d rows", RANK, N_OUT, N_IN, ROWS);
    int ok = gpu_compare(name, gpu, cpu, ny, 1e-7);
    int untouched = 1;
    for (int r = 1; r < ROWS && untouched; r += 4)
        untouched = gpu_same_bits("lora gate 0 row", gpu + (size_t)r * N_OUT, y0 + (size_t)r * N_OUT, N_OUT);
    for (int r = 0; r < ROWS; r++) {
        g.rt->memcpy(dy + (size_t)r * N_OUT, y0 + (size_t)r * N_OUT, N_OUT * sizeof(float),
                     SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        gpu_check(&g, "lora", g.k->lora(da, db, N_IN, N_OUT, RANK, scale, dx + (size_t)r * N_IN,
                                        N_IN, dgate + r, 1, dy + (size_t)r * N_OUT, N_OUT, dw,
                                        RANK, NULL));
    }
    gpu_get(&g, alone, dy, ny * sizeof(float));
    int invariant = 1;
    for (int n = 2; n <= ROWS && invariant; n++) {
        g.rt->memcpy(dy, y0, (size_t)n * N_OUT * sizeof(float), SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        gpu_check(&g, "lora", g.k->lora(da, db, N_IN, N_OUT, RANK, scale, dx, N_IN, dgate, n, dy,
                                        N_OUT, dw, ROWS * RANK, NULL));
        gpu_get(&g, gpu, dy, (size_t)n * N_OUT * sizeof(float));
        invariant = gpu_same_bits("lora batch vs rows alone", gpu, alone, (size_t)n * N_OUT);
    }
    printf("lora: rows with gate 0 %s, batch invariance over 1..%d rows %s\n",
           untouched ? "untouched" : "CHANGED  FAIL", ROWS, invariant ? "bitwise" : "BROKEN  FAIL");
    gpu_free(&g, da), gpu_free(&g, db), gpu_free(&g, dx), gpu_free(&g, dgate);
    gpu_free(&g, dy), gpu_free(&g, dw);
    free(a), free(b), free(x), free(y0), free(cpu), free(gpu), free(alone);
    ok &= untouched && invariant;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
