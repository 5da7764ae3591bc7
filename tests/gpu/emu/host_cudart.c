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
static int emu_take_pending_error(void);
int cudaStreamSynchronize(void *s) { (void)s; return emu_take_pending_error(); }
int cudaIpcGetMemHandle(void *h, void *p) { (void)h; (void)p; return 1; }
int cudaIpcGetEventHandle(void *h, void *p) { (void)h; (void)p; return 1; }
typedef struct { char r[64]; } hnd;
int cudaIpcOpenMemHandle(void **p, hnd h, unsigned f) { (void)p; (void)h; (void)f; return 1; }
int cudaIpcCloseMemHandle(void *p) { (void)p; return 1; }
int cudaIpcOpenEventHandle(void **e, hnd h) { (void)e; (void)h; return 1; }
int cudaMemGetInfo(size_t *f, size_t *t) { const char *e = getenv("SPECD_EMU_DEVICE_MEMORY"); *f = e ? (size_t)strtoull(e, NULL, 10) : (size_t)8 << 30; *t = *f; return 0; }
static int emu_record_copy(void *st, void *d, const void *s, size_t n, int v, int is_set);
int cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { (void)k; if (!emu_record_copy(st, d, s, n, 0, 0)) memcpy(d, s, n); return 0; }
int cudaStreamCreate(void **s) { *s = malloc(1); return 0; }
int cudaStreamDestroy(void *s) { free(s); return 0; }
int cudaMallocHost(void **p, size_t n) { *p = malloc(n ? n : 1); return *p ? 0 : 2; }
int cudaFreeHost(void *p) { free(p); return 0; }
int cudaDriverGetVersion(int *v) { const char *e = getenv("SPECD_EMU_DRIVER"); *v = e ? atoi(e) : 13000; return 0; }
int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }
int cudaMemsetAsync(void *d, int v, size_t n, void *st) { if (!emu_record_copy(st, d, NULL, n, v, 1)) memset(d, v, n); return 0; }

/* Stream capture and graphs. Between cudaStreamBeginCapture and cudaStreamEndCapture, what is
 * enqueued on the capturing stream (kernel launches, which cuda_runtime.h hands over with their
 * arguments' values; async copies and memsets) is recorded instead of run; a graph is that
 * list, an executable graph a copy of it, and cudaGraphLaunch runs it in order, as the stream
 * would have. Fault injection for the runtime's tests: SPECD_EMU_CAPTURE_FAIL=1 makes every
 * capture end invalidated (cudaErrorStreamCaptureInvalidated); SPECD_EMU_GRAPH_FAIL=1 makes a
 * graph launch stop after half its operations and the next cudaStreamSynchronize report
 * cudaErrorLaunchFailure (a kernel that failed mid-step), once. */
typedef struct emu_op {
    int refs;
    void (*run)(void *);
    void (*drop)(void *);
    void *ctx;
} emu_op;
typedef struct emu_graph {
    emu_op **ops;
    size_t n, cap;
} emu_graph;
static const void *emu_capturing;
static emu_graph *emu_capture;
static int emu_pending_error;

static void emu_op_release(emu_op *o) {
    if (--o->refs > 0) return;
    if (o->drop) o->drop(o->ctx);
    free(o);
}
static void emu_graph_free(emu_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n; i++) emu_op_release(g->ops[i]);
    free(g->ops);
    free(g);
}
/* 1 when stream is capturing (the operation is now the graph's), 0 to run it now. */
int emuCaptureRecord(const void *stream, void (*run)(void *), void (*drop)(void *), void *ctx) {
    if (!emu_capture || stream != emu_capturing) return 0;
    if (emu_capture->n == emu_capture->cap) {
        size_t cap = emu_capture->cap ? 2 * emu_capture->cap : 64;
        emu_op **ops = realloc(emu_capture->ops, cap * sizeof *ops);
        if (!ops) abort();
        emu_capture->ops = ops;
        emu_capture->cap = cap;
    }
    emu_op *o = malloc(sizeof *o);
    if (!o) abort();
    *o = (emu_op){1, run, drop, ctx};
    emu_capture->ops[emu_capture->n++] = o;
    return 1;
}
typedef struct emu_copy { void *d; const void *s; size_t n; int v, is_set; } emu_copy;
static void emu_copy_run(void *p) {
    emu_copy *c = p;
    if (c->is_set) memset(c->d, c->v, c->n);
    else memcpy(c->d, c->s, c->n);
}
static int emu_record_copy(void *st, void *d, const void *s, size_t n, int v, int is_set) {
    if (!emu_capture || st != emu_capturing) return 0;
    emu_copy *c = malloc(sizeof *c);
    if (!c) abort();
    *c = (emu_copy){d, s, n, v, is_set};
    return emuCaptureRecord(st, emu_copy_run, free, c);
}
int cudaStreamBeginCapture(void *s, int mode) {
    (void)mode;
    if (emu_capture) return 900; /* cudaErrorStreamCaptureUnsupported: one capture at a time */
    emu_capture = calloc(1, sizeof *emu_capture);
    if (!emu_capture) return 2;
    emu_capturing = s;
    return 0;
}
int cudaStreamEndCapture(void *s, void **graph) {
    if (!emu_capture || s != emu_capturing) return 901;
    emu_graph *g = emu_capture;
    emu_capture = NULL;
    emu_capturing = NULL;
    const char *e = getenv("SPECD_EMU_CAPTURE_FAIL");
    if (e && atoi(e)) {
        emu_graph_free(g);
        *graph = NULL;
        return 901; /* cudaErrorStreamCaptureInvalidated */
    }
    *graph = g;
    return 0;
}
int cudaGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long flags) {
    (void)flags;
    const emu_graph *g = graph;
    emu_graph *x = calloc(1, sizeof *x);
    if (!x) return 2;
    x->ops = malloc((g->n ? g->n : 1) * sizeof *x->ops);
    if (!x->ops) { free(x); return 2; }
    for (size_t i = 0; i < g->n; i++) {
        x->ops[i] = g->ops[i];
        x->ops[i]->refs++;
    }
    x->n = x->cap = g->n;
    *exec = x;
    return 0;
}
int cudaGraphLaunch(void *exec, void *s) {
    (void)s;
    const emu_graph *x = exec;
    const char *e = getenv("SPECD_EMU_GRAPH_FAIL");
    const size_t n = e && atoi(e) ? x->n / 2 : x->n;
    for (size_t i = 0; i < n; i++) x->ops[i]->run(x->ops[i]->ctx);
    if (n < x->n) emu_pending_error = 719; /* cudaErrorLaunchFailure */
    return 0;
}
int cudaStreamCreateWithFlags(void **s, unsigned f) { (void)f; *s = malloc(1); return 0; }
int cudaGraphExecDestroy(void *exec) { emu_graph_free(exec); return 0; }
int cudaGraphDestroy(void *graph) { emu_graph_free(graph); return 0; }
static int emu_take_pending_error(void) {
    const int e = emu_pending_error;
    emu_pending_error = 0;
    return e;
}
