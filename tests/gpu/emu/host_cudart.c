/* The CUDA runtime calls libspecd resolves (kernels/cuda/cudart.c), on host memory, for the CPU
 * emulation (tests/gpu/emu/run): one "device", cudaMalloc fills new memory with 0xa5 bytes so a
 * kernel that reads what nobody wrote shows it, IPC refuses, copies are synchronous.
 * SPECD_EMU_DEVICE_MEMORY (bytes, default 8 GiB) is the free memory cudaMemGetInfo reports, so
 * the runtime's memory check can be tried; SPECD_EMU_DRIVER (default 13000) is the driver's
 * CUDA version. Built as libcudart.so.13. */
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
int cudaDriverGetVersion(int *v);
/* a driver older than the runtime (SPECD_EMU_DRIVER below 13000): cudaErrorInsufficientDriver */
int cudaGetDeviceCount(int *n) { int d; cudaDriverGetVersion(&d); *n = d < 13000 ? 0 : 1; return d < 13000 ? 35 : 0; }
int cudaSetDevice(int d) { (void)d; return 0; }
int cudaGetLastError(void) { return 0; }
const char *cudaGetErrorString(int c) { (void)c; return "emu"; }
int cudaMalloc(void **p, size_t n) { *p = aligned_alloc(256, (n + 255) / 256 * 256); memset(*p, 0xa5, (n + 255) / 256 * 256); return *p ? 0 : 2; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpy(void *d, const void *s, size_t n, int k) { (void)k; memcpy(d, s, n); return 0; }
int cudaMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k) { (void)k; for (size_t i = 0; i < h; i++) memcpy((char *)d + i * dp, (const char *)s + i * sp, w); return 0; }
int cudaEventCreateWithFlags(void **e, unsigned f) { (void)f; *e = malloc(1); return 0; }
int cudaEventDestroy(void *e) { free(e); return 0; }
int cudaEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
int cudaStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaIpcGetMemHandle(void *h, void *p) { (void)h; (void)p; return 1; }
int cudaIpcGetEventHandle(void *h, void *p) { (void)h; (void)p; return 1; }
typedef struct { char r[64]; } hnd;
int cudaIpcOpenMemHandle(void **p, hnd h, unsigned f) { (void)p; (void)h; (void)f; return 1; }
int cudaIpcCloseMemHandle(void *p) { (void)p; return 1; }
int cudaIpcOpenEventHandle(void **e, hnd h) { (void)e; (void)h; return 1; }
int cudaMemGetInfo(size_t *f, size_t *t) { const char *e = getenv("SPECD_EMU_DEVICE_MEMORY"); *f = e ? (size_t)strtoull(e, NULL, 10) : (size_t)8 << 30; *t = *f; return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { (void)k; (void)st; memcpy(d, s, n); return 0; }
int cudaStreamCreate(void **s) { *s = malloc(1); return 0; }
int cudaStreamDestroy(void *s) { free(s); return 0; }
int cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaDriverGetVersion(int *v) { const char *e = getenv("SPECD_EMU_DRIVER"); *v = e ? atoi(e) : 13000; return 0; }
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaMemsetAsync(void *d, int v, size_t n, void *st) { (void)st; memset(d, v, n); return 0; }
