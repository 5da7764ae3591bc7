/* The watch over an HTTP server's open connections (http_server.c), run by a thread of its own
 * that wakes a few times a second:
 *  - a deadline for each request's whole head and body, counted from when the request began to
 *    be awaited (the connection opened, or the previous answer ended): a client that trickles
 *    bytes, or sends nothing, is shut out when it passes, however often it sends a byte;
 *  - while a request is handled and nothing is written yet, a peer that shut its sending side is
 *    probed with an interim "100 Continue" (which HTTP/1.1 clients must accept before the final
 *    answer): a client that only half-closed reads it and waits; a socket that is wholly closed
 *    answers with a reset, which http_server_peer_gone then sees. End-of-file alone cannot tell
 *    the two apart;
 *  - a connection answered before its body was read (413, 401) is drained for a while after the
 *    server closes it, so that the client can finish sending and read the answer instead of
 *    getting a reset ("lingering close").
 * Every function is thread-safe. */
#ifndef SPECD_COMMON_HTTP_CONNS_H
#define SPECD_COMMON_HTTP_CONNS_H

typedef struct http_conns http_conns;
typedef struct http_conn http_conn;

/* request_timeout_ms: the deadline of a request's head and body. NULL when out of memory or
 * when the thread cannot start. */
http_conns *http_conns_create(long request_timeout_ms);
/* Stops the watch and closes the sockets still lingering. NULL is a no-op. */
void http_conns_destroy(http_conns *w);

/* A connection opened on fd: its first request is awaited from now. NULL when out of memory. */
http_conn *http_conns_add(http_conns *w, int fd);
/* The server is about to close the connection: forget it (draining it first if it was marked
 * with http_conns_linger). */
void http_conns_remove(http_conns *w, http_conn *c);

/* The next request is awaited from now (the previous answer ended). */
void http_conns_awaiting(http_conns *w, http_conn *c);
/* A whole request is in and its handler runs: no deadline. probe: nothing is written yet and the
 * client speaks HTTP/1.1, so a half-closed peer may be probed. */
void http_conns_handling(http_conns *w, http_conn *c, int probe);
/* The answer is about to be written: no more probes. Call before the server may write. */
void http_conns_answering(http_conns *w, http_conn *c);
/* The answer went out before the request's body was read: drain the socket when it closes. */
void http_conns_linger(http_conns *w, http_conn *c);

#endif
