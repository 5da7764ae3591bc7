#include "ipc/cuda_buffer.h"

#include <cuda_runtime.h>
#include <string.h>

extern "C" int specd_ipc_cuda_usable(int device) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return device >= 0 && device < n;
}

extern "C" int specd_ipc_cuda_export(int device, size_t bytes, void **dptr, void **event,
                                     unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                                     unsigned char event_handle[SPECD_IPC_CUDA_HANDLE]) {
    static_assert(sizeof(cudaIpcMemHandle_t) == SPECD_IPC_CUDA_HANDLE, "mem handle size");
    static_assert(sizeof(cudaIpcEventHandle_t) == SPECD_IPC_CUDA_HANDLE, "event handle size");
    void *p = nullptr;
    cudaEvent_t ev = nullptr;
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    cudaError_t e = cudaSetDevice(device);
    /* A dedicated allocation: an IPC handle exports the whole allocation, so nothing else of
     * ours may share it. */
    if (e == cudaSuccess) e = cudaMalloc(&p, bytes);
    if (e == cudaSuccess)
        e = cudaEventCreateWithFlags(&ev, cudaEventInterprocess | cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaIpcGetMemHandle(&mh, p);
    if (e == cudaSuccess) e = cudaIpcGetEventHandle(&eh, ev);
    if (e != cudaSuccess) {
        if (ev) cudaEventDestroy(ev);
        if (p) cudaFree(p);
        return (int)e;
    }
    memcpy(mem_handle, &mh, sizeof mh);
    memcpy(event_handle, &eh, sizeof eh);
    *dptr = p;
    *event = ev;
    return 0;
}

extern "C" int specd_ipc_cuda_record(void *event, void *stream) {
    return (int)cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
}

extern "C" void specd_ipc_cuda_release(int device, void *dptr, void *event) {
    cudaSetDevice(device);
    if (event) cudaEventDestroy((cudaEvent_t)event);
    if (dptr) cudaFree(dptr);
}

extern "C" int specd_ipc_cuda_import(int device,
                                     const unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                                     const unsigned char event_handle[SPECD_IPC_CUDA_HANDLE],
                                     void **dptr, void **event) {
    cudaIpcMemHandle_t mh;
    cudaIpcEventHandle_t eh;
    memcpy(&mh, mem_handle, sizeof mh);
    memcpy(&eh, event_handle, sizeof eh);
    void *p = nullptr;
    cudaEvent_t ev = nullptr;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaIpcOpenMemHandle(&p, mh, cudaIpcMemLazyEnablePeerAccess);
    if (e == cudaSuccess) e = cudaIpcOpenEventHandle(&ev, eh);
    if (e != cudaSuccess) {
        if (p) cudaIpcCloseMemHandle(p);
        return (int)e;
    }
    *dptr = p;
    *event = ev;
    return 0;
}

extern "C" int specd_ipc_cuda_wait(int device, void *event) {
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(0, (cudaEvent_t)event, 0);
    return (int)e;
}

extern "C" void specd_ipc_cuda_unimport(int device, void *dptr, void *event) {
    cudaSetDevice(device);
    if (event) cudaEventDestroy((cudaEvent_t)event);
    if (dptr) cudaIpcCloseMemHandle(dptr);
}

extern "C" const char *specd_ipc_cuda_error_string(int code) {
    return cudaGetErrorString((cudaError_t)code);
}
