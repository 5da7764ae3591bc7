/* Host API v2 with logits on a CUDA device (specd/spec_batch.h): bf16 and f32 rows with a padded
 * stride in device memory give the outcome the same rows give from host memory, both when the
 * step is verified on the device (kernels/cuda/verify.cu, session/spec_device.c; the test asserts
 * that path ran where the kernel library loads) and when the block is copied to the host
 * (SPECD_CUDA_VERIFY=host). Without a CUDA runtime or a device it reports skipped (any build:
 * libspecd opens the runtime itself). */
#include "test_main.h"

#include "specd/spec_batch.h"

#include <string.h>

#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"
#include "session/spec_device.h"

#include <stdlib.h>

enum { V = 300, STRIDE = 320, ROWS = 9 };

/* One ngram step over a synthetic target, its rows from host or device memory. */
static void step(const void *rows, specd_dtype dtype, int device, specd_step_outcome *o,
                 int32_t *emitted) {
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
                       .dtype = dtype,
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
    static float host32[ROWS * STRIDE];
    uint32_t h = 7;
    for (int i = 0; i < ROWS * STRIDE; i++) {
        h = h * 1664525u + 1013904223u;
        host[i] = i % STRIDE < V ? specd_fp32_to_bf16((float)(h >> 8) / (float)(1u << 24) * 4.0f)
                                 : 0xff80u; /* -inf padding */
    }
    for (int r = 0; r < ROWS; r++) host[r * STRIDE + (r + 3) % 4] = specd_fp32_to_bf16(20.0f);
    for (int i = 0; i < ROWS * STRIDE; i++) host32[i] = specd_bf16_to_fp32(host[i]);
    void *dev = NULL, *dev32 = NULL;
    if (rt->malloc(&dev, sizeof host) != SPECD_CUDA_SUCCESS ||
        rt->memcpy(dev, host, sizeof host, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) !=
            SPECD_CUDA_SUCCESS ||
        rt->malloc(&dev32, sizeof host32) != SPECD_CUDA_SUCCESS ||
        rt->memcpy(dev32, host32, sizeof host32, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) !=
            SPECD_CUDA_SUCCESS) {
        printf("cuda setup failed\n");
        return 1;
    }
    /* the device path runs where the kernel library with the verify kernel loads */
    const specd_cuda_kernels *k = specd_cuda_kernels_get(NULL);
    const int kernel = k && k->struct_size >= offsetof(specd_cuda_kernels, verify) +
                                                  sizeof k->verify && k->verify;
    const struct { const void *host, *dev; specd_dtype dtype; const char *name; } cases[] = {
        {host, dev, SPECD_DTYPE_BF16, "bf16"}, {host32, dev32, SPECD_DTYPE_F32, "f32"}};
    for (int c = 0; c < 2; c++) {
        specd_step_outcome a, b, d;
        int32_t ea[16], eb[16], ed[16];
        step(cases[c].host, cases[c].dtype, 0, &a, ea);
        uint64_t before = specd_device_verify_count();
        step(cases[c].dev, cases[c].dtype, 1, &b, eb);
        uint64_t on_device = specd_device_verify_count() - before;
        setenv("SPECD_CUDA_VERIFY", "host", 1);
        step(cases[c].dev, cases[c].dtype, 1, &d, ed);
        unsetenv("SPECD_CUDA_VERIFY");
        if (a.n_emitted != b.n_emitted || memcmp(ea, eb, (size_t)a.n_emitted * sizeof(int32_t)) ||
            a.n_accepted != b.n_accepted) {
            printf("%s: device logits verified on the device gave another outcome\n",
                   cases[c].name);
            return 1;
        }
        if (a.n_emitted != d.n_emitted || memcmp(ea, ed, (size_t)a.n_emitted * sizeof(int32_t))) {
            printf("%s: device logits copied to the host gave another outcome\n", cases[c].name);
            return 1;
        }
        if (kernel && on_device != 1) {
            printf("%s: the kernel library has the verify kernel but the step was not verified "
                   "on the device\n", cases[c].name);
            return 1;
        }
        printf("%s: %d tokens (%d drafts accepted) from device logits equal the host's, "
               "verified %s and through the copy path\n", cases[c].name, a.n_emitted,
               a.n_accepted, on_device ? "on the device" : "on the host (no verify kernel)");
    }
    rt->free(dev);
    rt->free(dev32);
    printf("ok\n");
    return 0;
}
