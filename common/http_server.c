#include "common/http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "common/http_conns.h"
#include "common/status_internal.h"

/* A streamed answer's producer waits while this much is produced and not yet sent. */
#define STREAM_HIGH_WATER 65536

struct http_server {
    struct MHD_Daemon *daemon;
    http_conns *conns;
    http_server_handler handler;
    void *user;
    size_t max_body;
    int port;
    char *api_key;
    const char *const *open_paths;
    char *cors_origin; /* NULL: no CORS */
    atomic_int active; /* requests begun and not yet completed (answer sent or abandoned) */
    /* Guards every exchange's shared fields, stopping and workers. */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a stream's buffer drained or its connection left; a worker ended */
    int stopping;           /* no connection may be suspended any more */
    int workers;            /* request threads still running */
    struct exchange *suspended_head; /* exchanges whose connection is suspended */
};

/* One request's upload, collected across the access handler's calls. */
typedef struct upload {
    char *buf;
    size_t len, cap;
    int too_large;
} upload;

/* One request, from its head to the end of its answer. Shared by the polling thread (MHD's
 * callbacks), the request's own thread and, for a stream, MHD's response: freed when the last of
 * them lets go (refs, under mu). */
typedef struct exchange {
    http_server *h;
    struct MHD_Connection *c; /* NULL once MHD is done with the request */
    http_conn *conn;          /* NULL once MHD is done with the request */
    struct exchange *prev, *next; /* on h->suspended_head while suspended */
    char *method, *path;
    int fd, http11;
    upload body;
    int refs;
    int dispatched, handled, queued, suspended, streaming;
    http_server_reply reply;
    /* a streamed answer: bytes produced and not yet sent */
    char *sbuf;
    size_t slen, soff, scap;
    int s_end;  /* 1: the stream ended; -1: it failed */
    int s_gone; /* MHD dropped the stream: the connection is done */
} exchange;

http_server_params http_server_default_params(void) {
    return (http_server_params){.host = "127.0.0.1", .max_body = 1u << 20, .max_conns = 512,
                                .max_conns_per_ip = 128, .request_timeout_ms = 30000,
                                .idle_timeout = 120};
}

/* ---- exchanges ------------------------------------------------------------------------------ */

static void unref(exchange *x) { /* under mu */
    if (--x->refs > 0) return;
    free(x->method);
    free(x->path);
    free(x->body.buf);
    free(x->sbuf);
    if (!x->queued) free(x->reply.body);
    free(x);
}

static void set_suspended(exchange *x, int on) { /* under mu */
    http_server *h = x->h;
    if (on) {
        MHD_suspend_connection(x->c);
        x->next = h->suspended_head;
        if (h->suspended_head) h->suspended_head->prev = x;
        h->suspended_head = x;
        x->prev = NULL;
    } else {
        if (x->prev) x->prev->next = x->next;
        else h->suspended_head = x->next;
        if (x->next) x->next->prev = x->prev;
        x->prev = x->next = NULL;
        MHD_resume_connection(x->c);
    }
    x->suspended = on;
}

/* Lets MHD go on with x's connection when it waits for the request's thread. Under mu. */
static void wake(exchange *x) {
    if (x->suspended && x->c) set_suspended(x, 0);
}

