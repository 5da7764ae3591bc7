/* Host API v2 with logits on a CUDA device (specd/spec_batch.h): bf16 rows with a padded stride
 * in device memory give the outcome the same rows give from host memory. Without a CUDA runtime
 * or a device it reports skipped (any build: libspecd opens the runtime itself). */
#include "test_main.h"

#include "specd/spec_batch.h"

#include <string.h>

#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cudart.h"

enum { V = 300, STRIDE = 320, ROWS = 9 };

/* One ngram step over a synthetic target, its rows from host or device memory. */
static void step(const uint16_t *rows, int device, specd_step_outcome *o, int32_t *emitted) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    specd_spec *spec;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) exit(1);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "ngram";
    p.adaptive = 0;
    const int32_t prompt[] = {1, 2, 3, 1, 2};
    if (specd_spec_seq_open(spec, 0, prompt, 5, &p, &err) != SPECD_OK) exit(1);
    specd_step_layout lay;
    if (specd_spec_seq_layout(spec, 0, &lay, &err) != SPECD_OK) exit(1);
    specd_logits lg = {.data = rows, .row_stride = STRIDE, .n_rows = ROWS,
                       .dtype = SPECD_DTYPE_BF16,
                       .device = device ? SPECD_DEVICE_CUDA : SPECD_DEVICE_HOST};
    if (specd_spec_seq_verify_logits(spec, 0, &lg, o, &err) != SPECD_OK) {
        printf("verify (%s): %s\n", device ? "cuda" : "host", err.message);
        exit(1);
    }
    memcpy(emitted, o->emitted, (size_t)o->n_emitted * sizeof(int32_t));
    specd_spec_destroy(spec);
}

int main(void) {
    const specd_cudart *rt = specd_cudart_get(NULL);
    if (!rt) {
        printf("skipped: no CUDA runtime\n");
        return SPECD_TEST_SKIP;
    }
    if (specd_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return SPECD_TEST_SKIP;
    }
    static uint16_t host[ROWS * STRIDE];
    uint32_t h = 7;
    for (int i = 0; i < ROWS * STRIDE; i++) {
        h = h * 1664525u + 1013904223u;
        host[i] = i % STRIDE < V ? specd_fp32_to_bf16((float)(h >> 8) / (float)(1u << 24) * 4.0f)
                                 : 0xff80u; /* -inf padding */
    }
    for (int r = 0; r < ROWS; r++) host[r * STRIDE + (r + 3) % 4] = specd_fp32_to_bf16(20.0f);
    void *dev = NULL;
    if (rt->malloc(&dev, sizeof host) != SPECD_CUDA_SUCCESS ||
        rt->memcpy(dev, host, sizeof host, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) !=
            SPECD_CUDA_SUCCESS) {
        printf("cuda setup failed\n");
        return 1;
    }
    specd_step_outcome a, b;
    int32_t ea[16], eb[16];
    step(host, 0, &a, ea);
    step(dev, 1, &b, eb);
    rt->free(dev);
    if (a.n_emitted != b.n_emitted || memcmp(ea, eb, (size_t)a.n_emitted * sizeof(int32_t))) {
        printf("device logits gave another outcome\n");
        return 1;
    }
    printf("ok: %d tokens from device bf16 logits equal the host's\n", a.n_emitted);
    return 0;
}
