#include "serve/serve_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/status_internal.h"

struct serve_http {
    struct MHD_Daemon *daemon;
    serve_http_handler handler;
    void *user;
    size_t max_body;
    int port;
    atomic_int active; /* requests begun and not yet completed (answer sent or abandoned) */
};

/* One request's upload, collected across the access handler's calls. */
typedef struct upload {
    char *buf;
    size_t len, cap;
    int too_large;
} upload;

serve_http_params serve_http_default_params(void) {
    return (serve_http_params){.host = "127.0.0.1", .max_body = 1u << 20, .max_conns = 256,
                               .idle_timeout = 120};
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    serve_http_stream *s = cls;
    ssize_t n = s->read(s->user, buf, max);
    if (n > 0) return n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void stream_free(void *cls) {
    serve_http_stream *s = cls;
    if (s->release) s->release(s->user);
    free(s);
}

static int append(upload *u, const char *data, size_t n, size_t max) {
    if (u->too_large || u->len + n > max) {
        /* Keep reading (and dropping) the rest so the client sees our 413, not a reset. */
        u->too_large = 1;
        free(u->buf);
        u->buf = NULL;
        u->len = u->cap = 0;
        return 0;
    }
    if (u->len + n + 1 > u->cap) {
        size_t cap = u->cap ? u->cap : 4096;
        while (cap < u->len + n + 1) cap *= 2;
        char *b = realloc(u->buf, cap);
        if (!b) return -1;
        u->buf = b;
        u->cap = cap;
    }
    memcpy(u->buf + u->len, data, n);
    u->len += n;
    u->buf[u->len] = '\0';
    return 0;
}

static enum MHD_Result queue_reply(struct MHD_Connection *c, serve_http_reply *r) {
    struct MHD_Response *resp;
    if (r->stream.read) {
        serve_http_stream *s = malloc(sizeof *s);
        if (!s) {
            if (r->stream.release) r->stream.release(r->stream.user);
            return MHD_NO;
        }
        *s = r->stream;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, s,
                                                 stream_free);
        if (!resp) {
            stream_free(s);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r->body_len, r->body ? r->body : (void *)"",
                                               r->body ? MHD_RESPMEM_MUST_FREE
                                                       : MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            free(r->body);
            return MHD_NO;
        }
    }
    MHD_add_response_header(resp, "Content-Type",
                            r->content_type ? r->content_type : "application/json");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)(r->status ? r->status : 200), resp);
    MHD_destroy_response(resp);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    (void)version;
    serve_http *h = cls;
    upload *u = *con_cls;
    if (!u) { /* first call: headers only */
        u = calloc(1, sizeof *u);
        if (!u) return MHD_NO;
        *con_cls = u;
        atomic_fetch_add(&h->active, 1);
        return MHD_YES;
    }
    if (*upload_size) {
        if (append(u, upload_data, *upload_size, h->max_body) != 0) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    serve_http_request req = {.method = method,
                              .path = url,
                              .body = u->buf ? u->buf : "",
                              .body_len = u->len,
                              .body_too_large = u->too_large,
                              .fd = ci ? ci->connect_fd : -1};
    serve_http_reply reply = {0};
    h->handler(h->user, &req, &reply);
    return queue_reply(c, &reply);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    serve_http *h = cls;
    upload *u = *con_cls;
    if (u) {
        atomic_fetch_sub(&h->active, 1);
        free(u->buf);
        free(u);
        *con_cls = NULL;
    }
}

specd_status serve_http_create(const serve_http_params *p, serve_http_handler handler, void *user,
                               serve_http **out, specd_error *err) {
    serve_http_params d = serve_http_default_params();
    if (!p) p = &d;
    if (!handler || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "http: no handler or out");
    if (p->port < 0 || p->port > 65535)
        return specd_fail(err, SPECD_E_INVALID_ARG, "http: port %d is not 0..65535", p->port);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    const char *host = p->host ? p->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "http: host '%s' is not an IPv4 address",
                          host);
    serve_http *h = calloc(1, sizeof *h);
    if (!h) return specd_fail(err, SPECD_E_NOMEM, "http: no memory");
    h->handler = handler;
    h->user = user;
    h->max_body = p->max_body ? p->max_body : d.max_body;
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
            MHD_USE_POLL,
        0, NULL, NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(p->max_conns ? p->max_conns : d.max_conns), MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(p->idle_timeout ? p->idle_timeout : d.idle_timeout), MHD_OPTION_END);
    if (!h->daemon) {
        int e = errno;
        free(h);
        return specd_fail(err, SPECD_E_IO, "http: cannot listen on %s:%d: %s", host, p->port,
                          strerror(e));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    *out = h;
    return SPECD_OK;
}

void serve_http_destroy(serve_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    free(h);
}

int serve_http_port(const serve_http *h) { return h ? h->port : 0; }

int serve_http_active(serve_http *h) { return h ? atomic_load(&h->active) : 0; }

int serve_http_peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&pfd, 1, 0) <= 0) return 0;
    if (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    /* Readable: either a pipelined request (still there) or the end of the stream. */
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}
