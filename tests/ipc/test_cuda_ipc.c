/* CUDA IPC buffers across two processes: the owner fills a dedicated cudaMalloc allocation and
 * records its interprocess event; the peer (a forked child that had not touched CUDA) opens the
 * handles from the descriptor, waits on the event, and reads the owner's bytes; a stale
 * reference is refused. Skipped (77) without a CUDA runtime or a device (in any build: libspecd
 * opens the runtime itself). */
#include "test_main.h"

#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/alloc.h"
#include "ipc/buffer.h"
#include "ipc/cuda_buffer.h"
#include "ipc/frame.h"
#include "kernels/cuda/cudart.h"

enum { N = 4096 };

static int write_frame(int fd, const SpecdWire__Envelope *e) {
    uint8_t *buf = NULL;
    size_t len = 0;
    if (specd_ipc_frame_encode(e, 0, &buf, &len, NULL) != SPECD_OK) return -1;
    uint32_t n = (uint32_t)len;
    int ok = write(fd, &n, 4) == 4 && write(fd, buf, len) == (ssize_t)len;
    specd_free(buf);
    return ok ? 0 : -1;
}

static uint8_t *read_frame(int fd, size_t *len) {
    uint32_t n = 0;
    if (read(fd, &n, 4) != 4 || n == 0 || n > (1u << 20)) return NULL;
    uint8_t *buf = specd_alloc(n);
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0) {
            specd_free(buf);
            return NULL;
        }
        got += (size_t)r;
    }
    *len = n;
    return buf;
}

/* Child: attach from the descriptor, resolve the reference, compare the bytes. */
static int peer(int fd) {
    size_t len;
    uint8_t *f1 = read_frame(fd, &len);
    if (!f1) return SPECD_TEST_SKIP; /* the owner found no device */
    specd_ipc_decoder *d1 = NULL, *d2 = NULL;
    specd_ipc_decoder_create(0, &d1, NULL);
    specd_ipc_decoder_create(0, &d2, NULL);
    const SpecdWire__Envelope *attach = NULL, *verify = NULL;
    specd_error err;
    if (specd_ipc_frame_decode(d1, f1, len, &attach, &err) != SPECD_OK) {
        printf("peer: %s\n", err.message);
        return 1;
    }
    size_t len2;
    uint8_t *f2 = read_frame(fd, &len2);
    if (!f2 || specd_ipc_frame_decode(d2, f2, len2, &verify, &err) != SPECD_OK) {
        printf("peer: bad reference frame\n");
        return 1;
    }
    specd_ipc_buffer_table *t = NULL;
    specd_ipc_buffer_table_create(2, &t, NULL);
    if (specd_ipc_buffer_table_attach(t, 1, attach->attach_buffer->desc, &err) != SPECD_OK) {
        printf("peer: attach: %s\n", err.message);
        return 1;
    }
    specd_ipc_view v;
    if (specd_ipc_buffer_table_resolve(t, 1, verify->verify->target_logits, &v, &err) != SPECD_OK) {
        printf("peer: resolve: %s\n", err.message);
        return 1;
    }
    float host[N];
    if (!v.on_device || specd_cudart_get(NULL)->memcpy(host, v.data, sizeof host,
                                                       SPECD_CUDA_MEMCPY_DEVICE_TO_HOST) != 0) {
        printf("peer: copy from the imported allocation failed\n");
        return 1;
    }
    for (int i = 0; i < N; i++)
        if (host[i] != (float)i * 0.5f) {
            printf("peer: element %d is %g, want %g\n", i, host[i], (float)i * 0.5f);
            return 1;
        }
    /* An older sequence number is now stale. */
    SpecdWire__BufferRef old = *verify->verify->target_logits;
    old.seq -= 1;
    if (specd_ipc_buffer_table_resolve(t, 1, &old, &v, &err) != SPECD_E_PROTOCOL) {
        printf("peer: stale reference accepted\n");
        return 1;
    }
    specd_ipc_buffer_table_destroy(t);
    specd_ipc_decoder_destroy(d1);
    specd_ipc_decoder_destroy(d2);
    specd_free(f1);
    specd_free(f2);
    printf("peer: %d floats read through CUDA IPC after the owner's event\n", N);
    return 0;
}

int main(void) {
    int fds[2];
    if (pipe(fds) != 0) return 1;
    pid_t pid = fork(); /* before any CUDA call: a forked CUDA context is unusable */
    if (pid == 0) {
        close(fds[1]);
        _exit(peer(fds[0]));
    }
    close(fds[0]);
    int rc = 0;
    specd_ipc_buffer *b = NULL;
    specd_error err;
    if (specd_ipc_cuda_check(0, "test", &err) != SPECD_OK) {
        printf("skipped: %s\n", err.message);
        close(fds[1]);
        waitpid(pid, NULL, 0);
        return SPECD_TEST_SKIP;
    }
    if (specd_ipc_buffer_create(SPECD_IPC_BUFFER_CUDA, N * sizeof(float), 0, &b, &err) !=
        SPECD_OK) {
        printf("owner: %s\n", err.message);
        close(fds[1]);
        waitpid(pid, NULL, 0);
        return 1;
    }
    float host[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)i * 0.5f;
    uint64_t seq = 0, seq2 = 0;
    if (specd_cudart_get(NULL)->memcpy(specd_ipc_buffer_data(b), host, sizeof host,
                                       SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) != 0 ||
        specd_ipc_buffer_publish(b, NULL, &seq, &err) != SPECD_OK ||
        specd_ipc_buffer_publish(b, NULL, &seq2, &err) != SPECD_OK)
        rc = 1;
    SpecdWire__BufferDesc d;
    specd_ipc_buffer_describe(b, &d);
    SpecdWire__AttachBuffer a = SPECD_WIRE__ATTACH_BUFFER__INIT;
    a.desc = &d;
    SpecdWire__Envelope e1 = SPECD_WIRE__ENVELOPE__INIT;
    e1.body_case = SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER;
    e1.attach_buffer = &a;
    uint64_t shape[1] = {N};
    SpecdWire__BufferRef r = SPECD_WIRE__BUFFER_REF__INIT;
    r.buffer_id = specd_ipc_buffer_id(b);
    r.n_shape = 1;
    r.shape = shape;
    r.dtype = SPECD_WIRE__DTYPE__DTYPE_F32;
    r.seq = seq2;
    SpecdWire__Verify v = SPECD_WIRE__VERIFY__INIT;
    v.target_logits = &r;
    SpecdWire__Envelope e2 = SPECD_WIRE__ENVELOPE__INIT;
    e2.body_case = SPECD_WIRE__ENVELOPE__BODY_VERIFY;
    e2.verify = &v;
    if (rc == 0 && (write_frame(fds[1], &e1) != 0 || write_frame(fds[1], &e2) != 0)) rc = 1;
    close(fds[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    specd_ipc_buffer_destroy(b);
    if (rc != 0) return rc;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
