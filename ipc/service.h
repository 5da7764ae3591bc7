/* The daemons' service loop: one ROUTER socket, one request at a time, a reply to each.
 *
 * The loop itself answers Hello (major version, schema hash and model fingerprint must match, or
 * the peer is refused with the reason), Ping, Stats, AttachBuffer/DetachBuffer (a table of mapped
 * buffers) and refuses any other request from a peer that has not said Hello. Everything else
 * goes to the role's handlers; a NULL handler answers SPECD_E_UNSUPPORTED. A handler that fails
 * leaves its state unchanged and its error is sent back as an Error message.
 *
 * Peers. Each Hello starts a peer session with a fresh owner number, bound to the connection it
 * came on (routing id and socket); handlers key sequences on (owner, seq_id), so hosts that number
 * their sequences alike never meet, and the buffer table keys buffers the same way. A peer whose
 * connection closes (or that says Hello again) is gone: its sequences and buffers are released
 * (peer_gone). Quotas: max_peers sessions, max_buffers_per_peer buffers each.
 *
 * A peer cannot stall or crash the loop: replies are sent without blocking (a peer that does not
 * read its replies loses them instead of delaying everyone else), and the daemon side runs no
 * ZMTP heartbeats (libzmq 4.3.4 aborts in stream_engine_base when a heartbeat times out on a
 * connection whose input is throttled, zeromq/libzmq#4364); liveness is the protocol's own Ping.
 *
 * Stopping: specd_ipc_service_run returns when stop_fd (e.g. a signalfd for SIGTERM) becomes
 * readable, after answering every request already received (drain). */
#ifndef SPECD_IPC_SERVICE_H
#define SPECD_IPC_SERVICE_H

#include "ipc/buffer.h"
#include "ipc/frame.h"
#include "specd/ipc.h"

typedef struct specd_ipc_draft_out {
    size_t n;
    uint32_t tokens[SPECD_IPC_MAX_DRAFT];
    int tree; /* parents[] valid */
    int32_t parents[SPECD_IPC_MAX_DRAFT];
    /* The draft distributions, when the proposer sampled: rows [n, vocab] f32 at offset 0 of
     * q_buffer (the proposer's own buffer, borrowed until the reply is sent), published as
     * content q_seq. NULL (the default) = none. */
    const specd_ipc_buffer *q_buffer;
    uint64_t q_seq;
} specd_ipc_draft_out;

typedef struct specd_ipc_handlers {
    void *user;
    /* owner: the peer session the request came from (see above). */
    specd_status (*open_seq)(void *user, uint64_t owner, const SpecdWire__OpenSeq *m,
                             specd_error *err);
    specd_status (*close_seq)(void *user, uint64_t owner, uint64_t seq_id, specd_error *err);
    specd_status (*commit)(void *user, uint64_t owner, uint64_t seq_id, const uint32_t *tokens,
                           size_t n, int has_rollback, uint64_t rollback_to, specd_error *err);
    specd_status (*propose)(void *user, uint64_t owner, const SpecdWire__Propose *m,
                            specd_ipc_draft_out *out, specd_error *err);
    /* logits: the resolved target logits ([rows, vocab], rows = n_draft + 1) or the inline ones;
     * q: the resolved draft distributions ([n_draft, vocab]) or NULL. */
    specd_status (*verify)(void *user, uint64_t owner, const SpecdWire__Verify *m,
                           const specd_ipc_view *logits, const specd_ipc_view *q,
                           specd_ipc_verify_result *out, specd_error *err);
    specd_status (*seq_info)(void *user, uint64_t owner, uint64_t seq_id, uint64_t *length,
                             uint64_t *hash, specd_error *err);
    uint64_t (*sequences_open)(void *user);
    /* The peer session ended: release everything of owner. */
    void (*peer_gone)(void *user, uint64_t owner);
} specd_ipc_handlers;

typedef struct specd_ipc_service_params {
    specd_ipc_role role;
    specd_ipc_fingerprint model;
    const char *endpoint; /* NULL = default for the role's name */
    void *zmq_context;    /* borrowed; NULL = own */
    int hwm;
    size_t max_frame;
    int heartbeat_ivl_ms, heartbeat_timeout_ms;
    int send_timeout_ms;
    int drain_linger_ms;      /* how long replies may take to flush at shutdown */
    const char *curve_secret; /* tcp:// only: the server's secret key (Z85) */
    /* tcp:// only: public keys (Z85) of the clients admitted; none = any client that completes
     * the CURVE handshake (i.e. knows the server key). Needs the service's own zmq context or
     * no other ZAP handler in the shared one. */
    const char *const *curve_clients;
    size_t n_curve_clients;
    size_t max_buffers;          /* all peers together */
    size_t max_buffers_per_peer; /* 0 = max_buffers */
    size_t max_peers;
    /* CUDA IPC buffers: opened on this device only (a buffer of another device is refused before
     * any CUDA call); -1 (the default) refuses them, for a daemon that reads host memory only. */
    int32_t cuda_device;
} specd_ipc_service_params;

specd_ipc_service_params specd_ipc_service_default_params(specd_ipc_role role);

typedef struct specd_ipc_service specd_ipc_service;

/* Binds the endpoint. Caller owns *out. */
specd_status specd_ipc_service_create(const specd_ipc_service_params *p,
                                      const specd_ipc_handlers *h, specd_ipc_service **out,
                                      specd_error *err);
void specd_ipc_service_destroy(specd_ipc_service *svc);
const char *specd_ipc_service_endpoint(const specd_ipc_service *svc);

/* Serves until stop_fd is readable (stop_fd < 0: until *stop_flag is set, checked every
 * poll_ms). Returns SPECD_OK after a drain. */
specd_status specd_ipc_service_run(specd_ipc_service *svc, int stop_fd,
                                   const volatile int *stop_flag, int poll_ms, specd_error *err);
/* Handles at most one pending request (waiting up to timeout_ms); *handled = 1 if one was. */
specd_status specd_ipc_service_poll_once(specd_ipc_service *svc, int timeout_ms, int *handled,
                                         specd_error *err);

#endif
