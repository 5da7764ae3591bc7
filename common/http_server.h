/* A small HTTP/1.1 server on libmicrohttpd, event-driven: one thread polls every socket (epoll),
 * so an open connection costs memory, not a thread, and slow or idle clients cannot use up the
 * server. A request whose head and body are in is handed to a thread of its own while its
 * connection is suspended (a handler may block while its answer is generated); a streamed body
 * is produced on that thread into a buffer the polling thread sends from, the connection
 * suspended while the buffer is empty. Defences (http_conns.h): a deadline for a request's
 * whole head and body, a connection limit per client address and in all, 413 at once for a
 * Content-Length over the limit, an optional bearer key. HEAD is answered for every GET route
 * (the handler sees GET; the body is left out). Program code shared by `specd serve` and the
 * daemons' /metrics: not part of libspecd, which has no HTTP dependency. */
#ifndef SPECD_COMMON_HTTP_SERVER_H
#define SPECD_COMMON_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "specd/status.h"

typedef struct http_server http_server;

typedef struct http_server_request {
    const char *method; /* "GET", "POST", ... (a HEAD request is seen as "GET") */
    const char *path;   /* without the query string */
    const char *body;   /* NUL-terminated copy of the body (borrowed for the call); "" if none */
    size_t body_len;
    int body_too_large; /* the body is over the server's limit: dropped, or not read at all */
    int fd;             /* the connection's socket, for http_server_peer_gone */
} http_server_request;

/* A streamed body: read() returns bytes written into buf (> 0), 0 at the end of the body, or -1
 * to drop the connection (the client is gone). It may block: it runs on the request's own thread.
 * release() is called exactly once, on that thread, when the stream ended or the client left. */
typedef struct http_server_stream {
    ssize_t (*read)(void *user, char *buf, size_t cap);
    void (*release)(void *user);
    void *user;
} http_server_stream;

typedef struct http_server_reply {
    int status;               /* HTTP status (default 200) */
    const char *content_type; /* static string (default "application/json") */
    char *body;               /* malloc'd whole body (the server frees it), or NULL */
    size_t body_len;
    http_server_stream stream; /* used instead of body when stream.read is set */
    int retry_after;          /* > 0: a Retry-After header of that many seconds */
} http_server_reply;

/* Fills reply for req. Runs on the request's own thread; may block. */
typedef void (*http_server_handler)(void *user, const http_server_request *req,
                                    http_server_reply *reply);

typedef struct http_server_params {
    const char *host;          /* IPv4 address to bind (default "127.0.0.1") */
    int port;                  /* 0 = any free port (http_server_port says which) */
    size_t max_body;           /* bytes (default 1 MiB) */
    unsigned max_conns;        /* connections at once (default 512) */
    unsigned max_conns_per_ip; /* connections at once from one address (default 128) */
    /* Milliseconds a request's head and body may take, from when it began to be awaited (the
     * connection opened, or the previous answer ended) to its last byte: then the connection is
     * closed (default 30000). Not reset by each byte that arrives. */
    unsigned request_timeout_ms;
    unsigned idle_timeout; /* seconds without traffic while an answer is sent (default 120) */
    /* When set, every request needs "Authorization: Bearer <api_key>" (401 otherwise), except
     * those for the paths in open_paths (a NULL-terminated list, may be NULL). */
    const char *api_key;
    const char *const *open_paths;
    /* When set, browsers at this origin ("*": any) may call the server: every answer carries
     * Access-Control-Allow-Origin, and a preflight (OPTIONS with Access-Control-Request-Method)
     * is answered 204 with the methods and headers allowed, before the API key is asked for
     * (a preflight never carries one). Unset: no CORS headers, and OPTIONS reaches the handler
     * like any method. */
    const char *cors_origin;
} http_server_params;

http_server_params http_server_default_params(void);

/* Starts listening. Caller owns *out (http_server_destroy). */
specd_status http_server_create(const http_server_params *p, http_server_handler handler,
                                void *user, http_server **out, specd_error *err);
/* Closes every connection (waiting for the requests' threads) and frees the server. NULL is a
 * no-op. */
void http_server_destroy(http_server *http);
int http_server_port(const http_server *http);
/* Requests begun whose answer is not yet wholly sent (or abandoned). */
int http_server_active(http_server *http);

/* 1 when the peer of fd is gone: the socket was reset or failed, checked without blocking. How a
 * handler waiting for tokens learns that nobody is listening any more. End-of-file alone is not
 * gone: a client may shut its sending side and still read the answer (http_conns.h probes such
 * a peer, so a wholly closed one is reset and seen here). */
int http_server_peer_gone(int fd);

#endif
