// A CPU emulation of the CUDA runtime pieces specd's kernels use (tests/gpu/emu/run), so their
// code, index math and reduction orders can execute on a machine without a GPU. Not the device:
// every CUDA thread is a fiber (ucontext), blocks run one after another, __syncthreads and warp
// shuffles are cooperative barriers (a barrier some threads never reach aborts, as does a shuffle
// with lanes that have exited), float intrinsics are the host's IEEE operations and expf, sinf,
// cosf are the host's libm. Only 1-D blocks.
#pragma once
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucontext.h>
#include <functional>
#include <vector>
extern "C" {
#include "kernels/cpu/fp16.h"
}
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
struct dim3 {
    unsigned x, y, z;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
typedef void *cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3, cudaErrorInsufficientDriver = 35 };
#define cudaEventDisableTiming 0x02
#define cudaEventInterprocess 0x04
#define cudaIpcMemLazyEnablePeerAccess 0x01
typedef struct { char reserved[64]; } cudaIpcMemHandle_t;
typedef struct { char reserved[64]; } cudaIpcEventHandle_t;
extern "C" {
int cudaMalloc(void **p, size_t n);
int cudaFree(void *p);
int cudaMemcpy(void *d, const void *s, size_t n, int k);
int cudaStreamSynchronize(void *s);
}
template <class T> static inline int cudaMalloc(T **p, size_t n) { return cudaMalloc((void **)p, n); }
static inline int cudaGetLastError(void) { return 0; }

enum emu_state { EMU_READY, EMU_WARP, EMU_BLOCK, EMU_DONE };
struct emu_fiber {
    dim3 tid;
    int state;
    ucontext_t ctx;
    std::vector<char> stack;
};
static emu_fiber *emu_cur;
static ucontext_t emu_sched;
static dim3 blockIdx, blockDim, gridDim;
#define threadIdx (emu_cur->tid)
static union { double d; float f; int i; unsigned u; } emu_xchg[1024];

static inline void emu_wait(int st) {
    emu_cur->state = st;
    swapcontext(&emu_cur->ctx, &emu_sched);
}
static inline void __syncthreads() { emu_wait(EMU_BLOCK); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T> static inline void emu_put(T v);
template <> inline void emu_put<float>(float v) { emu_xchg[emu_cur->tid.x].f = v; }
template <> inline void emu_put<int>(int v) { emu_xchg[emu_cur->tid.x].i = v; }
template <> inline void emu_put<double>(double v) { emu_xchg[emu_cur->tid.x].d = v; }
template <class T> static inline T emu_get(unsigned t);
template <> inline float emu_get<float>(unsigned t) { return emu_xchg[t].f; }
template <> inline int emu_get<int>(unsigned t) { return emu_xchg[t].i; }
template <> inline double emu_get<double>(unsigned t) { return emu_xchg[t].d; }
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src) {
    (void)mask;
    emu_put<T>(v);
    emu_wait(EMU_WARP);
    T r = emu_get<T>((emu_cur->tid.x & ~31u) + (unsigned)src);
    emu_wait(EMU_WARP);
    return r;
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int o) {
    return __shfl_sync(mask, v, (int)((emu_cur->tid.x & 31u) ^ (unsigned)o));
}

