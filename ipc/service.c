#include "ipc/service.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "ipc/zap.h"

#define RID_MAX 255

/* One peer session: the connection it is bound to (routing id and the socket's fd, which the
 * monitor names when the connection closes) and the owner number its state is kept under. */
typedef struct peer {
    size_t len;
    uint8_t rid[RID_MAX];
    int fd;
    uint64_t owner;
    uint64_t last_ns;
} peer;

/* Storage for one reply: every body it may point into. */
typedef struct reply {
    SpecdWire__Envelope env;
    SpecdWire__HelloOk hello_ok;
    SpecdWire__Ack ack;
    SpecdWire__Pong pong;
    SpecdWire__Error error;
    specd_error error_text;
    SpecdWire__ErrorReason error_reason; /* set by dispatch where the peer can act on it */
    SpecdWire__Stats stats;
    SpecdWire__SeqInfo seq_info;
    SpecdWire__Draft draft;
    specd_ipc_draft_out draft_out;
    SpecdWire__BufferRef q_ref;
    SpecdWire__BufferDesc q_desc;
    uint64_t q_shape[2];
    SpecdWire__Result result;
    specd_ipc_verify_result result_out;
    SpecdWire__PositionStat pos[SPECD_IPC_MAX_DRAFT + 1];
    SpecdWire__PositionStat *pos_ptr[SPECD_IPC_MAX_DRAFT + 1];
} reply;

struct specd_ipc_service {
    specd_ipc_service_params p;
    specd_ipc_handlers h;
    void *ctx;
    int own_ctx;
    void *sock;
    void *monitor; /* PAIR socket receiving the ROUTER's connection events */
    int bound;     /* the endpoint is ours: an ipc:// socket file is removed at destroy */
    char endpoint[256];
    specd_ipc_decoder *dec;
    specd_ipc_buffer_table *buffers;
    specd_ipc_zap *zap;
    uint64_t instance;
    uint64_t started_ns;
    uint64_t requests, errors, proposes, verifies, commits;
    peer *peers;
    size_t n_peers;
    uint64_t next_owner;
    reply r;
    uint8_t rid[RID_MAX];
    size_t rid_len;
    int src_fd;   /* the connection the request came on */
    peer *caller; /* its session, once it has said Hello */
};

static specd_status monitor_start(specd_ipc_service *s, specd_error *err);

/* libzmq's ipc:// bind replaces a socket file that exists, which would silently cut off a daemon
 * still serving there: refuse when something answers on it (a file nobody listens on is stale and
 * may be replaced). */
static specd_status check_endpoint_free(const char *ep, specd_error *err) {
    if (strncmp(ep, "ipc://", 6) != 0) return SPECD_OK;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(ep + 6) >= sizeof a.sun_path) return SPECD_OK; /* the bind reports it */
    strcpy(a.sun_path, ep + 6);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return SPECD_OK;
    int used = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    if (used)
        return specd_fail(err, SPECD_E_STATE, "endpoint %s is in use by a running daemon", ep);
    return SPECD_OK;
}

specd_ipc_service_params specd_ipc_service_default_params(specd_ipc_role role) {
    specd_ipc_service_params p = {0};
    p.role = role;
    p.hwm = 64;
    p.max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    /* No ZMTP heartbeats and no blocking sends on the daemon side: see service.h. */
    p.heartbeat_ivl_ms = 0;
    p.heartbeat_timeout_ms = 0;
    p.send_timeout_ms = 0;
    p.drain_linger_ms = 1000;
    p.max_buffers = 256;
    p.max_buffers_per_peer = 8;
    p.max_peers = 256;
    p.cuda_device = -1;
    return p;
}

