/* libspecd_cuda.so's matmuls against the CPU's (kernels/cpu/quant_32.c, quant_k.c,
 * dtype_float.c): activation rows quantized on the device against the CPU's blocks byte for
 * byte, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K, F16 and F32 weights against the scalar vec_dot of every
 * (output, row), and batch
 * invariance: each row quantized and multiplied alone has the bits it has inside batches of
 * 2..64 rows. Skipped (exit 77) without the kernel library or a device. */
#include "gpu_harness.h"

#include "kernels/cpu/dtype.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cpu/quant_blocks.h"
#include "kernels/cuda/cuda_plan.h"

enum { ROWS = 64 };

typedef struct shape {
    int32_t n_in, n_out;
} shape;

static int is_quantized(uint32_t type) { return type != SPECD_DTYPE_F32 && type != SPECD_DTYPE_F16; }
static int is_k_quant(uint32_t type) { return type == SPECD_DTYPE_Q4_K || type == SPECD_DTYPE_Q6_K; }

/* Bytes of one activation row as the device lays it out for type's matmul. */
static size_t act_row_bytes(uint32_t type, int32_t n) {
    return is_k_quant(type) ? specd_cuda_q8_k_row_bytes(n) : specd_cuda_q8_row_bytes(n);
}

/* A K-quant row (no quantizer: these types are only read from files): random quants and
 * scales, the fp16 super-block scales set to small positive values. */
static void random_k_row(uint32_t type, uint8_t *row, int32_t n) {
    const size_t bytes = specd_dtype_row_bytes(type, n);
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)gpu_rng_next();
    for (int32_t b = 0; b < n / SPECD_QK_K; b++) {
        const float d = 0.001f + (float)(gpu_rng_next() % 1000) * 1e-5f;
        if (type == SPECD_DTYPE_Q4_K) {
            specd_block_q4_k *blk = (specd_block_q4_k *)row + b;
            blk->d = specd_fp32_to_fp16(d);
            blk->dmin = specd_fp32_to_fp16(d * 0.5f);
        } else {
            ((specd_block_q6_k *)row + b)->d = specd_fp32_to_fp16(d);
        }
    }
}

/* Runs rows [0, n_rows) of x (device, n_in floats a row) through the device path into y. */
static void gpu_matmul(const gpu_ctx *g, uint32_t type, const void *w, shape s, const float *x,
                       void *xq, int32_t n_rows, float *y) {
    if (is_k_quant(type)) {
        gpu_check(g, "quantize_q8_k", g->k->quantize_q8_k(x, s.n_in, n_rows, s.n_in, xq, NULL));
        gpu_check(g, "matmul_k",
                  g->k->matmul_k(type, w, s.n_in, s.n_out, xq, n_rows, y, s.n_out, NULL));
    } else if (is_quantized(type)) {
        gpu_check(g, "quantize_q8", g->k->quantize_q8(x, s.n_in, n_rows, s.n_in, xq, NULL));
        gpu_check(g, "matmul_q",
                  g->k->matmul_q(type, w, s.n_in, s.n_out, xq, n_rows, y, s.n_out, NULL));
    } else {
        gpu_check(g, "matmul_f",
                  g->k->matmul_f(type, w, s.n_in, s.n_out, x, s.n_in, n_rows, y, s.n_out, NULL));
    }
}

/* The device's activation blocks (36 bytes: d, s, 32 quants) against the CPU's Q8_0 (d, quants)
 * or Q8_1 (d, s, quants) blocks, or Q8_K blocks against Q8_K. Returns the number that differ. */
static size_t compare_blocks(const uint8_t *dev, const uint8_t *cpu, uint32_t vdt, size_t n) {
    size_t differ = 0;
    if (vdt == SPECD_DTYPE_Q8_K) {
        for (size_t b = 0; b < n; b++)
            differ += memcmp(dev + b * SPECD_CUDA_Q8_K_BLOCK_BYTES,
                             cpu + b * sizeof(specd_block_q8_k), sizeof(specd_block_q8_k)) != 0;
        return differ;
    }
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
    const size_t q_row = act_row_bytes(type, s.n_in);
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
    for (int32_t o = 0; o < s.n_out; o++) {
        if (is_k_quant(type))
            random_k_row(type, w + o * w_row, s.n_in);
        else
            wt->from_float(wf + (size_t)o * s.n_in, w + o * w_row, s.n_in);
    }
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
        const size_t blocks = (size_t)ROWS * (size_t)(s.n_in / (is_k_quant(type) ? 256 : 32));
        const size_t differ = compare_blocks(xq_dev, xv, vdt, blocks);
        printf("activations as %s: %zu/%zu blocks identical to the CPU's%s\n", vt->name,
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
                              SPECD_DTYPE_F16,  SPECD_DTYPE_F32,  SPECD_DTYPE_Q4_K,
                              SPECD_DTYPE_Q6_K};
    /* SmolLM2-135M's widths (576 in, FFN 1536) with output counts that leave partial blocks;
     * the K-quants need multiples of 256 */
    const shape shapes[] = {{576, 160}, {1536, 77}}, k_shapes[] = {{512, 160}, {1536, 77}};
    int ok = 1;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        for (size_t j = 0; j < sizeof shapes / sizeof shapes[0]; j++)
            ok &= check(&g, types[i], is_k_quant(types[i]) ? k_shapes[j] : shapes[j]);
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
