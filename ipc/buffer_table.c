/* Peer side of shared buffers: maps what a host attaches, once, and checks every reference. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "ipc/buffer.h"
#include "ipc/frame.h"
#include "ipc/cuda_buffer.h"

typedef struct entry {
    int used;
    uint64_t owner;
    uint64_t id;
    specd_ipc_buffer_kind kind;
    size_t bytes;
    /* SHM */
    uint8_t *map;
    size_t map_bytes;
    /* CUDA: handles opened once and cached here for every later reference */
    int device;
    void *dptr;
    void *event;
    uint64_t newest_seq;
    unsigned char mem_handle[SPECD_IPC_CUDA_HANDLE_BYTES];
} entry;

struct specd_ipc_buffer_table {
    size_t cap, max_per_owner;
    int cuda_device; /* SPECD_IPC_CUDA_ANY, _NONE or the one device */
    size_t count;
    entry *e;
};

specd_status specd_ipc_buffer_table_create(size_t max_buffers, specd_ipc_buffer_table **out,
                                           specd_error *err) {
    if (!out || max_buffers == 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "buffer_table_create: bad arguments");
    specd_ipc_buffer_table *t = specd_alloc_array(1, sizeof *t);
    entry *e = specd_alloc_array(max_buffers, sizeof *e);
    if (!t || !e) {
        specd_free(t);
        specd_free(e);
        return specd_fail(err, SPECD_E_NOMEM, "buffer_table_create: out of memory");
    }
    t->cap = max_buffers;
    t->cuda_device = SPECD_IPC_CUDA_ANY;
    t->e = e;
    *out = t;
    return SPECD_OK;
}

void specd_ipc_buffer_table_set_quota(specd_ipc_buffer_table *t, size_t max_per_owner) {
    t->max_per_owner = max_per_owner;
}

void specd_ipc_buffer_table_set_cuda_device(specd_ipc_buffer_table *t, int device) {
    t->cuda_device = device;
}

static void release(entry *x) {
    if (x->map) munmap(x->map, x->map_bytes);
    if (x->dptr) specd_ipc_cuda_unimport(x->device, x->dptr, x->event);
    memset(x, 0, sizeof *x);
}

void specd_ipc_buffer_table_destroy(specd_ipc_buffer_table *t) {
    if (!t) return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].used) release(&t->e[i]);
    specd_free(t->e);
    specd_free(t);
}

size_t specd_ipc_buffer_table_count(const specd_ipc_buffer_table *t) {
    return t->count;
}

static entry *find(specd_ipc_buffer_table *t, uint64_t owner, uint64_t id) {
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].used && t->e[i].id == id && t->e[i].owner == owner) return &t->e[i];
    return NULL;
}

static size_t owned_by(const specd_ipc_buffer_table *t, uint64_t owner) {
    size_t n = 0;
    for (size_t i = 0; i < t->cap; i++)
        n += t->e[i].used && t->e[i].owner == owner;
    return n;
}

static specd_status map_shm(entry *x, const SpecdWire__BufferDesc *d, specd_error *err) {
    unsigned long long id = (unsigned long long)d->buffer_id;
    size_t total;
    if (!specd_add_ok((size_t)d->bytes, SPECD_SHM_HEADER_BYTES, &total))
        return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: size overflows", id);
    /* Only the owner's sealed descriptor, reopened through /proc (which the kernel allows only to
     * the same user): a segment whose size is sealed cannot be shrunk under our mapping, so
     * reading it can never raise SIGBUS. Opened read-only and without blocking or a controlling
     * terminal, whatever a lying descriptor points at. */
    if (!d->has_owner_pid || !d->has_owner_fd || d->owner_fd < 0)
        return specd_fail(err, SPECD_E_PEER, "buffer %llu: no owner descriptor to open", id);
    char path[64];
    snprintf(path, sizeof path, "/proc/%u/fd/%d", d->owner_pid, d->owner_fd);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return specd_fail(err, SPECD_E_PEER, "buffer %llu: cannot open %s: %s", id, path,
                          strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        (uint64_t)st.st_size != total) {
        close(fd);
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "buffer %llu: segment is not a %zu-byte segment of ours", id, total);
    }
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        close(fd);
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "buffer %llu: segment is not sealed against shrinking", id);
    }
    void *m = mmap(NULL, total, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return specd_fail(err, SPECD_E_IO, "buffer %llu: mmap: %s", id, strerror(errno));
    const specd_shm_header *h = m;
    if (memcmp(h->magic, SPECD_SHM_MAGIC, 8) != 0 || h->buffer_id != d->buffer_id ||
        h->bytes != d->bytes || h->header_bytes != SPECD_SHM_HEADER_BYTES) {
        munmap(m, total);
        return specd_fail(err, SPECD_E_PROTOCOL, "buffer %llu: header does not match", id);
    }
    x->map = m;
    x->map_bytes = total;
    return SPECD_OK;
}

static int all_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

