/* Shared buffers (SHM): sealed memfds the peer side maps through the owner's descriptor (nothing in
 * /dev/shm), references are checked (unknown id, out of bounds, misaligned, stale), a peer that
 * comes later reopens the segment too, and a killed owner leaves nothing behind; a sweep still
 * removes /dev/shm names older versions left. */
#include "test_main.h"

#include <dirent.h>
#include <signal.h>
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_share_and_refs),
        cmocka_unit_test(test_hostile_descriptors),
        cmocka_unit_test(test_killed_owner_leaves_nothing),
        cmocka_unit_test(test_cuda_kind_without_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