specd_status specd_ipc_service_create(const specd_ipc_service_params *p,
                                      const specd_ipc_handlers *h, specd_ipc_service **out,
                                      specd_error *err) {
    if (!p || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "service_create: NULL argument");
    if (p->role != SPECD_IPC_ROLE_DRAFTER && p->role != SPECD_IPC_ROLE_VERIFIER)
        return specd_fail(err, SPECD_E_INVALID_ARG, "service_create: role %d", (int)p->role);
    if (p->model.vocab_size == 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "service_create: vocab_size 0");
    specd_ipc_service *s = specd_alloc_array(1, sizeof *s);
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "service_create: out of memory");
    s->p = *p;
    if (h) s->h = *h;
    if (s->p.max_frame == 0) s->p.max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    if (s->p.max_buffers == 0) s->p.max_buffers = 256;
    if (s->p.max_peers == 0) s->p.max_peers = 256;
    s->peers = specd_alloc_array(s->p.max_peers, sizeof *s->peers);
    if (getrandom(&s->instance, sizeof s->instance, 0) != (ssize_t)sizeof s->instance)
        s->instance = specd_now_ns();
    s->started_ns = specd_now_ns();
    specd_status st = SPECD_OK;
    if (p->endpoint) {
        if (strlen(p->endpoint) >= sizeof s->endpoint)
            st = specd_fail(err, SPECD_E_INVALID_ARG, "endpoint too long");
        else
            strcpy(s->endpoint, p->endpoint);
    } else {
        st = specd_ipc_default_endpoint(p->role == SPECD_IPC_ROLE_DRAFTER ? "drafter" : "verifier",
                                        s->endpoint, sizeof s->endpoint, err);
    }
    if (st == SPECD_OK) st = specd_ipc_decoder_create(s->p.max_frame, &s->dec, err);
    if (st == SPECD_OK && !s->peers) st = specd_fail(err, SPECD_E_NOMEM, "service: out of memory");
    if (st == SPECD_OK) st = specd_ipc_buffer_table_create(s->p.max_buffers, &s->buffers, err);
    if (st == SPECD_OK) specd_ipc_buffer_table_set_quota(s->buffers, s->p.max_buffers_per_peer);
    if (st == SPECD_OK) specd_ipc_buffer_table_set_cuda_device(s->buffers, s->p.cuda_device);
    if (st == SPECD_OK) {
        s->ctx = p->zmq_context;
        if (!s->ctx) {
            s->ctx = zmq_ctx_new();
            s->own_ctx = 1;
            if (!s->ctx) st = specd_fail(err, SPECD_E_IO, "zmq_ctx_new: %s", zmq_strerror(errno));
        }
    }
    if (st == SPECD_OK && p->n_curve_clients) {
        if (!p->curve_secret)
            st = specd_fail(err, SPECD_E_INVALID_ARG, "client keys given without a server key");
        else
            st = specd_ipc_zap_start(s->ctx, p->curve_clients, p->n_curve_clients, &s->zap, err);
    }
    if (st == SPECD_OK) {
        specd_ipc_sockopts o = {.hwm = s->p.hwm,
                                .max_frame = s->p.max_frame,
                                .heartbeat_ivl_ms = s->p.heartbeat_ivl_ms,
                                .heartbeat_timeout_ms = s->p.heartbeat_timeout_ms,
                                .send_timeout_ms = s->p.send_timeout_ms,
                                .linger_ms = s->p.drain_linger_ms,
                                .curve_server = p->curve_secret != NULL,
                                .curve_secret = p->curve_secret};
        st = check_endpoint_free(s->endpoint, err);
        if (st == SPECD_OK)
            st = specd_ipc_socket_open(s->ctx, ZMQ_ROUTER, s->endpoint, &o, &s->sock, err);
        s->bound = st == SPECD_OK;
    }
    if (st == SPECD_OK) st = monitor_start(s, err);
    if (st != SPECD_OK) {
        specd_ipc_service_destroy(s);
        return st;
    }
    *out = s;
    return SPECD_OK;
}

