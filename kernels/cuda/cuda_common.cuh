/* Device helpers shared by libspecd_cuda.so's kernels (one operation per .cu file). */
#ifndef SPECD_KERNELS_CUDA_COMMON_CUH
#define SPECD_KERNELS_CUDA_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/cuda_plan.h"

/* An fp16 bit pattern as float: exact, as kernels/cpu/fp16.h converts. */
static __device__ __forceinline__ float specd_dev_h2f(uint16_t h) {
    return __half2float(__ushort_as_half(h));
}

/* Round to nearest even, as kernels/cpu/fp16.h's specd_fp32_to_fp16 for finite values. */
static __device__ __forceinline__ uint16_t specd_dev_f2h(float f) {
    return __half_as_ushort(__float2half_rn(f));
}

/* 4 bytes at a 2-byte aligned address, as one little-endian word (Q4_0 and Q8_0 quants sit at
 * an even but not a 4-byte offset of their blocks). */
static __device__ __forceinline__ int specd_dev_load_u16x2(const uint8_t *p) {
    const uint16_t *h = (const uint16_t *)p;
    return (int)((uint32_t)h[0] | ((uint32_t)h[1] << 16));
}

/* The launch's own error (a bad configuration); errors while it runs surface at the next
 * synchronising call on the stream, as CUDA reports them. */
static inline int specd_cuda_launch_status(void) {
    const cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? SPECD_CUDA_OK : (int)e;
}

#define SPECD_CUDA_STREAM(s) ((cudaStream_t)(s))

#endif
