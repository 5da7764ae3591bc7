#include "ipc/transport.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "common/status_internal.h"

/* sun_path is 108 bytes on Linux, including the NUL. */
#define UNIX_PATH_MAX_LEN 107

static specd_status check_private_dir(const char *dir, specd_error *err) {
    struct stat st;
    if (lstat(dir, &st) != 0)
        return specd_fail(err, SPECD_E_IO, "runtime directory %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return specd_fail(err, SPECD_E_IO, "runtime directory %s is not a directory", dir);
    if (st.st_uid != geteuid())
        return specd_fail(err, SPECD_E_IO, "runtime directory %s belongs to uid %u, not us", dir,
                          (unsigned)st.st_uid);
    if ((st.st_mode & 077) != 0)
        return specd_fail(err, SPECD_E_IO,
                          "runtime directory %s has mode %03o: others could enter it (want 0700)",
                          dir, (unsigned)(st.st_mode & 0777));
    return SPECD_OK;
}

static specd_status make_private_dir(const char *dir, specd_error *err) {
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return specd_fail(err, SPECD_E_IO, "mkdir %s: %s", dir, strerror(errno));
    return check_private_dir(dir, err);
}

specd_status specd_ipc_default_endpoint(const char *name, char *out, size_t cap, specd_error *err) {
    if (!name || !*name || !out || strchr(name, '/'))
        return specd_fail(err, SPECD_E_INVALID_ARG, "default endpoint: bad name");
    char dir[256];
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    struct stat st;
    if (xdg && xdg[0] == '/' && strlen(xdg) < 200 && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) &&
        st.st_uid == geteuid())
        snprintf(dir, sizeof dir, "%s/specd", xdg);
    else
        snprintf(dir, sizeof dir, "/tmp/specd-%u", (unsigned)geteuid());
    SPECD_TRY(make_private_dir(dir, err));
    int n = snprintf(out, cap, "ipc://%s/%s.sock", dir, name);
    if (n < 0 || (size_t)n >= cap || (size_t)n - 6 > UNIX_PATH_MAX_LEN)
        return specd_fail(err, SPECD_E_INVALID_ARG, "default endpoint for '%s' too long", name);
    return SPECD_OK;
}

specd_status specd_ipc_endpoint_check(const char *ep, int have_curve, specd_error *err) {
    if (!ep) return specd_fail(err, SPECD_E_INVALID_ARG, "endpoint is NULL");
    if (strncmp(ep, "inproc://", 9) == 0) return SPECD_OK;
    if (strncmp(ep, "tcp://", 6) == 0) {
        if (!have_curve)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "endpoint %s: tcp:// needs CURVE keys (unauthenticated peers "
                              "would be accepted)",
                              ep);
        if (!zmq_has("curve"))
            return specd_fail(err, SPECD_E_UNSUPPORTED, "libzmq was built without CURVE");
        return SPECD_OK;
    }
    if (strncmp(ep, "ipc://", 6) == 0) {
        const char *path = ep + 6;
        if (path[0] != '/')
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "endpoint %s: ipc:// needs an absolute path (abstract sockets have "
                              "no permissions)",
                              ep);
        if (strlen(path) > UNIX_PATH_MAX_LEN)
            return specd_fail(err, SPECD_E_INVALID_ARG, "endpoint %s: path longer than %d", ep,
                              UNIX_PATH_MAX_LEN);
        char dir[UNIX_PATH_MAX_LEN + 1];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            slash[1] = '\0';
        else
            *slash = '\0';
        return check_private_dir(dir, err);
    }
    return specd_fail(err, SPECD_E_INVALID_ARG, "endpoint %s: transport not allowed", ep);
}

static specd_status setopt(void *s, int opt, const void *v, size_t len, const char *name,
                           specd_error *err) {
    if (zmq_setsockopt(s, opt, v, len) != 0)
        return specd_fail(err, SPECD_E_IO, "zmq_setsockopt %s: %s", name, zmq_strerror(errno));
    return SPECD_OK;
}

static specd_status setint(void *s, int opt, int v, const char *name, specd_error *err) {
    return setopt(s, opt, &v, sizeof v, name, err);
}

