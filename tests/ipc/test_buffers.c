/* Shared buffers (SHM): sealed memfds the peer side maps through the owner's descriptor (nothing in
 * /dev/shm), references are checked (unknown id, out of bounds, misaligned, stale), a peer that
 * comes later reopens the segment too, and a killed owner leaves nothing behind; a sweep still
 * removes /dev/shm names older versions left. */
#include "test_main.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/buffer.h"
#include "ipc/frame.h"

/* Names in /dev/shm of our uid, and of one pid when pid > 0. */
static int count_ours(long pid) {
    char prefix[64];
    int n = pid > 0 ? snprintf(prefix, sizeof prefix, "specd-%u-%ld-", (unsigned)geteuid(), pid)
                    : snprintf(prefix, sizeof prefix, "specd-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, (size_t)n) == 0) count++;
    closedir(d);
    return count;
}

static SpecdWire__BufferRef wire_ref(const specd_ipc_ref *r, uint64_t *shape) {
    SpecdWire__BufferRef w = SPECD_WIRE__BUFFER_REF__INIT;
    w.buffer_id = r->buffer_id;
    w.offset = r->offset;
    w.n_shape = r->rank;
    for (uint32_t i = 0; i < r->rank; i++)
        shape[i] = r->shape[i];
    w.shape = shape;
    w.dtype = (SpecdWire__DType)r->dtype;
    w.seq = r->seq;
    return w;
}

static void test_map_share_and_refs(void **state) {
    (void)state;
    enum { ROWS = 9, V = 49152 };
    specd_error err;
    specd_ipc_buffer *b = NULL;
    size_t bytes = (size_t)ROWS * V * sizeof(float);
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, bytes, 0, &b, &err), SPECD_OK);
    assert_int_equal(count_ours(getpid()), 0); /* a sealed memfd: no name in /dev/shm */
    float *logits = specd_ipc_buffer_data(b);
    for (size_t i = 0; i < (size_t)ROWS * V; i++)
        logits[i] = (float)(i % 977) * 0.25f;
    uint64_t seq = 0;
    assert_int_equal(specd_ipc_buffer_publish(b, NULL, &seq, &err), SPECD_OK);
    assert_int_equal(seq, 1);

    specd_ipc_buffer_table *t = NULL;
    assert_int_equal(specd_ipc_buffer_table_create(4, &t, &err), SPECD_OK);
    SpecdWire__BufferDesc d;
    specd_ipc_buffer_describe(b, &d);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_OK);
    assert_int_equal(count_ours(getpid()), 0);
    specd_ipc_buffer_shared(b);

    uint64_t shape[2] = {ROWS, V}, wshape[4];
    specd_ipc_ref r;
    assert_int_equal(specd_ipc_buffer_ref(b, 0, 2, shape, SPECD_IPC_F32, seq, &r, &err), SPECD_OK);
    SpecdWire__BufferRef w = wire_ref(&r, wshape);
    specd_ipc_view v;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &w, &v, &err), SPECD_OK);
    assert_int_equal(v.bytes, bytes);
    assert_memory_equal(v.data, logits, bytes);

    /* New content: the old reference is stale, and a view taken before is flagged. */
    logits[5] = -1.0f;
    uint64_t seq2;
    assert_int_equal(specd_ipc_buffer_publish(b, NULL, &seq2, &err), SPECD_OK);
    assert_int_equal(specd_ipc_view_recheck(&v, &err), SPECD_E_PROTOCOL);
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &w, &v, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "stale"));
    w.seq = seq2;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &w, &v, &err), SPECD_OK);
    assert_true(((const float *)v.data)[5] == -1.0f);

    /* Out of bounds, misaligned, unknown buffer, bad dtype. */
    SpecdWire__BufferRef oob = w;
    oob.offset = 4;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &oob, &v, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "exceed"));
    uint64_t small[2] = {1, 1};
    SpecdWire__BufferRef mis = w;
    mis.shape = small;
    mis.offset = 2;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &mis, &v, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "misaligned"));
    SpecdWire__BufferRef unk = w;
    unk.buffer_id ^= 1;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &unk, &v, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "unknown buffer"));
    SpecdWire__BufferRef dt = w;
    dt.dtype = (SpecdWire__DType)7;
    assert_int_equal(specd_ipc_buffer_table_resolve(t, 1, &dt, &v, &err), SPECD_E_FORMAT);
    /* The owner refuses to make an out-of-bounds reference in the first place. */
    uint64_t big[2] = {ROWS + 1, V};
    assert_int_equal(specd_ipc_buffer_ref(b, 0, 2, big, SPECD_IPC_F32, seq2, &r, &err),
                     SPECD_E_INVALID_ARG);

    /* A second peer that comes after the name is gone (a restarted daemon) reopens the segment
     * through the owner's descriptor and sees the same bytes. */
    specd_ipc_buffer_table *t2 = NULL;
    assert_int_equal(specd_ipc_buffer_table_create(4, &t2, &err), SPECD_OK);
    specd_ipc_buffer_describe(b, &d);
    assert_int_equal(specd_ipc_buffer_table_attach(t2, 1, &d, &err), SPECD_OK);
    specd_ipc_view v2;
    assert_int_equal(specd_ipc_buffer_table_resolve(t2, 1, &w, &v2, &err), SPECD_OK);
    assert_memory_equal(v2.data, logits, bytes);
    /* Attaching the same buffer again is a no-op; a different size under the same id is not. */
    assert_int_equal(specd_ipc_buffer_table_attach(t2, 1, &d, &err), SPECD_OK);
    SpecdWire__BufferDesc d2 = d;
    d2.bytes += 4;
    assert_int_equal(specd_ipc_buffer_table_attach(t2, 1, &d2, &err), SPECD_E_PROTOCOL);
    assert_int_equal(specd_ipc_buffer_table_detach(t2, 1, d.buffer_id, &err), SPECD_OK);
    assert_int_equal(specd_ipc_buffer_table_detach(t2, 1, d.buffer_id, &err), SPECD_E_PROTOCOL);
    specd_ipc_buffer_table_destroy(t2);

    specd_ipc_buffer_table_destroy(t);
    specd_ipc_buffer_destroy(b);
    assert_int_equal(count_ours(getpid()), 0);
}