/* What can be told about a CUDA descriptor without the runtime, checked before any CUDA call: a
 * handle no runtime made, a device this table does not serve, an owner that is gone (its
 * allocation went with it: a stale handle). Opening such a handle would at best fail inside the
 * driver with a less readable error. */
static specd_status check_cuda_desc(int table_device, const SpecdWire__BufferDesc *d,
                                    specd_error *err) {
    unsigned long long id = (unsigned long long)d->buffer_id;
    int dev = d->has_cuda_device ? d->cuda_device : 0;
    if (table_device == SPECD_IPC_CUDA_NONE)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "buffer %llu: a CUDA IPC buffer, and this daemon reads host memory "
                          "only (start it with --device cuda[:N] to verify on a device)", id);
    if (table_device >= 0 && dev != table_device)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "buffer %llu lives on CUDA device %d; this daemon works on device %d",
                          id, dev, table_device);
    if (!d->has_cuda_mem_handle || d->cuda_mem_handle.len != SPECD_IPC_CUDA_HANDLE_BYTES ||
        !d->has_cuda_event_handle || d->cuda_event_handle.len != SPECD_IPC_CUDA_HANDLE_BYTES ||
        all_zero(d->cuda_mem_handle.data, d->cuda_mem_handle.len) ||
        all_zero(d->cuda_event_handle.data, d->cuda_event_handle.len))
        return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: CUDA IPC handles missing or blank",
                          id);
    if (!d->has_owner_pid || d->owner_pid == 0 || d->owner_pid > (uint32_t)INT32_MAX)
        return specd_fail(err, SPECD_E_PEER, "buffer %llu: no owner process for its CUDA handle",
                          id);
    if (kill((pid_t)d->owner_pid, 0) != 0 && errno == ESRCH)
        return specd_fail(err, SPECD_E_PEER,
                          "buffer %llu: stale CUDA handle: its owner (pid %u) is gone", id,
                          d->owner_pid);
    return SPECD_OK;
}

static specd_status map_cuda(entry *x, int table_device, const SpecdWire__BufferDesc *d,
                             specd_error *err) {
    SPECD_TRY(check_cuda_desc(table_device, d, err));
    int dev = d->has_cuda_device ? d->cuda_device : 0;
    char what[48];
    snprintf(what, sizeof what, "buffer %llu", (unsigned long long)d->buffer_id);
    SPECD_TRY(specd_ipc_cuda_check(dev, what, err));
    int rc = specd_ipc_cuda_import(dev, d->cuda_mem_handle.data, d->cuda_event_handle.data,
                                   &x->dptr, &x->event);
    if (rc != 0)
        return specd_fail(err, SPECD_E_PEER, "buffer %llu: cudaIpcOpen: %s",
                          (unsigned long long)d->buffer_id, specd_ipc_cuda_error_string(rc));
    /* The size the owner claims is what every reference is checked against: it must be the
     * allocation's (where the driver can say), so no reference reads past what was mapped. */
    size_t real = 0;
    if (specd_ipc_cuda_range(x->dptr, &real) == 0 && real < (size_t)d->bytes) {
        specd_ipc_cuda_unimport(dev, x->dptr, x->event);
        x->dptr = x->event = NULL;
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "buffer %llu claims %llu bytes but its allocation has %zu",
                          (unsigned long long)d->buffer_id, (unsigned long long)d->bytes, real);
    }
    x->device = dev;
    memcpy(x->mem_handle, d->cuda_mem_handle.data, SPECD_IPC_CUDA_HANDLE_BYTES);
    return SPECD_OK;
}

specd_status specd_ipc_buffer_table_attach(specd_ipc_buffer_table *t, uint64_t owner,
                                           const SpecdWire__BufferDesc *d, specd_error *err) {
    entry *old = find(t, owner, d->buffer_id);
    if (old) {
        if (old->bytes == d->bytes &&
            (int)old->kind == (d->kind == SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA))
            return SPECD_OK; /* a replayed attach of what we hold */
        return specd_fail(err, SPECD_E_PROTOCOL, "buffer %llu is already attached differently",
                          (unsigned long long)d->buffer_id);
    }
    if (t->max_per_owner && owned_by(t, owner) >= t->max_per_owner)
        return specd_fail(err, SPECD_E_STATE,
                          "buffer %llu: quota: this peer has %zu buffers attached already",
                          (unsigned long long)d->buffer_id, t->max_per_owner);
    entry *x = NULL;
    for (size_t i = 0; i < t->cap && !x; i++)
        if (!t->e[i].used) x = &t->e[i];
    if (!x)
        return specd_fail(err, SPECD_E_STATE, "buffer %llu: table full (%zu buffers)",
                          (unsigned long long)d->buffer_id, t->cap);
    entry tmp = {0};
    tmp.id = d->buffer_id;
    tmp.bytes = (size_t)d->bytes;
    tmp.kind = d->kind == SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA ? SPECD_IPC_BUFFER_CUDA
                                                               : SPECD_IPC_BUFFER_SHM;
    SPECD_TRY(tmp.kind == SPECD_IPC_BUFFER_SHM ? map_shm(&tmp, d, err)
                                              : map_cuda(&tmp, t->cuda_device, d, err));
    tmp.used = 1;
    tmp.owner = owner;
    *x = tmp;
    t->count++;
    return SPECD_OK;
}

