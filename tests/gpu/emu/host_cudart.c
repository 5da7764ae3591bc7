/* The CUDA runtime calls libspecd resolves (kernels/cuda/cudart.c), on host memory, for the CPU
 * emulation (tests/gpu/emu/run): one "device", cudaMalloc fills new memory with 0xa5 bytes so a
 * kernel that reads what nobody wrote shows it, copies are synchronous.
 * SPECD_EMU_DEVICE_MEMORY (bytes, default 8 GiB) is the device's memory: cudaMemGetInfo reports
 * it less what this process holds allocated (so a leak shows), and the runtime's memory check can
 * be tried; SPECD_EMU_DRIVER (default 13000) is the driver's CUDA version.
 * IPC between processes: an exported allocation moves into a memfd mapped at the same address
 * (its handle names the owner's pid and fd), which the peer maps through /proc/<pid>/fd (same
 * uid); events are trivial since every copy and kernel is synchronous. Like the driver, a handle
 * cannot be opened by its own process, nor once its owner is gone. Built as libcudart.so.13. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int cudaDriverGetVersion(int *v);
/* a driver older than the runtime (SPECD_EMU_DRIVER below 13000): cudaErrorInsufficientDriver */
int cudaGetDeviceCount(int *n) { int d; cudaDriverGetVersion(&d); *n = d < 13000 ? 0 : 1; return d < 13000 ? 35 : 0; }
int cudaSetDevice(int d) { (void)d; return 0; }
int cudaGetLastError(void) { return 0; }
const char *cudaGetErrorString(int c) { (void)c; return "emu"; }
/* Every allocation, for cudaFree, the IPC export and cudaMemGetInfo: mapped pages, so an
 * export can swap them for a shared mapping in place. */
typedef struct { void *p; size_t n; int fd; int imported; } alloc_rec;
static alloc_rec *allocs;
static size_t n_allocs, cap_allocs, held_bytes;
static pthread_mutex_t alloc_mu = PTHREAD_MUTEX_INITIALIZER;
static int record(void *p, size_t n, int fd, int imported) {
    if (n_allocs == cap_allocs) {
        size_t cap = cap_allocs ? 2 * cap_allocs : 256;
        alloc_rec *a = realloc(allocs, cap * sizeof *a);
        if (!a) return 0;
        allocs = a;
        cap_allocs = cap;
    }
    allocs[n_allocs++] = (alloc_rec){p, n, fd, imported};
    if (!imported) held_bytes += n;
    return 1;
}
static alloc_rec *find_alloc(const void *p) {
    for (size_t i = 0; i < n_allocs; i++)
        if (allocs[i].p == p) return &allocs[i];
    return NULL;
}
static void forget(alloc_rec *a) {
    if (!a->imported) held_bytes -= a->n;
    if (a->fd >= 0) close(a->fd);
    munmap(a->p, a->n);
    *a = allocs[--n_allocs];
}
int cudaMalloc(void **p, size_t n) {
    size_t pages = (n + 4095) / 4096 * 4096;
    if (!pages) pages = 4096;
    void *m = mmap(NULL, pages, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return 2;
    memset(m, 0xa5, pages);
    pthread_mutex_lock(&alloc_mu);
    int ok = record(m, pages, -1, 0);
    pthread_mutex_unlock(&alloc_mu);
    if (!ok) { munmap(m, pages); return 2; }
    *p = m;
    return 0;
}
int cudaFree(void *p) {
    if (!p) return 0;
    pthread_mutex_lock(&alloc_mu);
    alloc_rec *a = find_alloc(p);
    if (a && !a->imported) forget(a);
    pthread_mutex_unlock(&alloc_mu);
    return a ? 0 : 1; /* cudaErrorInvalidValue */
}
int cudaMemcpy(void *d, const void *s, size_t n, int k) { (void)k; memcpy(d, s, n); return 0; }
int cudaMemcpy2D(void *d, size_t dp, const void *s, size_t sp, size_t w, size_t h, int k) { (void)k; for (size_t i = 0; i < h; i++) memcpy((char *)d + i * dp, (const char *)s + i * sp, w); return 0; }
int cudaEventCreateWithFlags(void **e, unsigned f) { (void)f; *e = malloc(1); return 0; }
int cudaEventDestroy(void *e) { free(e); return 0; }
int cudaEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
int cudaStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
static int emu_take_pending_error(void);
int cudaStreamSynchronize(void *s) { (void)s; return emu_take_pending_error(); }
typedef struct { char r[64]; } hnd;
typedef struct { char magic[8]; int pid, fd; size_t n; } emu_handle;
int cudaIpcGetMemHandle(void *h, void *p) {
    pthread_mutex_lock(&alloc_mu);
    alloc_rec *a = find_alloc(p);
    int rc = 1;
    if (a && !a->imported && a->fd < 0) {
        int fd = memfd_create("specd-emu-ipc", MFD_CLOEXEC);
        if (fd >= 0 && ftruncate(fd, (off_t)a->n) == 0 && pwrite(fd, a->p, a->n, 0) == (ssize_t)a->n &&
            mmap(a->p, a->n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == a->p)
            a->fd = fd;
        else if (fd >= 0)
            close(fd);
    }
    if (a && a->fd >= 0) {
        emu_handle e = {"SPECDEMU", (int)getpid(), a->fd, a->n};
        memset(h, 0, 64);
        memcpy(h, &e, sizeof e);
        rc = 0;
    }
    pthread_mutex_unlock(&alloc_mu);
    return rc;
}
int cudaIpcGetEventHandle(void *h, void *e) { (void)e; memset(h, 0, 64); memcpy(h, "SPECDEVT", 8); return 0; }
int cudaIpcOpenMemHandle(void **p, hnd h, unsigned f) {
    (void)f;
    emu_handle e;
    memcpy(&e, h.r, sizeof e);
    if (memcmp(e.magic, "SPECDEMU", 8) != 0 || e.pid == (int)getpid()) return 400; /* invalid handle */
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", e.pid, e.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 400;
    struct stat st;
    void *m = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size == e.n)
        m = mmap(NULL, e.n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return 400;
    pthread_mutex_lock(&alloc_mu);
    int ok = record(m, e.n, -1, 1);
    pthread_mutex_unlock(&alloc_mu);
    if (!ok) { munmap(m, e.n); return 2; }
    *p = m;
    return 0;
}
int cudaIpcCloseMemHandle(void *p) {
    pthread_mutex_lock(&alloc_mu);
    alloc_rec *a = find_alloc(p);
    if (a && a->imported) forget(a);
    pthread_mutex_unlock(&alloc_mu);
    return a ? 0 : 1;
}
int cudaIpcOpenEventHandle(void **e, hnd h) { if (memcmp(h.r, "SPECDEVT", 8) != 0) return 400; *e = malloc(1); return 0; }
int cudaMemGetInfo(size_t *f, size_t *t) {
    const char *e = getenv("SPECD_EMU_DEVICE_MEMORY");
    *t = e ? (size_t)strtoull(e, NULL, 10) : (size_t)8 << 30;
    pthread_mutex_lock(&alloc_mu);
    *f = held_bytes < *t ? *t - held_bytes : 0;
    pthread_mutex_unlock(&alloc_mu);
    return 0;
}
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
