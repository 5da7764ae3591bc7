/* CUDA IPC buffers through the runtime opened on first use (ipc/cuda_buffer.h). */
#include "ipc/cuda_buffer.h"

#include "common/status_internal.h"
#include "kernels/cuda/cudart.h"

#include <dlfcn.h>
#include <stdint.h>
#include <string.h>

_Static_assert(SPECD_IPC_CUDA_HANDLE == SPECD_CUDA_IPC_HANDLE_SIZE, "IPC handle size");

/* Only called after specd_ipc_cuda_check succeeded, so the runtime is there. */
static const specd_cudart *rt(void) {
    return specd_cudart_get(NULL);
}

specd_status specd_ipc_cuda_check(int device, const char *what, specd_error *err) {
    if (!specd_cudart_get(NULL))
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "%s: CUDA device %d, but the CUDA runtime (libcudart) is not available",
                          what, device);
    int n = specd_cuda_device_count();
    if (device < 0 || device >= n)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "%s: no usable CUDA device %d (%d found)",
                          what, device, n);
    return SPECD_OK;
}

int specd_ipc_cuda_export(int device, size_t bytes, void **dptr, void **event,
                          unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                          unsigned char event_handle[SPECD_IPC_CUDA_HANDLE]) {
    const specd_cudart *r = rt();
    void *p = NULL, *ev = NULL;
    specd_cuda_ipc_handle mh, eh;
    int e = r->set_device(device);
    /* A dedicated allocation: an IPC handle exports the whole allocation, so nothing else of
     * ours may share it. */
    if (e == SPECD_CUDA_SUCCESS) e = r->malloc(&p, bytes);
    if (e == SPECD_CUDA_SUCCESS)
        e = r->event_create_with_flags(&ev, SPECD_CUDA_EVENT_INTERPROCESS |
                                                SPECD_CUDA_EVENT_DISABLE_TIMING);
    if (e == SPECD_CUDA_SUCCESS) e = r->ipc_get_mem_handle(&mh, p);
    if (e == SPECD_CUDA_SUCCESS) e = r->ipc_get_event_handle(&eh, ev);
    if (e != SPECD_CUDA_SUCCESS) {
        if (ev) r->event_destroy(ev);
        if (p) r->free(p);
        return e;
    }
    memcpy(mem_handle, &mh, sizeof mh);
    memcpy(event_handle, &eh, sizeof eh);
    *dptr = p;
    *event = ev;
    return 0;
}

int specd_ipc_cuda_record(void *event, void *stream) {
    return rt()->event_record(event, stream);
}

void specd_ipc_cuda_release(int device, void *dptr, void *event) {
    const specd_cudart *r = rt();
    r->set_device(device);
    if (event) r->event_destroy(event);
    if (dptr) r->free(dptr);
}

int specd_ipc_cuda_import(int device, const unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                          const unsigned char event_handle[SPECD_IPC_CUDA_HANDLE], void **dptr,
                          void **event) {
    const specd_cudart *r = rt();
    specd_cuda_ipc_handle mh, eh;
    memcpy(&mh, mem_handle, sizeof mh);
    memcpy(&eh, event_handle, sizeof eh);
    void *p = NULL, *ev = NULL;
    int e = r->set_device(device);
    if (e == SPECD_CUDA_SUCCESS) e = r->ipc_open_mem_handle(&p, mh, SPECD_CUDA_IPC_LAZY_PEER_ACCESS);
    if (e == SPECD_CUDA_SUCCESS) e = r->ipc_open_event_handle(&ev, eh);
    if (e != SPECD_CUDA_SUCCESS) {
        if (p) r->ipc_close_mem_handle(p);
        return e;
    }
    *dptr = p;
    *event = ev;
    return 0;
}

int specd_ipc_cuda_wait(int device, void *event) {
    const specd_cudart *r = rt();
    int e = r->set_device(device);
    if (e == SPECD_CUDA_SUCCESS) e = r->stream_wait_event(NULL, event, 0);
    return e;
}

void specd_ipc_cuda_unimport(int device, void *dptr, void *event) {
    const specd_cudart *r = rt();
    r->set_device(device);
    if (event) r->event_destroy(event);
    if (dptr) r->ipc_close_mem_handle(dptr);
}

const char *specd_ipc_cuda_error_string(int code) {
    const specd_cudart *r = rt();
    return r ? r->get_error_string(code) : "CUDA runtime not loaded";
}

/* CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) */
typedef int (*mem_range_fn)(unsigned long long *base, size_t *size, unsigned long long dptr);

int specd_ipc_cuda_range(const void *dptr, size_t *bytes) {
    /* only a libcuda the runtime has loaded already: never a second driver */
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return -1;
    mem_range_fn f;
    *(void **)&f = dlsym(h, "cuMemGetAddressRange_v2");
    unsigned long long base = 0;
    size_t size = 0;
    int rc = f ? f(&base, &size, (unsigned long long)(uintptr_t)dptr) : -1;
    dlclose(h);
    if (rc != 0 || base != (unsigned long long)(uintptr_t)dptr) return -1;
    *bytes = size;
    return 0;
}
