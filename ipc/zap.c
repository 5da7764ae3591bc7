#include "ipc/zap.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/log_internal.h"
#include "common/status_internal.h"

#define KEY_BYTES 32

struct specd_ipc_zap {
    void *sock;
    pthread_t thread;
    atomic_int stop;
    atomic_size_t refused;
    size_t n;
    uint8_t (*keys)[KEY_BYTES];
};

static int allowed(const specd_ipc_zap *z, const uint8_t *key, size_t len) {
    if (len != KEY_BYTES) return 0;
    for (size_t i = 0; i < z->n; i++)
        if (memcmp(z->keys[i], key, KEY_BYTES) == 0) return 1;
    return 0;
}

/* One request: version, request id, domain, address, identity, mechanism, credentials... */
static void serve_one(specd_ipc_zap *z) {
    zmq_msg_t f[8];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, z->sock, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        more = zmq_msg_more(&m);
        if (n < 8)
            f[n++] = m;
        else
            zmq_msg_close(&m);
    }
    int ok = n >= 7 && zmq_msg_size(&f[5]) == 5 && memcmp(zmq_msg_data(&f[5]), "CURVE", 5) == 0 &&
             allowed(z, zmq_msg_data(&f[6]), zmq_msg_size(&f[6]));
    if (!ok) {
        atomic_fetch_add(&z->refused, 1);
        specd_log(SPECD_LOG_WARN, "refused a client whose CURVE key is not on the allow-list");
    }
    if (n >= 2) {
        zmq_send(z->sock, "1.0", 3, ZMQ_SNDMORE);
        zmq_send(z->sock, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
        zmq_send(z->sock, ok ? "200" : "400", 3, ZMQ_SNDMORE);
        const char *text = ok ? "OK" : "unknown client key";
        zmq_send(z->sock, text, strlen(text), ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, ZMQ_SNDMORE);
        zmq_send(z->sock, "", 0, 0);
    }
    for (int i = 0; i < n; i++)
        zmq_msg_close(&f[i]);
}

static void *run(void *arg) {
    specd_ipc_zap *z = arg;
    while (!atomic_load(&z->stop)) {
        zmq_pollitem_t it = {.socket = z->sock, .events = ZMQ_POLLIN};
        int rc = zmq_poll(&it, 1, 50);
        if (rc < 0 && errno == ETERM) break;
        if (rc > 0) serve_one(z);
    }
    return NULL;
}

specd_status specd_ipc_zap_start(void *ctx, const char *const *keys, size_t n, specd_ipc_zap **out,
                                 specd_error *err) {
    if (!ctx || !out || (n && !keys))
        return specd_fail(err, SPECD_E_INVALID_ARG, "zap_start: NULL argument");
    specd_ipc_zap *z = specd_alloc_array(1, sizeof *z);
    if (!z) return specd_fail(err, SPECD_E_NOMEM, "zap_start: out of memory");
    z->keys = n ? specd_alloc_array(n, KEY_BYTES) : NULL;
    if (n && !z->keys) {
        specd_free(z);
        return specd_fail(err, SPECD_E_NOMEM, "zap_start: out of memory");
    }
    z->n = n;
    for (size_t i = 0; i < n; i++) {
        if (!keys[i] || strlen(keys[i]) != 40 || !zmq_z85_decode(z->keys[i], keys[i])) {
            specd_free(z->keys);
            specd_free(z);
            return specd_fail(err, SPECD_E_INVALID_ARG, "client key %zu is not 40 Z85 characters",
                              i);
        }
    }
    z->sock = zmq_socket(ctx, ZMQ_REP);
    int zero = 0;
    if (!z->sock || zmq_setsockopt(z->sock, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(z->sock, "inproc://zeromq.zap.01") != 0) {
        specd_status st = specd_fail(err, SPECD_E_IO, "ZAP handler: %s", zmq_strerror(errno));
        if (z->sock) zmq_close(z->sock);
        specd_free(z->keys);
        specd_free(z);
        return st;
    }
    if (pthread_create(&z->thread, NULL, run, z) != 0) {
        zmq_close(z->sock);
        specd_free(z->keys);
        specd_free(z);
        return specd_fail(err, SPECD_E_IO, "ZAP handler: cannot start its thread");
    }
    *out = z;
    return SPECD_OK;
}

void specd_ipc_zap_stop(specd_ipc_zap *z) {
    if (!z) return;
    atomic_store(&z->stop, 1);
    pthread_join(z->thread, NULL);
    zmq_close(z->sock);
    specd_free(z->keys);
    specd_free(z);
}

size_t specd_ipc_zap_refused(const specd_ipc_zap *z) {
    return atomic_load(&((specd_ipc_zap *)z)->refused);
}
