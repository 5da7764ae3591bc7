/* GPU smoke test: with a device, a kernel built with our arch flags runs and gives the CPU's
 * answer. Without CUDA support or a device it reports skipped. */
#include "test_main.h"

#if defined(SPECD_WITH_CUDA)
#include "kernels/cuda/cuda_device.h"
#endif

int main(void) {
#if !defined(SPECD_WITH_CUDA)
    printf("skipped: built without CUDA\n");
    return SPECD_TEST_SKIP;
#else
    if (specd_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return SPECD_TEST_SKIP;
    }
    enum { N = 1000 };
    float in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (float)i * 0.5f - 17.0f;
    int rc = specd_cuda_scale_roundtrip(in, out, N);
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
#endif
}
