/* Owner side of shared buffers (public API in specd/ipc.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/buffer.h"
#include "ipc/frame.h"
#include "ipc/cuda_buffer.h"

struct specd_ipc_buffer {
    specd_ipc_buffer_kind kind;
    uint64_t id;
    size_t bytes;
    /* SHM */
    int fd;
    char name[SPECD_IPC_SHM_NAME_MAX];
    int linked;
    uint8_t *map;
    size_t map_bytes;
    /* CUDA */
    int device;
    void *dptr;
    void *event;
    uint64_t cuda_seq;
    unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE_BYTES];
    unsigned char event_handle[SPECD_IPC_CUDA_HANDLE_BYTES];
};

static uint64_t random_u64(void) {
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v)
        v = (uint64_t)getpid() * 0x9e3779b97f4a7c15ULL;
    return v;
}

int specd_ipc_shm_sweep(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    char prefix[64];
    int plen = snprintf(prefix, sizeof prefix, "%s%u-", SPECD_SHM_PREFIX, (unsigned)geteuid());
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, prefix, (size_t)plen) != 0) continue;
        char *end = NULL;
        long pid = strtol(e->d_name + plen, &end, 10);
        if (pid <= 0 || !end || *end != '-') continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* owner alive (or not ours) */
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0) removed++;
    }
    closedir(d);
    return removed;
}

/* A sealed memfd: its size cannot change once created, so a peer that maps it can never be
 * killed by SIGBUS through a segment shrunk under it (a POSIX shm name could be truncated by any
 * process of the uid). Peers open it through /proc/<pid>/fd/<fd> (same uid only), so it leaves
 * nothing in /dev/shm either. */