static void test_hostile_descriptors(void **state) {
    (void)state;
    specd_error err;
    specd_ipc_buffer *b = NULL;
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 4096, 0, &b, &err), SPECD_OK);
    specd_ipc_buffer_table *t = NULL;
    assert_int_equal(specd_ipc_buffer_table_create(1, &t, &err), SPECD_OK);
    SpecdWire__BufferDesc d;
    specd_ipc_buffer_describe(b, &d);
    /* Claims a different size than the segment has: refused, nothing mapped. */
    SpecdWire__BufferDesc lie = d;
    lie.bytes = 8192;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &lie, &err), SPECD_E_PROTOCOL);
    /* Claims another id: the header disagrees. */
    lie = d;
    lie.buffer_id ^= 2;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &lie, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "header"));
    /* A name that does not exist and no owner fd. */
    lie = d;
    lie.shm_name = "/specd-nonexistent";
    lie.has_owner_fd = 0;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &lie, &err), SPECD_E_PEER);
    assert_int_equal(specd_ipc_buffer_table_count(t), 0);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_OK);
    /* The table is full. */
    specd_ipc_buffer *b2 = NULL;
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 4096, 0, &b2, &err), SPECD_OK);
    SpecdWire__BufferDesc d2;
    specd_ipc_buffer_describe(b2, &d2);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d2, &err), SPECD_E_STATE);
    specd_ipc_buffer_destroy(b2);
    specd_ipc_buffer_table_destroy(t);
    specd_ipc_buffer_destroy(b);
    /* Bad arguments. */
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 0, 0, &b, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(specd_ipc_buffer_create((specd_ipc_buffer_kind)5, 64, 0, &b, &err),
                     SPECD_E_INVALID_ARG);
    assert_int_equal(count_ours(getpid()), 0);
}

