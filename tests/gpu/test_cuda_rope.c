/* libspecd_cuda.so's RoPE at explicit positions against the CPU's (kernels/cpu/rope.c): adjacent
 * pairs and NeoX halves, all dims and a partial n_rot (the rest untouched), positions up to 8191;
 * and batch invariance: each row alone has the bits it has inside batches of 2..64 rows. Skipped
 * (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/ops.h"

enum { ROWS = 64, HEADS = 9, HEAD_DIM = 64, WIDTH = HEADS * HEAD_DIM };

static int check(const gpu_ctx *g, int n_rot, int neox) {
    const float base = 100000.0f;
    const size_t n = (size_t)ROWS * WIDTH, bytes = n * sizeof(float);
    float *x = host_alloc(bytes), *cpu = host_alloc(bytes), *gpu = host_alloc(bytes);
    float *alone = host_alloc(bytes), cs[HEAD_DIM / 2], sn[HEAD_DIM / 2];
    int32_t pos[ROWS];
    gpu_fill(x, n, 2.0f);
    for (int r = 0; r < ROWS; r++)
        pos[r] = r < 4 ? r : (int32_t)(gpu_rng_next() % 8192);
    memcpy(cpu, x, bytes);
    for (int r = 0; r < ROWS; r++) {
        specd_rope_angles(pos[r], n_rot, base, cs, sn);
        specd_rope_f32(cpu + (size_t)r * WIDTH, HEADS, HEAD_DIM, n_rot, cs, sn, neox);
    }
    float *dx = gpu_put(g, x, bytes);
    int32_t *dpos = gpu_put(g, pos, sizeof pos);
    gpu_check(g, "rope", g->k->rope(dx, WIDTH, ROWS, dpos, HEADS, HEAD_DIM, n_rot, base, neox, NULL));
    gpu_get(g, gpu, dx, bytes);
    char name[64];
    snprintf(name, sizeof name, "rope %s, n_rot %d", neox ? "neox" : "normal", n_rot);
    int ok = gpu_compare(name, gpu, cpu, n, 1e-7);
    int untouched = 1; /* dims past n_rot keep their bits */
    for (int r = 0; r < ROWS && untouched; r++)
        for (int h = 0; h < HEADS && untouched; h++) {
            const size_t at = (size_t)r * WIDTH + (size_t)h * HEAD_DIM + (size_t)n_rot;
            untouched = gpu_same_bits("rope past n_rot", gpu + at, x + at, HEAD_DIM - n_rot);
        }
    /* batch invariance: fresh copies of x, each row alone, then each batch size */
    for (int r = 0; r < ROWS; r++) {
        float *row = dx + (size_t)r * WIDTH;
        g->rt->memcpy(row, x + (size_t)r * WIDTH, WIDTH * sizeof(float),
                      SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        gpu_check(g, "rope", g->k->rope(row, WIDTH, 1, dpos + r, HEADS, HEAD_DIM, n_rot, base, neox, NULL));
    }
    gpu_get(g, alone, dx, bytes);
    int invariant = 1;
    for (int b = 2; b <= ROWS && invariant; b++) {
        g->rt->memcpy(dx, x, (size_t)b * WIDTH * sizeof(float), SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        gpu_check(g, "rope", g->k->rope(dx, WIDTH, b, dpos, HEADS, HEAD_DIM, n_rot, base, neox, NULL));
        gpu_get(g, gpu, dx, (size_t)b * WIDTH * sizeof(float));
        invariant = gpu_same_bits("rope batch vs rows alone", gpu, alone, (size_t)b * WIDTH);
    }
    printf("%s: dims past n_rot %s, batch invariance over 1..%d rows %s\n", name,
           untouched ? "untouched" : "CHANGED  FAIL", ROWS,
           invariant ? "bitwise" : "BROKEN  FAIL");
    gpu_free(g, dx), gpu_free(g, dpos);
    free(x), free(cpu), free(gpu), free(alone);
    return ok && untouched && invariant;
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    int ok = 1;
    for (int neox = 0; neox < 2; neox++) {
        ok &= check(&g, HEAD_DIM, neox);
        ok &= check(&g, HEAD_DIM / 2, neox);
    }
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
