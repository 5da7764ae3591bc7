/* specd's CUDA kernels: built by nvcc into their own shared library, libspecd_cuda.so (linked
 * with libcudart), which libspecd opens with dlopen only when a kernel is asked for, so libspecd
 * itself never needs libcudart (tests/install/test_no_cudart.sh). The library exports one symbol,
 * SPECD_CUDA_KERNELS_ENTRY, returning this table; abi_version and struct_size let a newer
 * libspecd use an older kernel library's slots and refuse one it does not know. */
#ifndef SPECD_KERNELS_CUDA_KERNELS_H
#define SPECD_KERNELS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_plan.h"
#include "kernels/cuda/verify_plan.h"

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
    /* The per-operation launchers, as kernels/cuda/cuda_ops.h declares them (status returns:
     * SPECD_CUDA_OK, SPECD_CUDA_E_ARGUMENT with last_refusal's reason, or a cudaError_t). */
    const char *(*last_refusal)(void);
    int (*quantize_q8)(const float *x, int64_t ld_x, int32_t n_rows, int32_t n, void *xq,
                       void *stream);
    int (*matmul_q)(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out, const void *xq,
                    int32_t n_rows, float *y, int64_t ld_y, void *stream);
    int (*matmul_f)(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out, const float *x,
                    int64_t ld_x, int32_t n_rows, float *y, int64_t ld_y, void *stream);
    int (*rmsnorm)(const float *x, int64_t ld_x, const float *w, float *y, int64_t ld_y,
                   int32_t n_rows, int32_t n, float eps, void *stream);
    int (*rope)(float *x, int64_t ld_x, int32_t n_rows, const int32_t *pos, int32_t n_heads,
                int32_t head_dim, int32_t n_rot, float freq_base, int neox, void *stream);
    int (*swiglu)(const float *g, int64_t ld_g, const float *u, int64_t ld_u, float *y,
                  int64_t ld_y, int32_t n_rows, int32_t n, void *stream);
    int (*embed)(uint32_t type, const void *table, int32_t n_vocab, int32_t n_embd,
                 const int32_t *ids, const float *vectors, int64_t ld_vectors, float *y,
                 int64_t ld_y, int32_t n_rows, void *stream);
    int (*attention)(const specd_cuda_attention_args *args, void *stream);
    /* Waits for everything enqueued on stream (NULL: the legacy default stream); its
     * cudaError_t, which reports a kernel that failed while running. */
    int (*stream_sync)(void *stream);
    int (*quantize_q8_k)(const float *x, int64_t ld_x, int32_t n_rows, int32_t n, void *xq,
                         void *stream);
    int (*matmul_k)(uint32_t w_type, const void *w, int32_t n_in, int32_t n_out, const void *xq,
                    int32_t n_rows, float *y, int64_t ld_y, void *stream);
    int (*lora)(const float *a, const float *b, int32_t n_in, int32_t n_out, int32_t rank,
                float scale, const float *x, int64_t ld_x, const float *gate, int32_t n_rows,
                float *y, int64_t ld_y, float *work, size_t work_floats, void *stream);
    /* the runtime's forward pass (model/runtime/forward_cuda.c) */
    int (*add)(const float *a, int64_t ld_a, const float *b, int64_t ld_b, float *y, int64_t ld_y,
               int32_t n_rows, int32_t n, void *stream);
    int (*store_f16)(const float *x, int64_t ld_x, int32_t n_rows, int32_t n,
                     const int32_t *dst_rows, uint16_t *dst, int64_t ld_dst, void *stream);
    int (*gather)(const float *x, int64_t ld_x, const int32_t *rows, int32_t n_rows, int32_t n,
                  float *y, int64_t ld_y, void *stream);
    int (*move_rows_f16)(uint16_t *base, int64_t plane_stride, int32_t n_planes, int64_t ld,
                         int32_t n, const int32_t *src, const int32_t *dst, int32_t n_rows,
                         void *stream);
    /* ---- acceptance on the device (kernels/cuda/verify.cu); NULL in older libraries: check
     * struct_size covers it before calling ---- */
    int (*verify)(const specd_cuda_verify_args *args, void *stream);
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
