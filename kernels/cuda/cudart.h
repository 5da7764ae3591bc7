/* The CUDA runtime (libcudart), opened with dlopen the first time something asks for it: libspecd
 * never links it, so a CPU-only program needs no libcudart, and a build made without the CUDA
 * toolkit still takes a CUDA host's device logits and CUDA IPC buffers where the host has the
 * runtime. Only the runtime calls specd makes are resolved; their C types are restated here
 * (checked against the toolkit's headers in kernels/cuda/cuda_device.cu when it is built). */
#ifndef SPECD_KERNELS_CUDART_H
#define SPECD_KERNELS_CUDART_H

#include <stddef.h>

#include "specd/status.h"

#define SPECD_CUDA_IPC_HANDLE_SIZE 64

enum {
    SPECD_CUDA_SUCCESS = 0,
    SPECD_CUDA_MEMCPY_HOST_TO_DEVICE = 1,
    SPECD_CUDA_MEMCPY_DEVICE_TO_HOST = 2,
    SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE = 3,
    SPECD_CUDA_ERROR_INSUFFICIENT_DRIVER = 35, /* cudaErrorInsufficientDriver */
    SPECD_CUDA_EVENT_DISABLE_TIMING = 0x02,
    SPECD_CUDA_EVENT_INTERPROCESS = 0x04,
    SPECD_CUDA_IPC_LAZY_PEER_ACCESS = 0x01
};

/* cudaIpcMemHandle_t and cudaIpcEventHandle_t: 64 opaque bytes, passed by value. */
typedef struct specd_cuda_ipc_handle {
    char reserved[SPECD_CUDA_IPC_HANDLE_SIZE];
} specd_cuda_ipc_handle;

/* Every call returns a cudaError_t (0 = success); streams and events are opaque pointers. */
typedef struct specd_cudart {
    int (*get_device_count)(int *n);
    int (*set_device)(int device);
    int (*get_last_error)(void);
    const char *(*get_error_string)(int code);
    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*memcpy)(void *dst, const void *src, size_t bytes, int kind);
    int (*memcpy_2d)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                     size_t height, int kind);
    int (*event_create_with_flags)(void **event, unsigned flags);
    int (*event_destroy)(void *event);
    int (*event_record)(void *event, void *stream);
    int (*stream_wait_event)(void *stream, void *event, unsigned flags);
    int (*ipc_get_mem_handle)(specd_cuda_ipc_handle *h, void *p);
    int (*ipc_get_event_handle)(specd_cuda_ipc_handle *h, void *event);
    int (*ipc_open_mem_handle)(void **p, specd_cuda_ipc_handle h, unsigned flags);
    int (*ipc_close_mem_handle)(void *p);
    int (*ipc_open_event_handle)(void **event, specd_cuda_ipc_handle h);
    /* the runtime's CUDA backend (model/runtime/context_cuda.c) */
    int (*mem_get_info)(size_t *free_bytes, size_t *total_bytes);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, int kind, void *stream);
    int (*stream_create)(void **stream);
    int (*stream_destroy)(void *stream);
    int (*stream_synchronize)(void *stream);
    int (*malloc_host)(void **p, size_t bytes);
    int (*free_host)(void *p);
    int (*driver_get_version)(int *version);
    int (*runtime_get_version)(int *version);
    /* CUDA graphs (the runtime's step graphs, model/runtime/cuda_graph.h): NULL together when
     * the runtime lacks one of them (then steps launch their kernels directly). Graphs and
     * executable graphs are opaque pointers. */
    int (*stream_begin_capture)(void *stream, int mode);
    int (*stream_end_capture)(void *stream, void **graph);
    int (*graph_instantiate_with_flags)(void **exec, void *graph, unsigned long long flags);
    int (*graph_launch)(void *exec, void *stream);
    int (*graph_exec_destroy)(void *exec);
    int (*graph_destroy)(void *graph);
    /* a stream of the graphs' context: non-blocking, so another thread's work on the legacy
     * default stream never joins (and so invalidates) its capture */
    int (*stream_create_with_flags)(void **stream, unsigned flags);
} specd_cudart;

#define SPECD_CUDA_STREAM_NON_BLOCKING 0x01

/* cudaStreamCaptureModeThreadLocal: another thread's calls never break this thread's capture. */
#define SPECD_CUDA_CAPTURE_THREAD_LOCAL 1

/* The runtime, loaded once per process (thread-safe); NULL with SPECD_E_UNSUPPORTED when no
 * libcudart can be opened. Borrowed for the life of the process. */
const specd_cudart *specd_cudart_get(specd_error *err);

/* Number of usable CUDA devices: 0 without a runtime, a driver or a device (never an error; the
 * runtime's sticky "no device" error is cleared). */
int specd_cuda_device_count(void);

#endif