static specd_status shm_create(specd_ipc_buffer *b, specd_error *err) {
    specd_ipc_shm_sweep(); /* names of older versions' owners that died */
    size_t total;
    if (!specd_add_ok(b->bytes, SPECD_SHM_HEADER_BYTES, &total))
        return specd_fail(err, SPECD_E_INVALID_ARG, "shm buffer: %zu bytes overflows", b->bytes);
    snprintf(b->name, sizeof b->name, "/%s%u-%ld-%016llx", SPECD_SHM_PREFIX, (unsigned)geteuid(),
             (long)getpid(), (unsigned long long)b->id);
    b->fd = memfd_create(b->name + 1, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (b->fd < 0) return specd_fail(err, SPECD_E_IO, "memfd_create: %s", strerror(errno));
    if (ftruncate(b->fd, (off_t)total) != 0) {
        return specd_fail(err, SPECD_E_IO, "ftruncate %s to %zu: %s", b->name, total,
                          strerror(errno));
    }
    if (fcntl(b->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
        return specd_fail(err, SPECD_E_IO, "sealing %s: %s", b->name, strerror(errno));
    /* MAP_POPULATE pre-faults every page now rather than on the first step's critical path. */
    void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, b->fd, 0);
    if (m == MAP_FAILED)
        return specd_fail(err, SPECD_E_IO, "mmap %s (%zu bytes): %s", b->name, total,
                          strerror(errno));
    b->map = m;
    b->map_bytes = total;
    specd_shm_header *h = (specd_shm_header *)b->map;
    memcpy(h->magic, SPECD_SHM_MAGIC, 8);
    h->version = 1;
    h->header_bytes = SPECD_SHM_HEADER_BYTES;
    h->buffer_id = b->id;
    h->bytes = b->bytes;
    atomic_store_explicit(&h->seq, 0, memory_order_release);
    return SPECD_OK;
}

static specd_status cuda_create(specd_ipc_buffer *b, int device, specd_error *err) {
    SPECD_TRY(specd_ipc_cuda_check(device, "CUDA buffer", err));
    b->device = device;
    int rc = specd_ipc_cuda_export(device, b->bytes, &b->dptr, &b->event, b->mem_handle,
                                   b->event_handle);
    if (rc != 0)
        return specd_fail(err, SPECD_E_IO, "CUDA buffer of %zu bytes on device %d: %s", b->bytes,
                          device, specd_ipc_cuda_error_string(rc));
    return SPECD_OK;
}

specd_status specd_ipc_buffer_create(specd_ipc_buffer_kind kind, size_t bytes, int cuda_device,
                                     specd_ipc_buffer **out, specd_error *err) {
    if (!out) return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_create: out is NULL");
    if (bytes == 0 || bytes > ((size_t)1 << 40))
        return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_create: size %zu out of range", bytes);
    if (kind != SPECD_IPC_BUFFER_SHM && kind != SPECD_IPC_BUFFER_CUDA)
        return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_create: unknown kind %d", (int)kind);
    specd_ipc_buffer *b = specd_alloc_array(1, sizeof *b);
    if (!b) return specd_fail(err, SPECD_E_NOMEM, "buffer_create: out of memory");
    b->kind = kind;
    b->bytes = bytes;
    b->fd = -1;
    /* Random ids: a restarted host never reuses an id a daemon may still hold. */
    b->id = random_u64() >> 1;
    specd_status s =
        kind == SPECD_IPC_BUFFER_SHM ? shm_create(b, err) : cuda_create(b, cuda_device, err);
    if (s != SPECD_OK) {
        specd_ipc_buffer_destroy(b);
        return s;
    }
    *out = b;
    return SPECD_OK;
}

void specd_ipc_buffer_destroy(specd_ipc_buffer *b) {
    if (!b) return;
    if (b->map) munmap(b->map, b->map_bytes);
    if (b->linked) shm_unlink(b->name);
    if (b->fd >= 0) close(b->fd);
    if (b->dptr) specd_ipc_cuda_release(b->device, b->dptr, b->event);
    specd_free(b);
}

void *specd_ipc_buffer_data(const specd_ipc_buffer *b) {
    if (!b) return NULL;
    return b->kind == SPECD_IPC_BUFFER_SHM ? (void *)(b->map + SPECD_SHM_HEADER_BYTES) : b->dptr;
}

size_t specd_ipc_buffer_size(const specd_ipc_buffer *b) {
    return b ? b->bytes : 0;
}
uint64_t specd_ipc_buffer_id(const specd_ipc_buffer *b) {
    return b ? b->id : 0;
}
specd_ipc_buffer_kind specd_ipc_buffer_kind_of(const specd_ipc_buffer *b) {
    return b->kind;
}

specd_status specd_ipc_buffer_publish(specd_ipc_buffer *b, void *cuda_stream, uint64_t *seq,
                                      specd_error *err) {
    if (!b || !seq) return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_publish: NULL argument");
    if (b->kind == SPECD_IPC_BUFFER_SHM) {
        specd_shm_header *h = (specd_shm_header *)b->map;
        /* Release: the content written before this store is visible to a peer that reads the
         * new seq with acquire. */
        *seq = atomic_fetch_add_explicit(&h->seq, 1, memory_order_acq_rel) + 1;
        return SPECD_OK;
    }
    int rc = specd_ipc_cuda_record(b->event, cuda_stream);
    if (rc != 0)
        return specd_fail(err, SPECD_E_IO, "buffer %llu: cudaEventRecord: %s",
                          (unsigned long long)b->id, specd_ipc_cuda_error_string(rc));
    *seq = ++b->cuda_seq;
    return SPECD_OK;
}

specd_status specd_ipc_buffer_ref(const specd_ipc_buffer *b, uint64_t offset, uint32_t rank,
                                  const uint64_t *shape, specd_ipc_dtype dtype, uint64_t seq,
                                  specd_ipc_ref *out, specd_error *err) {
    if (!b || !shape || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_ref: NULL");
    if (rank == 0 || rank > SPECD_IPC_REF_MAX_RANK)
        return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_ref: rank %u", rank);
    size_t n = specd_ipc_dtype_size((int)dtype), end;
    if (n == 0) return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_ref: dtype %d", (int)dtype);
    for (uint32_t i = 0; i < rank; i++)
        if (shape[i] == 0 || !specd_mul_ok(n, (size_t)shape[i], &n))
            return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_ref: shape[%u] = %llu", i,
                              (unsigned long long)shape[i]);
    if (!specd_add_ok((size_t)offset, n, &end) || end > b->bytes)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "buffer_ref: %zu bytes at offset %llu exceed the buffer's %zu", n,
                          (unsigned long long)offset, b->bytes);
    specd_ipc_ref r = {
        .buffer_id = b->id, .offset = offset, .rank = rank, .dtype = dtype, .seq = seq};
    for (uint32_t i = 0; i < rank; i++)
        r.shape[i] = shape[i];
    *out = r;
    return SPECD_OK;
}

void specd_ipc_buffer_describe(const specd_ipc_buffer *b, SpecdWire__BufferDesc *d) {
    SpecdWire__BufferDesc init = SPECD_WIRE__BUFFER_DESC__INIT;
    *d = init;
    d->buffer_id = b->id;
    d->bytes = b->bytes;
    d->has_owner_pid = 1;
    d->owner_pid = (uint32_t)getpid();
    if (b->kind == SPECD_IPC_BUFFER_SHM) {
        d->kind = SPECD_WIRE__BUFFER_KIND__BUFFER_SHM;
        d->shm_name = (char *)b->name;
        d->has_owner_fd = 1;
        d->owner_fd = b->fd;
    } else {
        d->kind = SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA;
        d->has_cuda_mem_handle = d->has_cuda_event_handle = d->has_cuda_device = 1;
        d->cuda_mem_handle.len = d->cuda_event_handle.len = SPECD_IPC_CUDA_HANDLE_BYTES;
        d->cuda_mem_handle.data = (uint8_t *)b->mem_handle;
        d->cuda_event_handle.data = (uint8_t *)b->event_handle;
        d->cuda_device = b->device;
    }
}

void specd_ipc_buffer_shared(specd_ipc_buffer *b) {
    if (b->kind == SPECD_IPC_BUFFER_SHM && b->linked) {
        shm_unlink(b->name); /* ENOENT: the peer unlinked it first, as it should */
        b->linked = 0;
    }
}
