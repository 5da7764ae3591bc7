/* A small HTTP/1.1 server on libmicrohttpd: one thread per connection (a handler may block while
 * its request is generated, and a streamed body is produced by a reader that blocks until the
 * next bytes exist), request bodies collected up to a limit, and either a whole body or a stream
 * as the answer. Program code shared by `specd serve` and the daemons' /metrics: not part of
 * libspecd, which has no HTTP dependency. */
#ifndef SPECD_SERVE_HTTP_H
#define SPECD_SERVE_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "specd/status.h"

typedef struct serve_http serve_http;

typedef struct serve_http_request {
    const char *method; /* "GET", "POST", ... */
    const char *path;   /* without the query string */
    const char *body;   /* NUL-terminated copy of the body (borrowed for the call); "" if none */
    size_t body_len;
    int body_too_large; /* the body went over the server's limit and was dropped */
    int fd;             /* the connection's socket, for serve_http_peer_gone */
} serve_http_request;

/* A streamed body: read() returns bytes written into buf (> 0), 0 at the end of the body, or -1
 * to drop the connection (the client is gone). It may block. release() is called exactly once
 * when the connection is done with the stream, whether it ended or the client left. */
typedef struct serve_http_stream {
    ssize_t (*read)(void *user, char *buf, size_t cap);
    void (*release)(void *user);
    void *user;
} serve_http_stream;

typedef struct serve_http_reply {
    int status;               /* HTTP status (default 200) */
    const char *content_type; /* static string (default "application/json") */
    char *body;               /* malloc'd whole body (the server frees it), or NULL */
    size_t body_len;
    serve_http_stream stream; /* used instead of body when stream.read is set */
} serve_http_reply;

/* Fills reply for req. Runs on the connection's own thread; may block. */
typedef void (*serve_http_handler)(void *user, const serve_http_request *req,
                                   serve_http_reply *reply);

typedef struct serve_http_params {
    const char *host;      /* IPv4 address to bind (default "127.0.0.1") */
    int port;              /* 0 = any free port (serve_http_port says which) */
    size_t max_body;       /* bytes (default 1 MiB) */
    unsigned max_conns;    /* connections at once (default 256) */
    unsigned idle_timeout; /* seconds an idle connection is kept (default 120) */
} serve_http_params;

serve_http_params serve_http_default_params(void);

/* Starts listening. Caller owns *out (serve_http_destroy). */
specd_status serve_http_create(const serve_http_params *p, serve_http_handler handler, void *user,
                               serve_http **out, specd_error *err);
/* Closes every connection (waiting for their threads) and frees the server. NULL is a no-op. */
void serve_http_destroy(serve_http *http);
int serve_http_port(const serve_http *http);
/* Requests begun whose answer is not yet wholly sent (or abandoned). */
int serve_http_active(serve_http *http);

/* 1 when the peer of fd has closed its side (or the socket failed), checked without blocking:
 * how a handler waiting for tokens learns that nobody is listening any more. */
int serve_http_peer_gone(int fd);

#endif
