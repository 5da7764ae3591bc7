/* specd's CUDA kernels: built by nvcc into their own shared library, libspecd_cuda.so (linked
 * with libcudart), which libspecd opens with dlopen only when a kernel is asked for, so libspecd
 * itself never needs libcudart (tests/install/test_no_cudart.sh). The library exports one symbol,
 * SPECD_CUDA_KERNELS_ENTRY, returning this table; abi_version and struct_size let a newer
 * libspecd use an older kernel library's slots and refuse one it does not know. */
#ifndef SPECD_KERNELS_CUDA_KERNELS_H
#define SPECD_KERNELS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifndef __cplusplus
#include "specd/status.h"
#endif

#define SPECD_CUDA_KERNELS_ABI 1
#define SPECD_CUDA_KERNELS_ENTRY "specd_cuda_kernels_v1"
#define SPECD_CUDA_KERNELS_SONAME "libspecd_cuda.so"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_cuda_kernels {
    uint32_t abi_version;
    size_t struct_size;
    /* Copies n floats host -> device -> host through a kernel that scales by 2 (a smoke test
     * that the toolkit, the driver and our arch flags agree). 0 or a cudaError_t. */
    int (*scale_roundtrip)(const float *in, float *out, int n);
} specd_cuda_kernels;

typedef const specd_cuda_kernels *(*specd_cuda_kernels_entry_fn)(void);

#ifndef __cplusplus
/* The kernel library, loaded once per process: $SPECD_CUDA_LIBRARY when set, else
 * libspecd_cuda.so beside the object that holds libspecd (the build tree or the install's
 * libdir), else by name through the dynamic loader's path. NULL with SPECD_E_UNSUPPORTED when
 * none loads (a build without CUDA, or a library of another ABI). Borrowed for the process. */
const specd_cuda_kernels *specd_cuda_kernels_get(specd_error *err);
#endif

#ifdef __cplusplus
}
#endif
#endif