void specd_ipc_service_destroy(specd_ipc_service *s) {
    if (!s) return;
    if (s->sock && s->monitor) zmq_socket_monitor(s->sock, NULL, 0);
    if (s->monitor) {
        int zero = 0;
        zmq_setsockopt(s->monitor, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(s->monitor);
    }
    if (s->sock) zmq_close(s->sock); /* lingers up to drain_linger_ms to flush replies */
    if (s->bound && strncmp(s->endpoint, "ipc://", 6) == 0) unlink(s->endpoint + 6);
    specd_ipc_zap_stop(s->zap);
    if (s->own_ctx && s->ctx) zmq_ctx_term(s->ctx);
    specd_ipc_buffer_table_destroy(s->buffers);
    specd_ipc_decoder_destroy(s->dec);
    specd_free(s->peers);
    specd_free(s);
}

const char *specd_ipc_service_endpoint(const specd_ipc_service *s) {
    return s->endpoint;
}

static peer *peer_of_caller(specd_ipc_service *s) {
    for (size_t i = 0; i < s->n_peers; i++) {
        peer *p = &s->peers[i];
        if (p->len == s->rid_len && memcmp(p->rid, s->rid, s->rid_len) == 0 &&
            (p->fd < 0 || s->src_fd < 0 || p->fd == s->src_fd))
            return p;
    }
    return NULL;
}

/* Ends a peer session and releases what it held. */
static void peer_drop(specd_ipc_service *s, peer *p, const char *why) {
    size_t bufs = specd_ipc_buffer_table_detach_owner(s->buffers, p->owner);
    if (s->h.peer_gone) s->h.peer_gone(s->h.user, p->owner);
    specd_log(SPECD_LOG_DEBUG, "peer session %llu ended (%s): %zu buffer(s) released",
              (unsigned long long)p->owner, why, bufs);
    if (s->caller == p) s->caller = NULL;
    *p = s->peers[--s->n_peers];
}

/* Hello: a new session for this connection (a repeated Hello starts over). When the table is
 * full the session idle longest gives way; it finds out at its next request and replays. */
static void peer_add(specd_ipc_service *s) {
    peer *old = peer_of_caller(s);
    if (old) peer_drop(s, old, "said hello again");
    if (s->n_peers == s->p.max_peers) {
        peer *idle = &s->peers[0];
        for (size_t i = 1; i < s->n_peers; i++)
            if (s->peers[i].last_ns < idle->last_ns) idle = &s->peers[i];
        peer_drop(s, idle, "evicted by a newer peer");
    }
    peer *p = &s->peers[s->n_peers++];
    p->len = s->rid_len;
    memcpy(p->rid, s->rid, s->rid_len);
    p->fd = s->src_fd;
    p->owner = ++s->next_owner;
    p->last_ns = specd_now_ns();
    s->caller = p;
}

/* The ROUTER's connection events: a closed connection ends the sessions bound to its fd (an
 * accepted one too: the fd number was reused, so nothing bound to it can still be alive). The
 * events of a connection are queued before its fd is closed, so draining them before a request
 * is looked up never confuses a new connection with an old one on the same fd number. */
static void monitor_drain(specd_ipc_service *s) {
    if (!s->monitor) return;
    for (;;) {
        zmq_msg_t ev, addr;
        zmq_msg_init(&ev);
        if (zmq_msg_recv(&ev, s->monitor, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&ev);
            return;
        }
        uint16_t event = 0;
        int32_t fd = -1;
        if (zmq_msg_size(&ev) >= 6) {
            memcpy(&event, zmq_msg_data(&ev), 2);
            memcpy(&fd, (uint8_t *)zmq_msg_data(&ev) + 2, 4);
        }
        int more = zmq_msg_more(&ev);
        zmq_msg_close(&ev);
        if (more) {
            zmq_msg_init(&addr);
            zmq_msg_recv(&addr, s->monitor, 0);
            zmq_msg_close(&addr);
        }
        if (event != ZMQ_EVENT_DISCONNECTED && event != ZMQ_EVENT_ACCEPTED) continue;
        for (size_t i = 0; i < s->n_peers;) {
            if (s->peers[i].fd == fd)
                peer_drop(s, &s->peers[i], event == ZMQ_EVENT_DISCONNECTED ? "disconnected"
                                                                          : "connection replaced");
            else
                i++;
        }
    }
}

static specd_status monitor_start(specd_ipc_service *s, specd_error *err) {
    if (strncmp(s->endpoint, "inproc://", 9) == 0) return SPECD_OK; /* no fds, no events */
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://specd-monitor-%p", (void *)s);
    if (zmq_socket_monitor(s->sock, ep, ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_ACCEPTED) != 0)
        return specd_fail(err, SPECD_E_IO, "zmq_socket_monitor: %s", zmq_strerror(errno));
    s->monitor = zmq_socket(s->ctx, ZMQ_PAIR);
    if (!s->monitor || zmq_connect(s->monitor, ep) != 0)
        return specd_fail(err, SPECD_E_IO, "monitor socket: %s", zmq_strerror(errno));
    return SPECD_OK;
}

static void set_body(reply *r, uint64_t id, SpecdWire__Envelope__BodyCase c) {
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    r->env = e;
    r->env.request_id = id;
    r->env.body_case = c;
}

static void reply_ack(reply *r, uint64_t id) {
    SpecdWire__Ack a = SPECD_WIRE__ACK__INIT;
    r->ack = a;
    set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_ACK);
    r->env.ack = &r->ack;
}

