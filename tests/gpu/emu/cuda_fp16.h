// fp16 for the CPU emulation (tests/gpu/emu/run): the CPU kernels' exact conversions.
#pragma once
#include "cuda_runtime.h"
struct __half { uint16_t h; };
static inline __half __ushort_as_half(uint16_t h) { return __half{h}; }
static inline uint16_t __half_as_ushort(__half h) { return h.h; }
static inline float __half2float(__half h) { return specd_fp16_to_fp32(h.h); }
static inline __half __float2half_rn(float f) { return __half{specd_fp32_to_fp16(f)}; }
