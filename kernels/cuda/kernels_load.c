/* Opens libspecd_cuda.so on first use (kernels/cuda/cuda_kernels.h). */
#include "kernels/cuda/cuda_kernels.h"

#include "common/status_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const specd_cuda_kernels *kernels;
static char why[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static int try_open(const char *path) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (!why[0]) snprintf(why, sizeof why, "%s", e ? e : path); /* the first try's reason */
        return 0;
    }
    specd_cuda_kernels_entry_fn entry;
    *(void **)&entry = dlsym(h, SPECD_CUDA_KERNELS_ENTRY);
    const specd_cuda_kernels *k = entry ? entry() : NULL;
    if (!k || k->abi_version != SPECD_CUDA_KERNELS_ABI ||
        k->struct_size < sizeof(specd_cuda_kernels)) {
        snprintf(why, sizeof why,
                 "%s is not a kernel library of ABI %d with a table of at least %zu bytes (an "
                 "older build?)",
                 path, SPECD_CUDA_KERNELS_ABI, sizeof(specd_cuda_kernels));
        dlclose(h);
        return 0;
    }
    kernels = k; /* kept open for the process */
    return 1;
}

static void open_kernels(void) {
    const char *env = getenv("SPECD_CUDA_LIBRARY");
    if (env && *env) {
        try_open(env); /* named explicitly: nothing else is tried */
        return;
    }
    /* Beside libspecd.so (or the program a static libspecd is linked into). */
    Dl_info info;
    if (dladdr((void *)&specd_cuda_kernels_get, &info) && info.dli_fname) {
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash) {
            char path[4096];
            int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - info.dli_fname),
                             info.dli_fname, SPECD_CUDA_KERNELS_SONAME);
            if (n > 0 && (size_t)n < sizeof path && try_open(path)) return;
        }
    }
    try_open(SPECD_CUDA_KERNELS_SONAME);
}

const specd_cuda_kernels *specd_cuda_kernels_get(specd_error *err) {
    pthread_once(&once, open_kernels);
    if (!kernels)
        specd_fail(err, SPECD_E_UNSUPPORTED, "specd's CUDA kernels (%s) are not available: %s (%s)",
                   SPECD_CUDA_KERNELS_SONAME, why,
#ifdef SPECD_CUDART_DIR
                   "this build made them: install them beside libspecd, or name the file in "
                   "SPECD_CUDA_LIBRARY"
#else
                   "this specd was built without CUDA: install the CUDA toolkit (nvcc) and "
                   "rebuild with cmake -DSPECD_CUDA=ON; docs/gpu.md"
#endif
        );
    return kernels;
}