static specd_status check_hello(const specd_ipc_service *s, const SpecdWire__Hello *h,
                                specd_error *err) {
    if (h->major != SPECD_IPC_MAJOR)
        return specd_fail(err, SPECD_E_MISMATCH, "protocol major version %u, this daemon speaks %u",
                          h->major, SPECD_IPC_MAJOR);
    if (h->schema_hash != SPECD_IPC_SCHEMA_HASH)
        return specd_fail(err, SPECD_E_MISMATCH, "schema hash %016llx, this daemon has %016llx",
                          (unsigned long long)h->schema_hash,
                          (unsigned long long)SPECD_IPC_SCHEMA_HASH);
    if (h->role != SPECD_WIRE__ROLE__ROLE_HOST)
        return specd_fail(err, SPECD_E_MISMATCH, "hello from role %d, expected a host",
                          (int)h->role);
    if (h->model->vocab_size != s->p.model.vocab_size)
        return specd_fail(err, SPECD_E_MISMATCH, "model vocab size %u, this daemon has %u",
                          h->model->vocab_size, s->p.model.vocab_size);
    if (h->model->tokenizer_hash != s->p.model.tokenizer_hash)
        return specd_fail(err, SPECD_E_MISMATCH, "tokenizer hash %016llx, this daemon has %016llx",
                          (unsigned long long)h->model->tokenizer_hash,
                          (unsigned long long)s->p.model.tokenizer_hash);
    return SPECD_OK;
}

