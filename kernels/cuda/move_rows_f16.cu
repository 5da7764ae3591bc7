/* F16 row moves inside planes (kernels/cuda/cuda_ops.h): the runtime's kv_keep and commit
 * compaction, row src[j] to row dst[j] of every plane (one plane per layer's K or V of one
 * sequence). One block per plane copies the rows in list order, a barrier between rows, so a
 * row that is read by one move and written by a later one reads its old bits, as the CPU's
 * memcpy loop (model/runtime/context.c, rt_kv_compact) does. */
#include "kernels/cuda/cuda_common.cuh"

static __global__ void move_rows_kernel(uint16_t *base, int64_t plane_stride, int64_t ld, int32_t n,
                                        const int32_t *__restrict__ src,
                                        const int32_t *__restrict__ dst, int32_t n_rows) {
    uint16_t *p = base + (int64_t)blockIdx.x * plane_stride;
    for (int32_t j = 0; j < n_rows; j++) {
        const uint16_t *s = p + (int64_t)src[j] * ld;
        uint16_t *d = p + (int64_t)dst[j] * ld;
        for (int32_t i = threadIdx.x; i < n; i += SPECD_CUDA_THREADS)
            d[i] = s[i];
        __syncthreads();
    }
}

extern "C" int specd_cuda_move_rows_f16(uint16_t *base, int64_t plane_stride, int32_t n_planes,
                                        int64_t ld, int32_t n, const int32_t *src,
                                        const int32_t *dst, int32_t n_rows, void *stream) {
    size_t why_size;
    char *why = specd_cuda_refusal_buffer(&why_size);
    if (!base || !src || !dst || n_planes < 0 || n_rows < 0 || n < 1 || ld < n ||
        (n_planes > 1 && plane_stride < ld) || ((uintptr_t)base & 1) || ((uintptr_t)src & 3) ||
        ((uintptr_t)dst & 3)) {
        snprintf(why, why_size,
                 "move_rows_f16: needs base, src, dst (aligned), n >= 1, ld >= n, plane_stride "
                 ">= ld (n_planes %d, n_rows %d, n %d)",
                 n_planes, n_rows, n);
        return SPECD_CUDA_E_ARGUMENT;
    }
    if (n_rows == 0 || n_planes == 0) return SPECD_CUDA_OK;
    move_rows_kernel<<<(unsigned)n_planes, SPECD_CUDA_THREADS, 0, SPECD_CUDA_STREAM(stream)>>>(
        base, plane_stride, ld, n, src, dst, n_rows);
    return specd_cuda_launch_status();
}