static void test_killed_owner_leaves_nothing(void **state) {
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        specd_ipc_buffer *b = NULL;
        char ok = specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 1 << 20, 0, &b, NULL) == SPECD_OK;
        if (write(fds[1], &ok, 1) != 1) _exit(1);
        pause(); /* killed here, before any peer mapped the segment */
        _exit(0);
    }
    char ok = 0;
    assert_int_equal(read(fds[0], &ok, 1), 1);
    assert_true(ok);
    assert_int_equal(count_ours(pid), 0); /* a memfd has no name to leave behind */
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    assert_true(WIFSIGNALED(status));
    /* The next create (or an explicit sweep) removes the dead owner's segment. */
    specd_ipc_buffer *b = NULL;
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 4096, 0, &b, NULL), SPECD_OK);
    assert_int_equal(count_ours(pid), 0);
    specd_ipc_buffer_destroy(b);
    assert_int_equal(specd_ipc_shm_sweep(), 0);
    close(fds[0]);
    close(fds[1]);
}

static void test_cuda_kind_without_device(void **state) {
    (void)state;
    specd_error err;
    specd_ipc_buffer *b = NULL;
    specd_status st = specd_ipc_buffer_create(SPECD_IPC_BUFFER_CUDA, 4096, 0, &b, &err);
    if (st == SPECD_OK) {
        /* A device is present: tests/ipc/test_cuda_ipc covers it. */
        specd_ipc_buffer_destroy(b);
        return;
    }
    assert_int_equal(st, SPECD_E_UNSUPPORTED);
    assert_null(b);
}

/* Every reference passes these before its buffer is touched, SHM or CUDA alike. */
static void test_ref_bounds(void **state) {
    (void)state;
    uint64_t shape[2] = {9, 100};
    SpecdWire__BufferRef r = SPECD_WIRE__BUFFER_REF__INIT;
    r.buffer_id = 5;
    r.n_shape = 2;
    r.shape = shape;
    r.dtype = SPECD_WIRE__DTYPE__DTYPE_BF16;
    r.seq = 1;
    size_t n = 0;
    specd_error err;
    /* exactly the allocation: fine */
    assert_int_equal(specd_ipc_ref_check(&r, 1800, &n, &err), SPECD_OK);
    assert_int_equal(n, 1800);
    /* one element past it, or an offset past its end */
    assert_int_equal(specd_ipc_ref_check(&r, 1798, &n, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "exceed"));
    r.offset = 1ull << 40;
    assert_int_equal(specd_ipc_ref_check(&r, 1800, &n, &err), SPECD_E_PROTOCOL);
    /* an offset that wraps the address space */
    r.offset = UINT64_MAX - 100;
    assert_int_equal(specd_ipc_ref_check(&r, 1800, &n, &err), SPECD_E_PROTOCOL);
    /* misaligned for the dtype */
    r.offset = 1;
    assert_int_equal(specd_ipc_ref_check(&r, 4096, &n, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "misaligned"));
    r.offset = 0;
    /* a shape whose size overflows */
    shape[0] = UINT64_MAX / 2;
    shape[1] = 4;
    assert_int_equal(specd_ipc_ref_check(&r, 4096, &n, &err), SPECD_E_FORMAT);
    shape[0] = 0;
    assert_int_equal(specd_ipc_ref_check(&r, 4096, &n, &err), SPECD_E_FORMAT);
    shape[0] = 9;
    r.dtype = (SpecdWire__DType)17;
    assert_int_equal(specd_ipc_ref_check(&r, 4096, &n, &err), SPECD_E_FORMAT);
}