static specd_status do_verify(specd_ipc_service *s, uint64_t owner, const SpecdWire__Verify *v,
                              reply *r, specd_error *err) {
    if (!s->h.verify) return specd_fail(err, SPECD_E_UNSUPPORTED, "verify: no acceptance engine");
    specd_ipc_view view = {0};
    size_t rows = v->n_draft_tokens + 1;
    if (v->target_logits) {
        SPECD_TRY(specd_ipc_buffer_table_resolve(s->buffers, owner, v->target_logits, &view, err));
        if (view.rank != 2 || view.shape[0] != rows || view.shape[1] != s->p.model.vocab_size)
            return specd_fail(err, SPECD_E_MISMATCH,
                              "verify: logits of rank %u, shape [%llu, %llu], want [%zu, %u]",
                              view.rank, (unsigned long long)view.shape[0],
                              (unsigned long long)(view.rank > 1 ? view.shape[1] : 0), rows,
                              s->p.model.vocab_size);
    } else {
        size_t want = rows * (size_t)s->p.model.vocab_size * 4;
        if (v->inline_logits.len != want)
            return specd_fail(err, SPECD_E_MISMATCH, "verify: %zu inline logit bytes, want %zu",
                              v->inline_logits.len, want);
        view.data = v->inline_logits.data;
        view.dtype = SPECD_IPC_F32;
        view.rank = 2;
        view.shape[0] = rows;
        view.shape[1] = s->p.model.vocab_size;
        view.bytes = want;
    }
    for (size_t i = 0; i < v->n_draft_tokens; i++)
        if (v->draft_tokens[i] >= s->p.model.vocab_size)
            return specd_fail(err, SPECD_E_FORMAT, "verify: draft token %zu = %u >= vocab %u", i,
                              v->draft_tokens[i], s->p.model.vocab_size);
    specd_ipc_view qview = {0};
    if (v->q) {
        SPECD_TRY(specd_ipc_buffer_table_resolve(s->buffers, owner, v->q, &qview, err));
        if (qview.rank != 2 || qview.shape[0] != v->n_draft_tokens ||
            qview.shape[1] != s->p.model.vocab_size)
            return specd_fail(err, SPECD_E_MISMATCH, "verify: q of rank %u, want [%zu, %u]",
                              qview.rank, v->n_draft_tokens, s->p.model.vocab_size);
    }
    specd_ipc_verify_result *o = &r->result_out;
    memset(o, 0, sizeof *o);
    SPECD_TRY(s->h.verify(s->h.user, owner, v, &view, v->q ? &qview : NULL, o, err));
    SPECD_TRY(specd_ipc_view_recheck(&view, err));
    if (v->q) SPECD_TRY(specd_ipc_view_recheck(&qview, err));
    if (o->n_emitted > rows || o->accepted > v->n_draft_tokens || o->n_stats > rows)
        return specd_fail(err, SPECD_E_INTERNAL, "verify handler returned %zu tokens",
                          o->n_emitted);
    SpecdWire__Result res = SPECD_WIRE__RESULT__INIT;
    res.seq_id = v->seq_id;
    res.step = v->step;
    res.accepted = o->accepted;
    res.n_emitted = o->n_emitted;
    res.emitted = o->emitted;
    for (size_t i = 0; i < o->n_stats; i++) {
        SpecdWire__PositionStat ps = SPECD_WIRE__POSITION_STAT__INIT;
        ps.accept_prob = o->accept_prob[i];
        ps.accepted = o->position_accepted[i] != 0;
        r->pos[i] = ps;
        r->pos_ptr[i] = &r->pos[i];
    }
    res.n_stats = o->n_stats;
    res.stats = r->pos_ptr;
    r->result = res;
    s->verifies++;
    return SPECD_OK;
}

static specd_status do_propose(specd_ipc_service *s, uint64_t owner, const SpecdWire__Propose *m,
                               reply *r, specd_error *err) {
    if (!s->h.propose) return specd_fail(err, SPECD_E_UNSUPPORTED, "propose: no proposer");
    if (m->n_commit_tokens || m->has_rollback_to) {
        if (!s->h.commit) return specd_fail(err, SPECD_E_UNSUPPORTED, "propose: no commit");
        SPECD_TRY(s->h.commit(s->h.user, owner, m->seq_id, m->commit_tokens,
                              m->n_commit_tokens, m->has_rollback_to, m->rollback_to, err));
        s->commits++;
    }
    specd_ipc_draft_out *o = &r->draft_out;
    o->n = 0;
    o->tree = 0;
    o->q_buffer = NULL;
    SPECD_TRY(s->h.propose(s->h.user, owner, m, o, err));
    if (o->n > SPECD_IPC_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INTERNAL, "proposer returned %zu tokens", o->n);
    SpecdWire__Draft d = SPECD_WIRE__DRAFT__INIT;
    d.seq_id = m->seq_id;
    d.step = m->step;
    d.n_tokens = o->n;
    d.tokens = o->tokens;
    if (o->tree) {
        d.n_parents = o->n;
        d.parents = o->parents;
    }
    if (o->q_buffer && o->n > 0) {
        SpecdWire__BufferRef ref = SPECD_WIRE__BUFFER_REF__INIT;
        r->q_shape[0] = o->n;
        r->q_shape[1] = s->p.model.vocab_size;
        ref.buffer_id = specd_ipc_buffer_id(o->q_buffer);
        ref.n_shape = 2;
        ref.shape = r->q_shape;
        ref.dtype = SPECD_WIRE__DTYPE__DTYPE_F32;
        ref.seq = o->q_seq;
        if ((uint64_t)o->n * s->p.model.vocab_size * sizeof(float) >
            specd_ipc_buffer_size(o->q_buffer))
            return specd_fail(err, SPECD_E_INTERNAL, "propose: q of %zu rows overflows its buffer",
                              o->n);
        r->q_ref = ref;
        specd_ipc_buffer_describe(o->q_buffer, &r->q_desc);
        d.q = &r->q_ref;
        d.q_buffer = &r->q_desc;
    }
    r->draft = d;
    s->proposes++;
    return SPECD_OK;
}

