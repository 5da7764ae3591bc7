/* libspecd_cuda.so's matmuls against the CPU's (kernels/cpu/quant_32.c, dtype_float.c):
 * activation rows quantized on the device against the CPU's blocks byte for byte, Q4_0, Q4_1,
 * Q8_0, F16 and F32 weights against the scalar vec_dot of every (output, row), and batch
 * invariance: each row quantized and multiplied alone has the bits it has inside batches of
 * 2..64 rows. Skipped (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/dtype.h"
#include "kernels/cuda/cuda_plan.h"

enum { ROWS = 64 };

typedef struct shape {
    int32_t n_in, n_out;
} shape;

static int is_quantized(uint32_t type) { return type != SPECD_DTYPE_F32 && type != SPECD_DTYPE_F16; }

/* Runs rows [0, n_rows) of x (device, n_in floats a row) through the device path into y. */
static void gpu_matmul(const gpu_ctx *g, uint32_t type, const void *w, shape s, const float *x,
                       void *xq, int32_t n_rows, float *y) {
    if (is_quantized(type)) {
        gpu_check(g, "quantize_q8", g->k->quantize_q8(x, s.n_in, n_rows, s.n_in, xq, NULL));
        gpu_check(g, "matmul_q",
                  g->k->matmul_q(type, w, s.n_in, s.n_out, xq, n_rows, y, s.n_out, NULL));
    } else {
        gpu_check(g, "matmul_f",
                  g->k->matmul_f(type, w, s.n_in, s.n_out, x, s.n_in, n_rows, y, s.n_out, NULL));
    }
}

/* The device's activation blocks (36 bytes: d, s, 32 quants) against the CPU's Q8_0 (d, quants)
 * or Q8_1 (d, s, quants) blocks. Returns the number that differ. */
static size_t compare_blocks(const uint8_t *dev, const uint8_t *cpu, uint32_t vdt, size_t n) {
    size_t differ = 0;
    for (size_t b = 0; b < n; b++) {
        const uint8_t *d = dev + b * SPECD_CUDA_Q8_BLOCK_BYTES;
        if (vdt == SPECD_DTYPE_Q8_1)
            differ += memcmp(d, cpu + b * 36, 36) != 0;
        else
            differ += memcmp(d, cpu + b * 34, 2) != 0 || memcmp(d + 4, cpu + b * 34 + 2, 32) != 0;
    }
    return differ;
}