/* A CUDA descriptor that looks real: a live owner (us), non-blank handles. */
static unsigned char mem_handle[64], ev_handle[64];
static SpecdWire__BufferDesc cuda_desc(int device) {
    SpecdWire__BufferDesc d = SPECD_WIRE__BUFFER_DESC__INIT;
    memset(mem_handle, 0x5a, sizeof mem_handle);
    memset(ev_handle, 0x3c, sizeof ev_handle);
    d.buffer_id = 77;
    d.kind = SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA;
    d.bytes = 1 << 20;
    d.has_cuda_mem_handle = d.has_cuda_event_handle = 1;
    d.cuda_mem_handle.len = d.cuda_event_handle.len = 64;
    d.cuda_mem_handle.data = mem_handle;
    d.cuda_event_handle.data = ev_handle;
    d.has_cuda_device = 1;
    d.cuda_device = device;
    d.has_owner_pid = 1;
    d.owner_pid = (uint32_t)getpid();
    return d;
}

/* What a CUDA IPC descriptor is refused for before any CUDA call (so the same refusals hold on a
 * machine without a device): a daemon without a device, a buffer of another device, blank
 * handles, no owner, an owner that is gone (a stale handle). A handle that passes all of that
 * but no runtime made is refused by the runtime (or its absence) with a message too. */
static void test_cuda_descriptor_refusals(void **state) {
    (void)state;
    specd_ipc_buffer_table *t = NULL;
    assert_int_equal(specd_ipc_buffer_table_create(4, &t, NULL), SPECD_OK);
    specd_error err;
    SpecdWire__BufferDesc d = cuda_desc(0);

    specd_ipc_buffer_table_set_cuda_device(t, SPECD_IPC_CUDA_NONE);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "--device cuda"));

    specd_ipc_buffer_table_set_cuda_device(t, 0);
    SpecdWire__BufferDesc other = cuda_desc(1);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &other, &err), SPECD_E_MISMATCH);
    assert_non_null(strstr(err.message, "CUDA device 1"));
    other.has_cuda_device = 0; /* no index: device 0, served */
    specd_status st = specd_ipc_buffer_table_attach(t, 1, &other, &err);
    assert_int_not_equal(st, SPECD_E_MISMATCH);

    d = cuda_desc(0);
    memset(mem_handle, 0, sizeof mem_handle);
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_E_FORMAT);
    assert_non_null(strstr(err.message, "blank"));
    d = cuda_desc(0);
    d.cuda_event_handle.len = 16;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_E_FORMAT);

    d = cuda_desc(0);
    d.has_owner_pid = 0;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_E_PEER);
    /* a stale handle: its owner exited (a child reaped, so its pid is free) */
    pid_t child = fork();
    if (child == 0) _exit(0);
    assert_true(child > 0);
    waitpid(child, NULL, 0);
    d = cuda_desc(0);
    d.owner_pid = (uint32_t)child;
    assert_int_equal(specd_ipc_buffer_table_attach(t, 1, &d, &err), SPECD_E_PEER);
    assert_non_null(strstr(err.message, "stale"));

    /* garbage that passes the checks: the runtime refuses it, or its absence does */
    d = cuda_desc(0);
    st = specd_ipc_buffer_table_attach(t, 1, &d, &err);
    assert_int_not_equal(st, SPECD_OK);
    assert_non_null(strstr(err.message, "buffer 77"));
    printf("garbage CUDA handle: %s\n", err.message);
    assert_int_equal(specd_ipc_buffer_table_count(t), 0);
    specd_ipc_buffer_table_destroy(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_bounds),
        cmocka_unit_test(test_cuda_descriptor_refusals),
        cmocka_unit_test(test_map_share_and_refs),
        cmocka_unit_test(test_hostile_descriptors),
        cmocka_unit_test(test_killed_owner_leaves_nothing),
        cmocka_unit_test(test_cuda_kind_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