static specd_status check_tokens(const specd_ipc_service *s, const uint32_t *t, size_t n,
                                 const char *what, specd_error *err) {
    for (size_t i = 0; i < n; i++)
        if (t[i] >= s->p.model.vocab_size)
            return specd_fail(err, SPECD_E_FORMAT, "%s: token %zu = %u >= vocab %u", what, i, t[i],
                              s->p.model.vocab_size);
    return SPECD_OK;
}

/* Builds the reply for one decoded request in s->r; returns the failure to send as Error. */
static specd_status dispatch(specd_ipc_service *s, const SpecdWire__Envelope *q, specd_error *err) {
    reply *r = &s->r;
    uint64_t id = q->request_id;
    if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_HELLO) {
        SPECD_TRY(check_hello(s, q->hello, err));
        peer_add(s);
        SpecdWire__HelloOk ok = SPECD_WIRE__HELLO_OK__INIT;
        ok.major = SPECD_IPC_MAJOR;
        ok.schema_hash = SPECD_IPC_SCHEMA_HASH;
        ok.role = s->p.role == SPECD_IPC_ROLE_DRAFTER ? SPECD_WIRE__ROLE__ROLE_DRAFTER
                                                      : SPECD_WIRE__ROLE__ROLE_VERIFIER;
        ok.instance = s->instance;
        r->hello_ok = ok;
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_HELLO_OK);
        r->env.hello_ok = &r->hello_ok;
        return SPECD_OK;
    }
    if (!s->caller) {
        r->error_reason = SPECD_WIRE__ERROR_REASON__REASON_NO_SESSION;
        return specd_fail(err, SPECD_E_STATE, "no session: say hello first");
    }
    uint64_t owner = s->caller->owner;
    switch (q->body_case) {
    case SPECD_WIRE__ENVELOPE__BODY_PING: {
        SpecdWire__Pong p = SPECD_WIRE__PONG__INIT;
        r->pong = p;
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_PONG);
        r->env.pong = &r->pong;
        return SPECD_OK;
    }
    case SPECD_WIRE__ENVELOPE__BODY_STATS_REQUEST: {
        SpecdWire__Stats st = SPECD_WIRE__STATS__INIT;
        st.requests = s->requests;
        st.errors = s->errors;
        st.sequences_open = s->h.sequences_open ? s->h.sequences_open(s->h.user) : 0;
        st.proposes = s->proposes;
        st.verifies = s->verifies;
        st.commits = s->commits;
        st.buffers_attached = specd_ipc_buffer_table_count(s->buffers);
        st.uptime_ns = specd_now_ns() - s->started_ns;
        r->stats = st;
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_STATS);
        r->env.stats = &r->stats;
        return SPECD_OK;
    }
    case SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER:
        /* Shared memory only makes sense for a peer on this machine; a tcp:// peer must not make
         * us open local segments (or /proc/<pid>/fd paths) on its say-so. */
        if (strncmp(s->endpoint, "tcp://", 6) == 0)
            return specd_fail(err, SPECD_E_UNSUPPORTED,
                              "attach_buffer: shared buffers need a local (ipc:// or inproc://) "
                              "peer");
        SPECD_TRY(specd_ipc_buffer_table_attach(s->buffers, owner, q->attach_buffer->desc, err));
        reply_ack(r, id);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_DETACH_BUFFER:
        SPECD_TRY(
            specd_ipc_buffer_table_detach(s->buffers, owner, q->detach_buffer->buffer_id, err));
        reply_ack(r, id);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ:
        if (!s->h.open_seq) return specd_fail(err, SPECD_E_UNSUPPORTED, "open_seq: no handler");
        SPECD_TRY(check_tokens(s, q->open_seq->prompt, q->open_seq->n_prompt, "open_seq", err));
        SPECD_TRY(s->h.open_seq(s->h.user, owner, q->open_seq, err));
        reply_ack(r, id);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_CLOSE_SEQ:
        if (!s->h.close_seq) return specd_fail(err, SPECD_E_UNSUPPORTED, "close_seq: no handler");
        SPECD_TRY(s->h.close_seq(s->h.user, owner, q->close_seq->seq_id, err));
        reply_ack(r, id);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_COMMIT:
        if (!s->h.commit) return specd_fail(err, SPECD_E_UNSUPPORTED, "commit: no handler");
        SPECD_TRY(check_tokens(s, q->commit->tokens, q->commit->n_tokens, "commit", err));
        SPECD_TRY(s->h.commit(s->h.user, owner, q->commit->seq_id, q->commit->tokens,
                              q->commit->n_tokens, q->commit->has_rollback_to,
                              q->commit->rollback_to, err));
        s->commits++;
        reply_ack(r, id);
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_PROPOSE:
        SPECD_TRY(check_tokens(s, q->propose->commit_tokens, q->propose->n_commit_tokens, "propose",
                               err));
        SPECD_TRY(do_propose(s, owner, q->propose, r, err));
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_DRAFT);
        r->env.draft = &r->draft;
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_VERIFY:
        SPECD_TRY(do_verify(s, owner, q->verify, r, err));
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_RESULT);
        r->env.result = &r->result;
        return SPECD_OK;
    case SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO_REQUEST: {
        if (!s->h.seq_info) return specd_fail(err, SPECD_E_UNSUPPORTED, "seq_info: no handler");
        SpecdWire__SeqInfo si = SPECD_WIRE__SEQ_INFO__INIT;
        si.seq_id = q->seq_info_request->seq_id;
        SPECD_TRY(
            s->h.seq_info(s->h.user, owner, si.seq_id, &si.length, &si.tokens_hash, err));
        r->seq_info = si;
        set_body(r, id, SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO);
        r->env.seq_info = &r->seq_info;
        return SPECD_OK;
    }
    default:
        return specd_fail(err, SPECD_E_PROTOCOL, "message kind %d is not a request",
                          (int)q->body_case);
    }
}

