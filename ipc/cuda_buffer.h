/* CUDA IPC buffers (ipc/cuda_buffer.c): dedicated cudaMalloc allocations exported whole with
 * cudaIpcGetMemHandle, and interprocess events that order the writer's stream before the
 * reader's work. The CUDA runtime is opened on first use (kernels/cuda/cudart.h), so these work
 * in any build wherever a libcudart and a device are present. */
#ifndef SPECD_IPC_CUDA_BUFFER_H
#define SPECD_IPC_CUDA_BUFFER_H

#include <stddef.h>

#include "specd/status.h"

#define SPECD_IPC_CUDA_HANDLE 64

/* SPECD_OK when `device` exists and can be used; else SPECD_E_UNSUPPORTED saying why (no
 * runtime, or no such device). `what` names the buffer in the message. */
specd_status specd_ipc_cuda_check(int device, const char *what, specd_error *err);

/* The rest return 0 or a cudaError_t value, and are called only after a successful check (the
 * runtime is loaded). */
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
/* The size of the allocation dptr starts, from the driver (cuMemGetAddressRange of the
 * libcuda the runtime loaded): 0 with *bytes, or -1 when the driver cannot say (no libcuda in
 * the process, as under the CPU emulation, or dptr is not an allocation's start). */
int specd_ipc_cuda_range(const void *dptr, size_t *bytes);
const char *specd_ipc_cuda_error_string(int code);

#endif
