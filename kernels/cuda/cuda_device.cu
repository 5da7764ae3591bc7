/* libspecd_cuda.so's kernels and its entry point (kernels/cuda/cuda_kernels.h). */
#include "kernels/cuda/cuda_kernels.h"

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_ops.h"

extern "C" {
#include "kernels/cuda/cudart.h"
}

/* libspecd calls the runtime through kernels/cuda/cudart.h's restated types, never the toolkit's
 * headers: they must agree with the toolkit this library is built with. */
static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(specd_cuda_ipc_handle), "mem handle size");
static_assert(sizeof(cudaIpcEventHandle_t) == sizeof(specd_cuda_ipc_handle), "event handle size");
static_assert((int)cudaSuccess == (int)SPECD_CUDA_SUCCESS, "cudaSuccess");
static_assert((int)cudaMemcpyHostToDevice == (int)SPECD_CUDA_MEMCPY_HOST_TO_DEVICE, "cudaMemcpyKind");
static_assert((int)cudaMemcpyDeviceToHost == (int)SPECD_CUDA_MEMCPY_DEVICE_TO_HOST, "cudaMemcpyKind");
static_assert((int)cudaMemcpyDeviceToDevice == (int)SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE, "cudaMemcpyKind");
static_assert((int)cudaErrorInsufficientDriver == (int)SPECD_CUDA_ERROR_INSUFFICIENT_DRIVER, "driver error");
static_assert(cudaEventDisableTiming == SPECD_CUDA_EVENT_DISABLE_TIMING, "event flag");
static_assert(cudaEventInterprocess == SPECD_CUDA_EVENT_INTERPROCESS, "event flag");
static_assert(cudaIpcMemLazyEnablePeerAccess == SPECD_CUDA_IPC_LAZY_PEER_ACCESS, "ipc flag");
static_assert(sizeof(cudaError_t) == sizeof(int), "cudaError_t returned as int");
static_assert((int)cudaStreamCaptureModeThreadLocal == SPECD_CUDA_CAPTURE_THREAD_LOCAL, "capture mode");
static_assert(sizeof(cudaStreamCaptureMode) == sizeof(int), "capture mode passed as int");
static_assert(sizeof(cudaGraph_t) == sizeof(void *), "graphs are opaque pointers");
static_assert(cudaStreamNonBlocking == SPECD_CUDA_STREAM_NON_BLOCKING, "stream flag");
static_assert(sizeof(cudaGraphExec_t) == sizeof(void *), "executable graphs are opaque pointers");

static __global__ void scale_by_two(const float *in, float *out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * in[i];
}

static int scale_roundtrip(const float *in, float *out, int n) {
    float *d_in = nullptr, *d_out = nullptr;
    size_t bytes = (size_t)n * sizeof(float);
    cudaError_t e = cudaMalloc(&d_in, bytes);
    if (e == cudaSuccess) e = cudaMalloc(&d_out, bytes);
    if (e == cudaSuccess) e = cudaMemcpy(d_in, in, bytes, cudaMemcpyHostToDevice);
    if (e == cudaSuccess) {
        scale_by_two<<<(n + 255) / 256, 256>>>(d_in, d_out, n);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpy(out, d_out, bytes, cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    return (int)e;
}

static thread_local char refusal[256];

extern "C" char *specd_cuda_refusal_buffer(size_t *size) {
    *size = sizeof refusal;
    refusal[0] = '\0';
    return refusal;
}

extern "C" const char *specd_cuda_last_refusal(void) { return refusal; }

static int stream_sync(void *stream) { return (int)cudaStreamSynchronize((cudaStream_t)stream); }

static const specd_cuda_kernels table = {
    SPECD_CUDA_KERNELS_ABI,
    sizeof(specd_cuda_kernels),
    scale_roundtrip,
    specd_cuda_last_refusal,
    specd_cuda_quantize_q8,
    specd_cuda_matmul_q,
    specd_cuda_matmul_f,
    specd_cuda_rmsnorm,
    specd_cuda_rope,
    specd_cuda_swiglu,
    specd_cuda_embed,
    specd_cuda_attention,
    stream_sync,
    specd_cuda_quantize_q8_k,
    specd_cuda_matmul_k,
    specd_cuda_lora,
    specd_cuda_add,
    specd_cuda_store_f16,
    specd_cuda_gather,
    specd_cuda_move_rows_f16,
    /* ---- acceptance on the device ---- */
    specd_cuda_verify,
};

/* The library's one exported symbol (everything else is hidden). */
extern "C" __attribute__((visibility("default"))) const specd_cuda_kernels *
specd_cuda_kernels_v1(void) {
    return &table;
}