specd_status specd_ipc_service_poll_once(specd_ipc_service *s, int timeout_ms, int *handled,
                                         specd_error *err) {
    *handled = 0;
    zmq_pollitem_t item = {.socket = s->sock, .events = ZMQ_POLLIN};
    int rc = zmq_poll(&item, 1, timeout_ms);
    if (rc < 0) {
        if (errno == EINTR) return SPECD_OK;
        return specd_fail(err, SPECD_E_IO, "zmq_poll: %s", zmq_strerror(errno));
    }
    if (rc == 0) return SPECD_OK;
    int n = zmq_recv(s->sock, s->rid, sizeof s->rid, ZMQ_DONTWAIT);
    if (n < 0) return SPECD_OK;
    s->rid_len = (size_t)n > sizeof s->rid ? sizeof s->rid : (size_t)n;
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    int more = 0;
    size_t more_len = sizeof more;
    zmq_getsockopt(s->sock, ZMQ_RCVMORE, &more, &more_len);
    if (!more || zmq_msg_recv(&msg, s->sock, 0) < 0) {
        zmq_msg_close(&msg);
        return SPECD_OK; /* a routing id alone: nothing to answer */
    }
    /* Extra frames are not part of the protocol: read and refuse them. */
    int extra = 0;
    for (;;) {
        zmq_getsockopt(s->sock, ZMQ_RCVMORE, &more, &more_len);
        if (!more) break;
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, s->sock, 0);
        zmq_msg_close(&junk);
        extra = 1;
    }
    *handled = 1;
    s->requests++;
    s->src_fd = zmq_msg_get(&msg, ZMQ_SRCFD);
    monitor_drain(s); /* a closed connection's sessions end before this request is looked up */
    s->caller = peer_of_caller(s);
    if (s->caller) s->caller->last_ns = specd_now_ns();
    const SpecdWire__Envelope *q = NULL;
    specd_error e;
    specd_error_clear(&e);
    specd_status st;
    if (extra)
        st = specd_fail(&e, SPECD_E_FORMAT, "request of more than one frame");
    else
        st = specd_ipc_frame_decode(s->dec, zmq_msg_data(&msg), zmq_msg_size(&msg), &q, &e);
    uint64_t id = q ? q->request_id : 0;
    s->r.error_reason = SPECD_WIRE__ERROR_REASON__REASON_NONE;
    if (st == SPECD_OK) st = dispatch(s, q, &e);
    if (st != SPECD_OK) {
        s->errors++;
        s->r.error_text = e;
        specd_log(SPECD_LOG_DEBUG, "request %llu refused: %s", (unsigned long long)id, e.message);
        specd_ipc_error_body(&s->r.env, &s->r.error, id, st, s->r.error_reason,
                             s->r.error_text.message);
    }
    /* Never blocks: a peer that does not read its replies loses them (its pipe is full, the
     * send fails at once) rather than holding up every other peer. */
    specd_error se;
    if (specd_ipc_send(s->sock, s->rid, s->rid_len, &s->r.env, s->p.max_frame, &se) != SPECD_OK)
        specd_log(SPECD_LOG_DEBUG, "reply to request %llu not sent: %s", (unsigned long long)id,
                  se.message);
    zmq_msg_close(&msg);
    return SPECD_OK;
}

