/* ZeroMQ plumbing shared by the host client and the daemons' service loop: endpoint policy
 * (private ipc:// directory, CURVE for tcp://), socket options (high-water marks, frame limit,
 * heartbeats, finite timeouts) and sending/receiving one Envelope per message. */
#ifndef SPECD_IPC_TRANSPORT_H
#define SPECD_IPC_TRANSPORT_H

#include <stddef.h>

#include "ipc/frame.h"
#include "specd/ipc.h"

typedef struct specd_ipc_sockopts {
    int hwm;
    size_t max_frame;
    int heartbeat_ivl_ms;
    int heartbeat_timeout_ms;
    int send_timeout_ms;
    int linger_ms;
    /* CURVE (Z85). Server: curve_secret only (plus curve_server = 1). Client: all three. */
    int curve_server;
    const char *curve_server_public;
    const char *curve_public;
    const char *curve_secret;
} specd_ipc_sockopts;

/* Checks that an endpoint may be used: ipc:// only in a directory that is ours and mode 0700,
 * tcp:// only with CURVE keys, inproc:// always; anything else is refused. */
specd_status specd_ipc_endpoint_check(const char *endpoint, int have_curve, specd_error *err);

/* Creates a ROUTER (bind) or DEALER (connect) socket with every option set. Caller owns *out
 * (zmq_close). */
specd_status specd_ipc_socket_open(void *ctx, int type, const char *endpoint,
                                   const specd_ipc_sockopts *o, void **out, specd_error *err);

/* Sends env as one message, preceded by a routing-id frame when rid is not NULL (ROUTER side).
 * Fails rather than blocks past the socket's send timeout. */
specd_status specd_ipc_send(void *sock, const void *rid, size_t rid_len,
                            const SpecdWire__Envelope *env, size_t max_frame, specd_error *err);

/* Fills an Error envelope body (storage supplied by the caller); reason is what the peer should
 * do about it (the wire's ErrorReason; REASON_NONE is sent as an absent field). */
void specd_ipc_error_body(SpecdWire__Envelope *env, SpecdWire__Error *body, uint64_t request_id,
                          specd_status code, SpecdWire__ErrorReason reason, const char *message);

#endif
