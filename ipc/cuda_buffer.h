/* CUDA IPC buffers (ipc/cuda_buffer.cu, built when CUDA is): dedicated cudaMalloc allocations
 * exported whole with cudaIpcGetMemHandle, and interprocess events that order the writer's stream
 * before the reader's work. Callable from C; each returns 0 or a cudaError_t value. */
#ifndef SPECD_IPC_CUDA_BUFFER_H
#define SPECD_IPC_CUDA_BUFFER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SPECD_IPC_CUDA_HANDLE 64

/* 1 when `device` exists and can be used. */
int specd_ipc_cuda_usable(int device);
int specd_ipc_cuda_export(int device, size_t bytes, void **dptr, void **event,
                          unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                          unsigned char event_handle[SPECD_IPC_CUDA_HANDLE]);
int specd_ipc_cuda_record(void *event, void *stream);
void specd_ipc_cuda_release(int device, void *dptr, void *event);
int specd_ipc_cuda_import(int device, const unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE],
                          const unsigned char event_handle[SPECD_IPC_CUDA_HANDLE], void **dptr,
                          void **event);
/* Makes the default stream wait for the owner's last recorded event. */
int specd_ipc_cuda_wait(int device, void *event);
void specd_ipc_cuda_unimport(int device, void *dptr, void *event);
const char *specd_ipc_cuda_error_string(int code);

#ifdef __cplusplus
}
#endif
#endif