static int check(const gpu_ctx *g, uint32_t type, shape s) {
    const specd_dtype_traits *wt = specd_dtype_traits_scalar(type);
    const uint32_t vdt = wt->vec_dot_type;
    const specd_dtype_traits *vt = specd_dtype_traits_scalar(vdt);
    const size_t w_row = specd_dtype_row_bytes(type, s.n_in);
    const size_t v_row = specd_dtype_row_bytes(vdt, s.n_in);
    const size_t q_row = specd_cuda_q8_row_bytes(s.n_in);
    const size_t n_y = (size_t)ROWS * (size_t)s.n_out;
    float *wf = host_alloc((size_t)s.n_out * s.n_in * sizeof(float));
    float *x = host_alloc((size_t)ROWS * s.n_in * sizeof(float));
    uint8_t *w = host_alloc((size_t)s.n_out * w_row);
    uint8_t *xv = host_alloc(ROWS * v_row);
    uint8_t *xq_dev = host_alloc(ROWS * q_row);
    float *y_cpu = host_alloc(n_y * sizeof(float)), *y_gpu = host_alloc(n_y * sizeof(float));
    float *y_alone = host_alloc(n_y * sizeof(float)), *y_batch = host_alloc(n_y * sizeof(float));
    gpu_fill(wf, (size_t)s.n_out * s.n_in, 1.0f);
    gpu_fill(x, (size_t)ROWS * s.n_in, 2.0f);
    for (int32_t o = 0; o < s.n_out; o++)
        wt->from_float(wf + (size_t)o * s.n_in, w + o * w_row, s.n_in);
    for (int r = 0; r < ROWS; r++) {
        vt->from_float(x + (size_t)r * s.n_in, xv + r * v_row, s.n_in);
        for (int32_t o = 0; o < s.n_out; o++)
            wt->vec_dot(s.n_in, &y_cpu[(size_t)r * s.n_out + o], w + o * w_row, xv + r * v_row);
    }

    void *dw = gpu_put(g, w, (size_t)s.n_out * w_row);
    float *dx = gpu_put(g, x, (size_t)ROWS * s.n_in * sizeof(float));
    void *dq = gpu_alloc(g, ROWS * q_row);
    float *dy = gpu_alloc(g, n_y * sizeof(float));
    gpu_matmul(g, type, dw, s, dx, dq, ROWS, dy);
    gpu_get(g, y_gpu, dy, n_y * sizeof(float));
    char name[96];
    snprintf(name, sizeof name, "matmul %s %dx%d, %d rows", wt->name, s.n_out, s.n_in, ROWS);
    int ok = gpu_compare(name, y_gpu, y_cpu, n_y, 1e-7);
    if (is_quantized(type)) {
        gpu_get(g, xq_dev, dq, ROWS * q_row);
        const size_t blocks = (size_t)ROWS * (size_t)(s.n_in / 32);
        const size_t differ = compare_blocks(xq_dev, xv, vdt, blocks);
        printf("quantize_q8 as %s: %zu/%zu blocks identical to the CPU's%s\n", vt->name,
               blocks - differ, blocks, differ ? "  FAIL" : "");
        ok &= differ == 0;
    }

    /* batch invariance: every row alone, then every batch size against those bits */
    for (int r = 0; r < ROWS; r++)
        gpu_matmul(g, type, dw, s, dx + (size_t)r * s.n_in, (uint8_t *)dq + r * q_row, 1,
                   dy + (size_t)r * s.n_out);
    gpu_get(g, y_alone, dy, n_y * sizeof(float));
    int invariant = 1;
    for (int b = 2; b <= ROWS && invariant; b++) {
        gpu_matmul(g, type, dw, s, dx, dq, b, dy);
        gpu_get(g, y_batch, dy, (size_t)b * s.n_out * sizeof(float));
        char what[96];
        snprintf(what, sizeof what, "matmul %s batch of %d vs rows alone", wt->name, b);
        invariant = gpu_same_bits(what, y_batch, y_alone, (size_t)b * s.n_out);
    }
    printf("matmul %s %dx%d: batch invariance over 1..%d rows %s\n", wt->name, s.n_out, s.n_in,
           ROWS, invariant ? "bitwise" : "BROKEN  FAIL");
    gpu_free(g, dw);
    gpu_free(g, dx);
    gpu_free(g, dq);
    gpu_free(g, dy);
    free(wf), free(x), free(w), free(xv), free(xq_dev);
    free(y_cpu), free(y_gpu), free(y_alone), free(y_batch);
    return ok && invariant;
}

int main(void) {
    const gpu_ctx g = gpu_open_or_skip();
    const uint32_t types[] = {SPECD_DTYPE_Q4_0, SPECD_DTYPE_Q4_1, SPECD_DTYPE_Q8_0,
                              SPECD_DTYPE_F16, SPECD_DTYPE_F32};
    /* SmolLM2-135M's widths (576 in, FFN 1536) with output counts that leave partial blocks */
    const shape shapes[] = {{576, 160}, {1536, 77}};
    int ok = 1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
            ok &= check(&g, types[i], shapes[j]);
    /* a refused shape comes back as an argument error with its reason, nothing launched */
    const int rc = g.k->matmul_q(SPECD_DTYPE_Q4_0, (void *)(uintptr_t)0x1000, 48, 4,
                                 (void *)(uintptr_t)0x2000, 1, (float *)(uintptr_t)0x3000, 4, NULL);
    if (rc != SPECD_CUDA_E_ARGUMENT || !strstr(g.k->last_refusal(), "multiple of 32")) {
        printf("FAIL: n_in 48 gave %d (%s)\n", rc, g.k->last_refusal());
        ok = 0;
    }
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