size_t specd_ipc_buffer_table_detach_owner(specd_ipc_buffer_table *t, uint64_t owner) {
    size_t n = 0;
    for (size_t i = 0; i < t->cap; i++)
        if (t->e[i].used && t->e[i].owner == owner) {
            release(&t->e[i]);
            t->count--;
            n++;
        }
    return n;
}

specd_status specd_ipc_buffer_table_detach(specd_ipc_buffer_table *t, uint64_t owner, uint64_t id,
                                           specd_error *err) {
    entry *x = find(t, owner, id);
    if (!x)
        return specd_fail(err, SPECD_E_PROTOCOL, "detach: buffer %llu is not attached",
                          (unsigned long long)id);
    release(x);
    t->count--;
    return SPECD_OK;
}

specd_status specd_ipc_ref_check(const SpecdWire__BufferRef *r, size_t buffer_bytes,
                                 size_t *n_bytes, specd_error *err) {
    unsigned long long id = (unsigned long long)r->buffer_id;
    size_t es = specd_ipc_dtype_size((int)r->dtype), n = es, end;
    if (es == 0 || r->n_shape == 0 || r->n_shape > SPECD_IPC_REF_MAX_RANK)
        return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: bad dtype or rank", id);
    for (size_t i = 0; i < r->n_shape; i++)
        if (r->shape[i] == 0 || r->shape[i] > SIZE_MAX || !specd_mul_ok(n, (size_t)r->shape[i], &n))
            return specd_fail(err, SPECD_E_FORMAT, "buffer %llu: shape[%zu] invalid", id, i);
    if (r->offset > SIZE_MAX || !specd_add_ok((size_t)r->offset, n, &end) || end > buffer_bytes)
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "buffer %llu: %zu bytes at offset %llu exceed its %zu bytes", id, n,
                          (unsigned long long)r->offset, buffer_bytes);
    if (r->offset % es != 0)
        return specd_fail(err, SPECD_E_PROTOCOL, "buffer %llu: offset %llu misaligned", id,
                          (unsigned long long)r->offset);
    *n_bytes = n;
    return SPECD_OK;
}

specd_status specd_ipc_buffer_table_resolve(specd_ipc_buffer_table *t, uint64_t owner,
                                            const SpecdWire__BufferRef *r, specd_ipc_view *out,
                                            specd_error *err) {
    unsigned long long id = (unsigned long long)r->buffer_id;
    entry *x = find(t, owner, r->buffer_id);
    if (!x) return specd_fail(err, SPECD_E_PROTOCOL, "reference to unknown buffer %llu", id);
    size_t n;
    SPECD_TRY(specd_ipc_ref_check(r, x->bytes, &n, err));
    specd_ipc_view v = {0};
    if (x->kind == SPECD_IPC_BUFFER_SHM) {
        const specd_shm_header *h = (const specd_shm_header *)x->map;
        uint64_t cur = atomic_load_explicit(&((specd_shm_header *)h)->seq, memory_order_acquire);
        if (r->seq != cur)
            return specd_fail(err, SPECD_E_PROTOCOL,
                              "buffer %llu: stale reference (seq %llu, content is at %llu)", id,
                              (unsigned long long)r->seq, (unsigned long long)cur);
        v.data = x->map + SPECD_SHM_HEADER_BYTES + r->offset;
        v.header = h;
    } else {
        if (r->seq < x->newest_seq || r->seq == 0)
            return specd_fail(err, SPECD_E_PROTOCOL,
                              "buffer %llu: stale reference (seq %llu, newest seen %llu)", id,
                              (unsigned long long)r->seq, (unsigned long long)x->newest_seq);
        int rc = specd_ipc_cuda_wait(x->device, x->event);
        if (rc != 0)
            return specd_fail(err, SPECD_E_IO, "buffer %llu: waiting on its event: %s", id,
                              specd_ipc_cuda_error_string(rc));
        x->newest_seq = r->seq;
        v.data = (const uint8_t *)x->dptr + r->offset;
        v.on_device = 1;
    }
    v.dtype = (specd_ipc_dtype)r->dtype;
    v.rank = (uint32_t)r->n_shape;
    for (size_t i = 0; i < r->n_shape; i++)
        v.shape[i] = r->shape[i];
    v.bytes = n;
    v.seq = r->seq;
    *out = v;
    return SPECD_OK;
}

specd_status specd_ipc_view_recheck(const specd_ipc_view *v, specd_error *err) {
    if (!v->header) return SPECD_OK;
    uint64_t cur =
        atomic_load_explicit(&((specd_shm_header *)v->header)->seq, memory_order_acquire);
    if (cur != v->seq)
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "buffer content changed while in use (seq %llu -> %llu)",
                          (unsigned long long)v->seq, (unsigned long long)cur);
    return SPECD_OK;
}