static specd_status configure(void *s, int type, const specd_ipc_sockopts *o, specd_error *err) {
    int64_t maxmsg = (int64_t)o->max_frame;
    SPECD_TRY(setint(s, ZMQ_SNDHWM, o->hwm, "SNDHWM", err));
    SPECD_TRY(setint(s, ZMQ_RCVHWM, o->hwm, "RCVHWM", err));
    /* libzmq drops a peer that announces a bigger message before reading it into memory. */
    SPECD_TRY(setopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg, "MAXMSGSIZE", err));
    SPECD_TRY(setint(s, ZMQ_LINGER, o->linger_ms, "LINGER", err));
    SPECD_TRY(setint(s, ZMQ_SNDTIMEO, o->send_timeout_ms, "SNDTIMEO", err));
    if (o->heartbeat_ivl_ms > 0) { /* the daemons run none: see ipc/service.h */
        SPECD_TRY(setint(s, ZMQ_HEARTBEAT_IVL, o->heartbeat_ivl_ms, "HEARTBEAT_IVL", err));
        SPECD_TRY(
            setint(s, ZMQ_HEARTBEAT_TIMEOUT, o->heartbeat_timeout_ms, "HEARTBEAT_TIMEOUT", err));
        SPECD_TRY(setint(s, ZMQ_HEARTBEAT_TTL, o->heartbeat_timeout_ms, "HEARTBEAT_TTL", err));
    }
    if (type == ZMQ_ROUTER) {
        /* A reply to a peer that vanished fails instead of disappearing silently. */
        SPECD_TRY(setint(s, ZMQ_ROUTER_MANDATORY, 1, "ROUTER_MANDATORY", err));
        /* No ROUTER_HANDOVER: a connection that names another's routing id must not take over
         * its session (hosts never set one: each connection gets a fresh id from us). */
    } else {
        /* Queue nothing for a peer that is not connected: a send then times out instead of
         * waiting for a daemon that may never come back. */
        SPECD_TRY(setint(s, ZMQ_IMMEDIATE, 1, "IMMEDIATE", err));
        SPECD_TRY(setint(s, ZMQ_RECONNECT_IVL, 50, "RECONNECT_IVL", err));
        SPECD_TRY(setint(s, ZMQ_RECONNECT_IVL_MAX, 1000, "RECONNECT_IVL_MAX", err));
    }
    if (o->curve_server) {
        SPECD_TRY(setint(s, ZMQ_CURVE_SERVER, 1, "CURVE_SERVER", err));
        SPECD_TRY(setopt(s, ZMQ_ZAP_DOMAIN, "specd", 5, "ZAP_DOMAIN", err));
        SPECD_TRY(setopt(s, ZMQ_CURVE_SECRETKEY, o->curve_secret, 40, "CURVE_SECRETKEY", err));
    } else if (o->curve_server_public) {
        SPECD_TRY(
            setopt(s, ZMQ_CURVE_SERVERKEY, o->curve_server_public, 40, "CURVE_SERVERKEY", err));
        SPECD_TRY(setopt(s, ZMQ_CURVE_PUBLICKEY, o->curve_public, 40, "CURVE_PUBLICKEY", err));
        SPECD_TRY(setopt(s, ZMQ_CURVE_SECRETKEY, o->curve_secret, 40, "CURVE_SECRETKEY", err));
    }
    return SPECD_OK;
}

static int z85_ok(const char *k) {
    return k && strlen(k) == 40;
}

specd_status specd_ipc_socket_open(void *ctx, int type, const char *endpoint,
                                   const specd_ipc_sockopts *o, void **out, specd_error *err) {
    if (!ctx || !o || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "socket_open: NULL");
    int have_curve = o->curve_server ? z85_ok(o->curve_secret)
                                     : z85_ok(o->curve_server_public) && z85_ok(o->curve_public) &&
                                           z85_ok(o->curve_secret);
    if ((o->curve_server || o->curve_server_public) && !have_curve)
        return specd_fail(err, SPECD_E_INVALID_ARG, "CURVE keys must be 40 Z85 characters");
    SPECD_TRY(specd_ipc_endpoint_check(endpoint, have_curve, err));
    void *s = zmq_socket(ctx, type);
    if (!s) return specd_fail(err, SPECD_E_IO, "zmq_socket: %s", zmq_strerror(errno));
    specd_status st = configure(s, type, o, err);
    if (st == SPECD_OK) {
        int rc = type == ZMQ_ROUTER ? zmq_bind(s, endpoint) : zmq_connect(s, endpoint);
        if (rc != 0)
            st = specd_fail(err, SPECD_E_IO, "%s %s: %s", type == ZMQ_ROUTER ? "bind" : "connect",
                            endpoint, zmq_strerror(errno));
    }
    if (st != SPECD_OK) {
        int zero = 0;
        zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(s);
        return st;
    }
    *out = s;
    return SPECD_OK;
}

specd_status specd_ipc_send(void *sock, const void *rid, size_t rid_len,
                            const SpecdWire__Envelope *env, size_t max_frame, specd_error *err) {
    size_t n = specd_wire__envelope__get_packed_size(env);
    if (n > max_frame)
        return specd_fail(err, SPECD_E_INVALID_ARG, "frame of %zu bytes exceeds the limit of %zu",
                          n, max_frame);
    if (rid && zmq_send(sock, rid, rid_len, ZMQ_SNDMORE) < 0)
        return specd_fail(err, errno == EAGAIN ? SPECD_E_TIMEOUT : SPECD_E_PEER,
                          "send routing id: %s", zmq_strerror(errno));
    zmq_msg_t msg;
    if (zmq_msg_init_size(&msg, n) != 0)
        return specd_fail(err, SPECD_E_NOMEM, "zmq_msg_init_size %zu", n);
    specd_wire__envelope__pack(env, zmq_msg_data(&msg));
    if (zmq_msg_send(&msg, sock, 0) < 0) {
        int e = errno;
        zmq_msg_close(&msg);
        return specd_fail(err, e == EAGAIN ? SPECD_E_TIMEOUT : SPECD_E_PEER, "send: %s",
                          zmq_strerror(e));
    }
    return SPECD_OK;
}

void specd_ipc_error_body(SpecdWire__Envelope *env, SpecdWire__Error *body, uint64_t request_id,
                          specd_status code, SpecdWire__ErrorReason reason, const char *message) {
    SpecdWire__Error init = SPECD_WIRE__ERROR__INIT;
    *body = init;
    body->code = (uint32_t)(code == SPECD_OK ? SPECD_E_INTERNAL : code);
    body->has_reason = reason != SPECD_WIRE__ERROR_REASON__REASON_NONE;
    body->reason = reason;
    body->message = (char *)message;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    *env = e;
    env->request_id = request_id;
    env->body_case = SPECD_WIRE__ENVELOPE__BODY_ERROR;
    env->error = body;
}