static int append(upload *u, const char *data, size_t n, size_t max) {
    if (u->too_large || u->len + n > max) {
        /* Keep reading (and dropping) the rest so the client sees our 413, not a reset; the
         * request deadline bounds how long. */
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

/* ---- streamed answers ----------------------------------------------------------------------- */

/* MHD asks for the next bytes (polling thread: must not block). With none ready the connection
 * is suspended until the producer has more. */
static ssize_t content_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    exchange *x = cls;
    http_server *h = x->h;
    ssize_t n;
    pthread_mutex_lock(&h->mu);
    if (x->soff < x->slen) {
        size_t k = x->slen - x->soff < max ? x->slen - x->soff : max;
        memcpy(buf, x->sbuf + x->soff, k);
        x->soff += k;
        if (x->soff == x->slen) x->soff = x->slen = 0;
        pthread_cond_broadcast(&h->changed);
        n = (ssize_t)k;
    } else if (x->s_end > 0) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (x->s_end < 0 || h->stopping || !x->c) {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    } else {
        set_suspended(x, 1);
        n = 0;
    }
    pthread_mutex_unlock(&h->mu);
    return n;
}

static void content_done(void *cls) {
    exchange *x = cls;
    http_server *h = x->h;
    pthread_mutex_lock(&h->mu);
    x->s_gone = 1;
    pthread_cond_broadcast(&h->changed);
    unref(x);
    pthread_mutex_unlock(&h->mu);
}

/* The request's thread runs the stream into x's buffer until it ends or the connection is done. */
static void produce(exchange *x, http_server_stream s) {
    http_server *h = x->h;
    char tmp[16384];
    for (;;) {
        pthread_mutex_lock(&h->mu);
        while (!x->s_gone && x->c && x->slen - x->soff >= STREAM_HIGH_WATER)
            pthread_cond_wait(&h->changed, &h->mu);
        int gone = x->s_gone || !x->c;
        pthread_mutex_unlock(&h->mu);
        if (gone) break;
        ssize_t n = s.read(s.user, tmp, sizeof tmp);
        pthread_mutex_lock(&h->mu);
        if (n > 0 && x->soff > 0 && x->slen + (size_t)n > x->scap) {
            memmove(x->sbuf, x->sbuf + x->soff, x->slen - x->soff);
            x->slen -= x->soff;
            x->soff = 0;
        }
        if (n > 0 && x->slen + (size_t)n > x->scap) {
            size_t cap = x->slen + (size_t)n + sizeof tmp;
            char *b = realloc(x->sbuf, cap);
            if (b) {
                x->sbuf = b;
                x->scap = cap;
            } else {
                n = -1;
            }
        }
        if (n > 0) {
            memcpy(x->sbuf + x->slen, tmp, (size_t)n);
            x->slen += (size_t)n;
        } else {
            x->s_end = n == 0 ? 1 : -1;
        }
        wake(x);
        int end = x->s_end != 0 || x->s_gone || !x->c;
        pthread_mutex_unlock(&h->mu);
        if (end) break;
    }
    if (s.release) s.release(s.user);
}

/* ---- the request's thread ------------------------------------------------------------------- */

static void *run_request(void *arg) {
    exchange *x = arg;
    http_server *h = x->h;
    http_server_request req = {.method = x->method,
                               .path = x->path,
                               .body = x->body.buf ? x->body.buf : "",
                               .body_len = x->body.len,
                               .body_too_large = x->body.too_large,
                               .fd = x->fd};
    http_server_reply reply = {0};
    h->handler(h->user, &req, &reply);
    http_server_stream s = reply.stream;
    reply.stream = (http_server_stream){0};
    pthread_mutex_lock(&h->mu);
    x->reply = reply;
    x->streaming = s.read != NULL;
    x->handled = 1;
    if (x->conn) http_conns_answering(h->conns, x->conn);
    wake(x);
    int live = x->c != NULL;
    pthread_mutex_unlock(&h->mu);
    if (s.read && live) produce(x, s);
    else if (s.release) s.release(s.user);
    pthread_mutex_lock(&h->mu);
    h->workers--;
    pthread_cond_broadcast(&h->changed);
    unref(x);
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- MHD's callbacks ------------------------------------------------------------------------ */

/* CORS: the allowed origin on every answer (when the server has one). */
static void add_cors(const http_server *h, struct MHD_Response *resp) {
    if (!h->cors_origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", h->cors_origin);
    /* one origin named: caches must keep answers for other origins apart */
    if (strcmp(h->cors_origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

static enum MHD_Result queue_text(const http_server *h, struct MHD_Connection *c, unsigned status,
                                  char *body, size_t len, const char *extra_header,
                                  const char *extra_value) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (extra_header) MHD_add_response_header(resp, extra_header, extra_value);
    add_cors(h, resp);
    enum MHD_Result ok = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Hands the complete request (or one refused from its head) to a thread of its own and
 * suspends the connection until its answer is ready. */
static enum MHD_Result dispatch(exchange *x) {
    http_server *h = x->h;
    pthread_mutex_lock(&h->mu);
    if (h->stopping) {
        pthread_mutex_unlock(&h->mu);
        return MHD_NO;
    }
    if (x->conn) http_conns_handling(h->conns, x->conn, x->http11);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t t;
    x->refs++;
    /* Under mu: the thread cannot hand its answer back before the connection is suspended. */
    int rc = pthread_create(&t, &attr, run_request, x);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        x->refs--;
        pthread_mutex_unlock(&h->mu);
        char *body = strdup("{\"error\":{\"message\":\"the server cannot start a thread\","
                            "\"type\":\"server_error\",\"param\":null,\"code\":503}}");
        return body ? queue_text(h, x->c, 503, body, strlen(body), NULL, NULL) : MHD_NO;
    }
    x->dispatched = 1;
    h->workers++;
    set_suspended(x, 1);
    pthread_mutex_unlock(&h->mu);
    return MHD_YES;
}

/* The polling thread queues the answer the request's thread left in x. */
static enum MHD_Result queue_reply(exchange *x) {
    http_server *h = x->h;
    pthread_mutex_lock(&h->mu);
    http_server_reply r = x->reply;
    x->queued = 1;
    x->reply.body = NULL;
    if (x->streaming) x->refs++; /* the response's, let go in content_done */
    pthread_mutex_unlock(&h->mu);
    struct MHD_Response *resp;
    if (x->streaming) {
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, content_reader, x,
                                                 content_done);
        if (!resp) {
            content_done(x);
            return MHD_NO;
        }
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
    } else {
        resp = MHD_create_response_from_buffer(r.body_len, r.body ? r.body : (void *)"",
                                               r.body ? MHD_RESPMEM_MUST_FREE
                                                      : MHD_RESPMEM_PERSISTENT);
        if (!resp) {
            free(r.body);
            return MHD_NO;
        }
    }
    MHD_add_response_header(resp, "Content-Type",
                            r.content_type ? r.content_type : "application/json");
    if (r.retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", r.retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    add_cors(h, resp);
    enum MHD_Result ok = MHD_queue_response(x->c, (unsigned)(r.status ? r.status : 200), resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Constant time in the key's length whatever the given string, so that the time taken does not
 * say how much of a guess was right. */
static int same_secret(const char *given, const char *key) {
    size_t gl = strlen(given), kl = strlen(key);
    unsigned char d = gl != kl;
    for (size_t i = 0; i < kl; i++)
        d |= (unsigned char)((unsigned char)key[i] ^ (unsigned char)(i < gl ? given[i] : 0));
    return d == 0;
}

static int authorized(const http_server *h, struct MHD_Connection *c, const char *url) {
    if (!h->api_key) return 1;
    for (const char *const *p = h->open_paths; p && *p; p++)
        if (!strcmp(url, *p)) return 1;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!a || strncasecmp(a, "Bearer ", 7) != 0) return 0;
    a += 7;
    while (*a == ' ') a++;
    return same_secret(a, h->api_key);
}

/* The request has a body, which an answer given from its head leaves unread. */
static int body_announced(struct MHD_Connection *c) {
    const char *v =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    return (v && strcmp(v, "0") != 0) ||
           MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
}

static enum MHD_Result refuse_unauthorized(exchange *x) {
    /* OpenAI's error shape, as serve/serve_response.c writes it */
    char *body = strdup("{\"error\":{\"message\":\"this server needs an API key: send the header "
                        "'Authorization: Bearer KEY'\",\"type\":\"invalid_request_error\","
                        "\"param\":null,\"code\":401}}");
    if (!body) return MHD_NO;
    size_t len = strlen(body);
    if (x->conn && body_announced(x->c)) http_conns_linger(x->h->conns, x->conn);
    return queue_text(x->h, x->c, 401, body, len, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
}

/* A CORS preflight: what a browser at the allowed origin may send. Answered from the head. */
static enum MHD_Result answer_preflight(exchange *x) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"",
                                                                MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    add_cors(x->h, resp);
    MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    /* the headers the OpenAI clients send (the SDKs' x-stainless-* among them) */
    const char *asked = MHD_lookup_connection_value(x->c, MHD_HEADER_KIND,
                                                    "Access-Control-Request-Headers");
    MHD_add_response_header(resp, "Access-Control-Allow-Headers",
                            asked && *asked ? asked : "Authorization, Content-Type");
    MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    if (x->conn && body_announced(x->c)) http_conns_linger(x->h->conns, x->conn);
    enum MHD_Result ok = MHD_queue_response(x->c, MHD_HTTP_NO_CONTENT, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* The Content-Length the client announced is over the limit: no need to wait for the body. */
static int announced_too_large(struct MHD_Connection *c, size_t max) {
    const char *v =
        MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (!v) return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    return end != v && !*end && (errno == ERANGE || n > max);
}

static exchange *exchange_new(http_server *h, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version) {
    exchange *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->h = h;
    x->c = c;
    x->refs = 1;
    x->method = strdup(strcmp(method, MHD_HTTP_METHOD_HEAD) ? method : MHD_HTTP_METHOD_GET);
    x->path = strdup(url);
    x->http11 = version && !strcmp(version, MHD_HTTP_VERSION_1_1);
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    x->fd = fd ? fd->connect_fd : -1;
    const union MHD_ConnectionInfo *sc =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    x->conn = sc ? sc->socket_context : NULL;
    if (!x->method || !x->path) {
        free(x->method);
        free(x->path);
        free(x);
        return NULL;
    }
    return x;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls) {
    http_server *h = cls;
    exchange *x = *con_cls;
    if (!x) { /* first call: the head is in */
        x = exchange_new(h, c, url, method, version);
        if (!x) return MHD_NO;
        *con_cls = x;
        atomic_fetch_add(&h->active, 1);
        if (h->cors_origin && !strcmp(method, MHD_HTTP_METHOD_OPTIONS) &&
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Access-Control-Request-Method"))
            return answer_preflight(x);
        if (!authorized(h, c, url)) return refuse_unauthorized(x);
        if (announced_too_large(c, h->max_body)) {
            x->body.too_large = 1;
            if (x->conn) http_conns_linger(h->conns, x->conn);
            return dispatch(x);
        }
        return MHD_YES;
    }
    if (x->dispatched) {
        pthread_mutex_lock(&h->mu);
        int ready = x->handled && !x->queued;
        pthread_mutex_unlock(&h->mu);
        /* Resumed without an answer: the server is stopping. */
        return ready ? queue_reply(x) : MHD_NO;
    }
    if (*upload_size) {
        if (append(&x->body, upload_data, *upload_size, h->max_body) != 0) return MHD_NO;
        *upload_size = 0;
        return MHD_YES;
    }
    return dispatch(x);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c, (void)toe;
    http_server *h = cls;
    exchange *x = *con_cls;
    if (!x) return;
    *con_cls = NULL;
    atomic_fetch_sub(&h->active, 1);
    pthread_mutex_lock(&h->mu);
    if (x->conn) http_conns_awaiting(h->conns, x->conn);
    x->conn = NULL;
    x->c = NULL;
    pthread_cond_broadcast(&h->changed);
    unref(x);
    pthread_mutex_unlock(&h->mu);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    http_server *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *fd =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        *socket_context = fd ? http_conns_add(h->conns, fd->connect_fd) : NULL;
        /* A connection the watch cannot see would have no deadline: refuse it. */
        if (!*socket_context && fd) shutdown(fd->connect_fd, SHUT_RDWR);
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        http_conns_remove(h->conns, *socket_context);
        *socket_context = NULL;
    }
}

/* ---- the server ----------------------------------------------------------------------------- */

specd_status http_server_create(const http_server_params *p, http_server_handler handler,
                                void *user, http_server **out, specd_error *err) {
    http_server_params d = http_server_default_params();
    if (!p) p = &d;
    if (!handler || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "http: no handler or out");
    if (p->port < 0 || p->port > 65535)
        return specd_fail(err, SPECD_E_INVALID_ARG, "http: port %d is not 0..65535", p->port);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
    const char *host = p->host ? p->host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "http: host '%s' is not an IPv4 address",
                          host);
    http_server *h = calloc(1, sizeof *h);
    if (!h) return specd_fail(err, SPECD_E_NOMEM, "http: no memory");
    h->handler = handler;
    h->user = user;
    h->max_body = p->max_body ? p->max_body : d.max_body;
    h->open_paths = p->open_paths;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->changed, NULL);
    if ((p->api_key && *p->api_key && !(h->api_key = strdup(p->api_key))) ||
        (p->cors_origin && *p->cors_origin && !(h->cors_origin = strdup(p->cors_origin)))) {
        http_server_destroy(h);
        return specd_fail(err, SPECD_E_NOMEM, "http: no memory");
    }
    h->conns =
        http_conns_create(p->request_timeout_ms ? p->request_timeout_ms : d.request_timeout_ms);
    if (!h->conns) {
        http_server_destroy(h);
        return specd_fail(err, SPECD_E_NOMEM, "http: cannot start the connection watch");
    }
    /* One polling thread with epoll; suspend/resume lets a request wait for its own thread
     * without holding the polling thread. */
    h->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, 0, NULL,
        NULL, on_request, h, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, h, MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)(p->max_conns ? p->max_conns : d.max_conns),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)p->max_conns_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)(p->idle_timeout ? p->idle_timeout : d.idle_timeout), MHD_OPTION_END);
    if (!h->daemon) {
        int e = errno;
        http_server_destroy(h);
        return specd_fail(err, SPECD_E_IO, "http: cannot listen on %s:%d: %s", host, p->port,
                          strerror(e));
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : p->port;
    *out = h;
    return SPECD_OK;
}

void http_server_destroy(http_server *h) {
    if (!h) return;
    if (h->daemon) {
        /* MHD may not stop with suspended connections: resume them all; from now on none is
         * suspended again, and those still waiting for an answer are closed. */
        pthread_mutex_lock(&h->mu);
        h->stopping = 1;
        while (h->suspended_head) set_suspended(h->suspended_head, 0);
        pthread_mutex_unlock(&h->mu);
        MHD_stop_daemon(h->daemon);
    }
    /* Every connection is closed: the requests' threads see it and end. */
    pthread_mutex_lock(&h->mu);
    while (h->workers > 0) pthread_cond_wait(&h->changed, &h->mu);
    pthread_mutex_unlock(&h->mu);
    http_conns_destroy(h->conns);
    pthread_cond_destroy(&h->changed);
    pthread_mutex_destroy(&h->mu);
    free(h->api_key);
    free(h->cors_origin);
    free(h);
}

int http_server_port(const http_server *h) { return h ? h->port : 0; }

int http_server_active(http_server *h) { return h ? atomic_load(&h->active) : 0; }

int http_server_peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd pfd = {.fd = fd, .events = 0}; /* errors and hang-ups are always reported */
    return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLHUP | POLLERR | POLLNVAL));
}
