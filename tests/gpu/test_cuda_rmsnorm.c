/* libspecd_cuda.so's RMSNorm against the CPU's (kernels/cpu/rmsnorm.c), with and without a weight
 * and in place, and batch invariance: each row alone has the bits it has inside batches of 2..64
 * rows. Skipped (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/ops.h"

enum { ROWS = 64, N = 576, LD = 600 };

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const float eps = 1e-5f;
    float *x = host_alloc(ROWS * LD * sizeof(float)), *w = host_alloc(N * sizeof(float));
    float *cpu = host_alloc(ROWS * N * sizeof(float)), *gpu = host_alloc(ROWS * N * sizeof(float));
    float *alone = host_alloc(ROWS * N * sizeof(float));
    gpu_fill(x, ROWS * LD, 3.0f);
    gpu_fill(w, N, 1.5f);
    float *dx = gpu_put(&g, x, ROWS * LD * sizeof(float)), *dw = gpu_put(&g, w, N * sizeof(float));
    float *dy = gpu_alloc(&g, ROWS * N * sizeof(float));
    int ok = 1;
    for (int weighted = 0; weighted < 2; weighted++) {
        for (int r = 0; r < ROWS; r++)
            specd_rmsnorm_f32(x + r * LD, weighted ? w : NULL, cpu + r * N, N, eps);
        gpu_check(&g, "rmsnorm",
                  g.k->rmsnorm(dx, LD, weighted ? dw : NULL, dy, N, ROWS, N, eps, NULL));
        gpu_get(&g, gpu, dy, ROWS * N * sizeof(float));
        ok &= gpu_compare(weighted ? "rmsnorm, weighted" : "rmsnorm, no weight", gpu, cpu,
                          ROWS * N, 1e-7);
    }
    int invariant = 1;
    for (int r = 0; r < ROWS; r++)
        gpu_check(&g, "rmsnorm", g.k->rmsnorm(dx + r * LD, LD, dw, dy + r * N, N, 1, N, eps, NULL));
    gpu_get(&g, alone, dy, ROWS * N * sizeof(float));
    for (int b = 2; b <= ROWS && invariant; b++) {
        gpu_check(&g, "rmsnorm", g.k->rmsnorm(dx, LD, dw, dy, N, b, N, eps, NULL));
        gpu_get(&g, gpu, dy, (size_t)b * N * sizeof(float));
        invariant = gpu_same_bits("rmsnorm batch vs rows alone", gpu, alone, (size_t)b * N);
    }
    printf("rmsnorm: batch invariance over 1..%d rows %s\n", ROWS,
           invariant ? "bitwise" : "BROKEN  FAIL");
    /* in place: y = x */
    gpu_check(&g, "rmsnorm", g.k->rmsnorm(dx, LD, dw, dx, LD, ROWS, N, eps, NULL));
    float *xin = host_alloc(ROWS * LD * sizeof(float));
    gpu_get(&g, xin, dx, ROWS * LD * sizeof(float));
    int inplace = 1;
    for (int r = 0; r < ROWS && inplace; r++)
        inplace = gpu_same_bits("rmsnorm in place", xin + r * LD, alone + r * N, N);
    printf("rmsnorm in place: %s\n", inplace ? "same bits" : "differs  FAIL");
    gpu_free(&g, dx), gpu_free(&g, dw), gpu_free(&g, dy);
    free(x), free(w), free(cpu), free(gpu), free(alone), free(xin);
    ok &= invariant && inplace;
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
