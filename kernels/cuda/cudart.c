/* The CUDA runtime, resolved with dlopen on first use (kernels/cuda/cudart.h). */
#include "kernels/cuda/cudart.h"

#include "common/status_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

static specd_cudart rt;
static int rt_ok;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

/* Resolves every entry from h; 0 when one is missing (an incomplete runtime is not used). */
static int resolve(void *h) {
    static const struct { size_t offset; const char *name; } syms[] = {
#define S(field, sym) {offsetof(specd_cudart, field), sym}
        S(get_device_count, "cudaGetDeviceCount"),
        S(set_device, "cudaSetDevice"),
        S(get_last_error, "cudaGetLastError"),
        S(get_error_string, "cudaGetErrorString"),
        S(malloc, "cudaMalloc"),
        S(free, "cudaFree"),
        S(memcpy, "cudaMemcpy"),
        S(memcpy_2d, "cudaMemcpy2D"),
        S(event_create_with_flags, "cudaEventCreateWithFlags"),
        S(event_destroy, "cudaEventDestroy"),
        S(event_record, "cudaEventRecord"),
        S(stream_wait_event, "cudaStreamWaitEvent"),
        S(ipc_get_mem_handle, "cudaIpcGetMemHandle"),
        S(ipc_get_event_handle, "cudaIpcGetEventHandle"),
        S(ipc_open_mem_handle, "cudaIpcOpenMemHandle"),
        S(ipc_close_mem_handle, "cudaIpcCloseMemHandle"),
        S(ipc_open_event_handle, "cudaIpcOpenEventHandle"),
        S(mem_get_info, "cudaMemGetInfo"),
        S(memcpy_async, "cudaMemcpyAsync"),
        S(stream_create, "cudaStreamCreate"),
        S(stream_destroy, "cudaStreamDestroy"),
        S(stream_synchronize, "cudaStreamSynchronize"),
        S(malloc_host, "cudaMallocHost"),
        S(free_host, "cudaFreeHost"),
        S(driver_get_version, "cudaDriverGetVersion"),
        S(runtime_get_version, "cudaRuntimeGetVersion"),
    };
    specd_cudart t;
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *f = dlsym(h, syms[i].name);
        if (!f) return 0;
        /* POSIX guarantees a data pointer from dlsym converts to a function pointer */
        *(void **)((char *)&t + syms[i].offset) = f;
    }
    /* optional: the step graphs (all or none) */
    static const struct { size_t offset; const char *name; } graph_syms[] = {
        S(stream_begin_capture, "cudaStreamBeginCapture"),
        S(stream_end_capture, "cudaStreamEndCapture"),
        S(graph_instantiate_with_flags, "cudaGraphInstantiateWithFlags"),
        S(graph_launch, "cudaGraphLaunch"),
        S(graph_exec_destroy, "cudaGraphExecDestroy"),
        S(graph_destroy, "cudaGraphDestroy"),
        S(stream_create_with_flags, "cudaStreamCreateWithFlags"),
    };
    size_t found = 0;
    for (size_t i = 0; i < sizeof graph_syms / sizeof graph_syms[0]; i++) {
        void *f = dlsym(h, graph_syms[i].name);
        found += f != NULL;
        *(void **)((char *)&t + graph_syms[i].offset) = f;
    }
    if (found != sizeof graph_syms / sizeof graph_syms[0])
        for (size_t i = 0; i < sizeof graph_syms / sizeof graph_syms[0]; i++)
            *(void **)((char *)&t + graph_syms[i].offset) = NULL;
#undef S
    rt = t;
    return 1;
}

static void open_runtime(void) {
    /* A host engine has usually loaded one already (RTLD_NOLOAD finds it first, so specd uses
     * the host's runtime, never a second copy); else the versioned names the loader knows, then
     * the toolkit this build was made with. */
    static const char *const names[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                        "libcudart.so"};
    for (int pass = 0; pass < 2 && !rt_ok; pass++)
        for (size_t i = 0; i < sizeof names / sizeof names[0] && !rt_ok; i++) {
            void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | (pass == 0 ? RTLD_NOLOAD : 0));
            if (!h) continue;
            rt_ok = resolve(h);
            if (!rt_ok) dlclose(h); /* kept open for the process when usable */
        }
#if defined(SPECD_CUDART_DIR)
    if (!rt_ok) {
        char path[4096];
        snprintf(path, sizeof path, "%s/libcudart.so", SPECD_CUDART_DIR);
        void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (h && !(rt_ok = resolve(h))) dlclose(h);
    }
#endif
}

const specd_cudart *specd_cudart_get(specd_error *err) {
    pthread_once(&rt_once, open_runtime);
    if (!rt_ok) {
        specd_fail(err, SPECD_E_UNSUPPORTED, "the CUDA runtime (libcudart) is not available");
        return NULL;
    }
    return &rt;
}

int specd_cuda_device_count(void) {
    const specd_cudart *r = specd_cudart_get(NULL);
    int n = 0;
    if (!r) return 0;
    if (r->get_device_count(&n) != SPECD_CUDA_SUCCESS) {
        (void)r->get_last_error(); /* clear the sticky "no driver" / "no device" error */
        return 0;
    }
    return n;
}