specd_status specd_ipc_service_run(specd_ipc_service *s, int stop_fd, const volatile int *stop_flag,
                                   int poll_ms, specd_error *err) {
    if (poll_ms <= 0) poll_ms = 100;
    for (;;) {
        zmq_pollitem_t items[2] = {{.socket = s->sock, .events = ZMQ_POLLIN},
                                   {.socket = NULL, .fd = stop_fd, .events = ZMQ_POLLIN}};
        int rc = zmq_poll(items, stop_fd >= 0 ? 2 : 1, poll_ms);
        monitor_drain(s); /* sessions of peers that left are released while idle too */
        if (rc < 0 && errno != EINTR)
            return specd_fail(err, SPECD_E_IO, "zmq_poll: %s", zmq_strerror(errno));
        int stopping = (stop_fd >= 0 && rc > 0 && (items[1].revents & ZMQ_POLLIN)) ||
                       (stop_flag && *stop_flag);
        if (stopping) break;
        if (rc > 0 && (items[0].revents & ZMQ_POLLIN)) {
            int handled;
            SPECD_TRY(specd_ipc_service_poll_once(s, 0, &handled, err));
        }
    }
    /* Drain: answer everything already sent to us, until the socket has been quiet for 50 ms
     * (requests still in the kernel's socket buffer count as received); the caller's destroy
     * then lingers so the replies leave. */
    size_t drained = 0;
    uint64_t give_up = specd_now_ns() + 2000000000ull; /* a host that never stops sending */
    for (;;) {
        int handled = 0;
        SPECD_TRY(specd_ipc_service_poll_once(s, 50, &handled, err));
        if (!handled || specd_now_ns() > give_up) break;
        drained++;
    }
    specd_log(SPECD_LOG_INFO, "stopping: drained %zu request(s)", drained);
    return SPECD_OK;
}