static std::function<void()> *emu_body;
static void emu_entry() {
    (*emu_body)();
    emu_cur->state = EMU_DONE;
    swapcontext(&emu_cur->ctx, &emu_sched);
}
static inline void emu_launch_now(dim3 grid, dim3 block, std::function<void()> body) {
    if (block.y != 1 || block.z != 1 || block.x > 1024) { fprintf(stderr, "emu: 1-D blocks only\n"); abort(); }
    gridDim = grid;
    blockDim = block;
    emu_body = &body;
    const unsigned n = block.x;
    std::vector<emu_fiber> f(n);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                blockIdx = dim3(x, y, z);
                for (unsigned t = 0; t < n; t++) {
                    f[t].tid = dim3(t, 0, 0);
                    f[t].state = EMU_READY;
                    f[t].stack.resize(1 << 16);
                    getcontext(&f[t].ctx);
                    f[t].ctx.uc_stack.ss_sp = f[t].stack.data();
                    f[t].ctx.uc_stack.ss_size = f[t].stack.size();
                    f[t].ctx.uc_link = nullptr;
                    makecontext(&f[t].ctx, emu_entry, 0);
                }
                for (;;) {
                    bool ran = false;
                    for (unsigned t = 0; t < n; t++)
                        if (f[t].state == EMU_READY) {
                            emu_cur = &f[t];
                            swapcontext(&emu_sched, &f[t].ctx);
                            ran = true;
                        }
                    bool all_done = true, all_block = true;
                    for (unsigned t = 0; t < n; t++) {
                        if (f[t].state != EMU_DONE) all_done = false;
                        if (f[t].state != EMU_DONE && f[t].state != EMU_BLOCK) all_block = false;
                    }
                    if (all_done) break;
                    bool released = false;
                    if (all_block) {
                        for (unsigned t = 0; t < n; t++)
                            if (f[t].state == EMU_BLOCK) f[t].state = EMU_READY;
                        released = true;
                    } else {
                        for (unsigned w = 0; w < (n + 31) / 32; w++) {
                            bool all_warp = true, any = false;
                            for (unsigned t = w * 32; t < n && t < w * 32 + 32; t++) {
                                if (f[t].state == EMU_DONE) continue;
                                if (f[t].state != EMU_WARP) all_warp = false;
                                else any = true;
                            }
                            if (all_warp && any) {
                                for (unsigned t = w * 32; t < n && t < w * 32 + 32; t++)
                                    if (f[t].state == EMU_WARP) f[t].state = EMU_READY;
                                released = true;
                            }
                        }
                    }
                    if (!ran && !released) { fprintf(stderr, "emu: deadlock in block (%u,%u,%u)\n", x, y, z); abort(); }
                    // a warp shuffle with some lanes of the warp already done is a bug in the kernel
                    for (unsigned w = 0; w < (n + 31) / 32; w++) {
                        bool done = false, warp = false;
                        for (unsigned t = w * 32; t < n && t < w * 32 + 32; t++) {
                            done |= f[t].state == EMU_DONE;
                            warp |= f[t].state == EMU_WARP;
                        }
                        if (done && warp) { fprintf(stderr, "emu: shuffle with exited lanes\n"); abort(); }
                    }
                }
            }
}

/* Stream capture (host_cudart.c): a launch on a capturing stream is recorded, not run; the
 * recording keeps the launch's shape and its arguments' values (launches.py binds them at the
 * launch), and a graph launch runs it through emu_launch_now as a direct launch would. */
extern "C" int emuCaptureRecord(const void *stream, void (*run)(void *), void (*drop)(void *),
                                void *ctx);
struct emu_recorded {
    dim3 grid, block;
    std::function<void()> body;
};
static void emu_recorded_run(void *p) {
    emu_recorded *r = (emu_recorded *)p;
    emu_launch_now(r->grid, r->block, r->body);
}
static void emu_recorded_drop(void *p) { delete (emu_recorded *)p; }
static inline void emu_launch(dim3 grid, dim3 block, std::function<void()> body,
                              const void *stream = nullptr) {
    emu_recorded *r = new emu_recorded{grid, block, body};
    if (emuCaptureRecord(stream, emu_recorded_run, emu_recorded_drop, r)) return;
    delete r;
    emu_launch_now(grid, block, body);
}
#define cudaStreamNonBlocking 0x01
typedef void *cudaGraph_t;
typedef void *cudaGraphExec_t;
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1,
                             cudaStreamCaptureModeRelaxed = 2 };

static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline int __float2int_rn(float a) { return (int)nearbyintf(a); }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> (8 * k)) * (int8_t)(b >> (8 * k));
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= ((((a >> (8 * k)) & 255u) - ((b >> (8 * k)) & 255u)) & 255u) << (8 * k);
    return r;
}
// For the acceptance kernel (verify.cu): integer and bit intrinsics, and atomics and fences,
// which are plain operations here (fibers switch only at barriers).
static inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((unsigned long long)a * b) >> 32); }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline unsigned atomicAdd(unsigned *p, unsigned v) { unsigned o = *p; *p = o + v; return o; }
static inline int atomicAdd(int *p, int v) { int o = *p; *p = o + v; return o; }
static inline void __threadfence() {}
extern "C" {
int cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *stream);
int cudaMemsetAsync(void *d, int v, size_t n, void *stream);
}
