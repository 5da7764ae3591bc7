/* GPU smoke test: with a device, a kernel of libspecd_cuda.so (built with our arch flags, opened
 * by libspecd's loader) runs and gives the CPU's answer. Without the kernel library (a build
 * without CUDA) or without a device it reports skipped. */
#include "test_main.h"

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"

int main(void) {
    specd_error err;
    const specd_cuda_kernels *k = specd_cuda_kernels_get(&err);
    if (!k) {
        printf("skipped: %s\n", err.message);
        return SPECD_TEST_SKIP;
    }
    if (specd_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return SPECD_TEST_SKIP;
    }
    enum { N = 1000 };
    float in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (float)i * 0.5f - 17.0f;
    int rc = k->scale_roundtrip(in, out, N);
    if (rc != 0) {
        printf("cuda error %d\n", rc);
        return 1;
    }
    for (int i = 0; i < N; i++)
        if (out[i] != 2.0f * in[i]) {
            printf("mismatch at %d: %g vs %g\n", i, out[i], 2.0f * in[i]);
            return 1;
        }
    printf("ok: %d values round-tripped through the device\n", N);
    return 0;
}
