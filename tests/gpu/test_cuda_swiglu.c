/* libspecd_cuda.so's SwiGLU against the CPU's (kernels/cpu/swiglu.c), and batch invariance:
 * each row alone has the bits it has inside batches of 2..64 rows. Skipped (exit 77) without the
 * kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/ops.h"

enum { ROWS = 64, N = 1536 };

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const size_t n = (size_t)ROWS * N, bytes = n * sizeof(float);
    float *gt = host_alloc(bytes), *u = host_alloc(bytes), *cpu = host_alloc(bytes);
    float *gpu = host_alloc(bytes), *alone = host_alloc(bytes);
    gpu_fill(gt, n, 6.0f); /* past both knees of silu */
    gpu_fill(u, n, 2.0f);
    for (int r = 0; r < ROWS; r++)
        specd_swiglu_f32(gt + r * N, u + r * N, cpu + r * N, N, 0);
    float *dg = gpu_put(&g, gt, bytes), *du = gpu_put(&g, u, bytes), *dy = gpu_alloc(&g, bytes);
    gpu_check(&g, "swiglu", g.k->swiglu(dg, N, du, N, dy, N, ROWS, N, NULL));
    gpu_get(&g, gpu, dy, bytes);
    int ok = gpu_compare("swiglu", gpu, cpu, n, 1e-7);
    for (int r = 0; r < ROWS; r++)
        gpu_check(&g, "swiglu", g.k->swiglu(dg + r * N, N, du + r * N, N, dy + r * N, N, 1, N, NULL));
    gpu_get(&g, alone, dy, bytes);
    int invariant = 1;
    for (int b = 2; b <= ROWS && invariant; b++) {
        gpu_check(&g, "swiglu", g.k->swiglu(dg, N, du, N, dy, N, b, N, NULL));
        gpu_get(&g, gpu, dy, (size_t)b * N * sizeof(float));
        invariant = gpu_same_bits("swiglu batch vs rows alone", gpu, alone, (size_t)b * N);
    }
    printf("swiglu: batch invariance over 1..%d rows %s\n", ROWS,
           invariant ? "bitwise" : "BROKEN  FAIL");
    gpu_free(&g, dg), gpu_free(&g, du), gpu_free(&g, dy);
    free(gt), free(u), free(cpu), free(gpu), free(alone);
    ok &= invariant;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
