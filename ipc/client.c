/* Host side of the protocol (specd/ipc.h): requests with ids and deadlines, and a session that
 * survives the daemon: on any failure the socket is dropped, and the next attempt says Hello and
 * replays buffers and sequences from the history kept here. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <zmq.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log_internal.h"
#include "common/status_internal.h"
#include "ipc/buffer.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "kernels/cuda/cudart.h"

#define MAX_BUFFERS 16
#define KEY_LEN 41

typedef struct seq_rec {
    uint64_t seq_id;
    specd_ipc_sampling sampling;
    uint64_t seed;
    char policy[65];
    int has_policy;
    uint32_t max_draft;
    specd_accept_rule rule;
    uint32_t *tokens; /* prompt followed by every committed token */
    size_t n, cap;
} seq_rec;

struct specd_ipc_client {
    specd_ipc_params p;
    char endpoint[256];
    char k_server[KEY_LEN], k_public[KEY_LEN], k_secret[KEY_LEN];
    specd_ipc_role peer;
    specd_ipc_fingerprint model;
    void *ctx;
    int own_ctx;
    void *sock;
    specd_ipc_decoder *dec;
    uint64_t next_id;
    int up;
    uint64_t last_attempt_ns;
    int attempted;
    uint64_t sessions;
    uint64_t instance;
    seq_rec *seqs;
    size_t n_seqs, cap_seqs;
    specd_ipc_buffer *bufs[MAX_BUFFERS];
    size_t n_bufs;
    /* The wire's ErrorReason of the last exchange's Error reply (REASON_NONE otherwise). */
    SpecdWire__ErrorReason refused;
    /* Buffers the daemon owns and we map (a drafter's draft distributions): made on first use;
     * q_buffer_id is the one attached now (0 = none). */
    specd_ipc_buffer_table *peer_bufs;
    uint64_t q_buffer_id;
    int q_warned;
    /* The last proposal's q left on the device (specd_ipc_client_propose_q_device): its rows in
     * the mapping of the drafter's CUDA buffer, and their drafted tokens for the checks of a
     * later fetch; q_dev NULL = none. Dropped by the next request. */
    const float *q_dev;
    int q_dev_device;
    size_t q_dev_rows;
    uint32_t q_dev_tokens[SPECD_IPC_MAX_DRAFT];
};

specd_ipc_params specd_ipc_default_params(void) {
    specd_ipc_params p = {0};
    p.timeout_ms = 1000;
    p.retry_ms = 200;
    p.hwm = 64;
    p.max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    p.heartbeat_ivl_ms = 250;
    p.heartbeat_timeout_ms = 1500;
    return p;
}

static specd_status copy_key(char *dst, const char *src, const char *what, specd_error *err) {
    if (!src) return SPECD_OK;
    if (strlen(src) != 40)
        return specd_fail(err, SPECD_E_INVALID_ARG, "%s: not 40 Z85 chars", what);
    memcpy(dst, src, KEY_LEN);
    return SPECD_OK;
}

specd_status specd_ipc_client_create(const specd_ipc_params *params, specd_ipc_role peer,
                                     const specd_ipc_fingerprint *model, specd_ipc_client **out,
                                     specd_error *err) {
    if (!params || !model || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "client_create: NULL argument");
    if (peer != SPECD_IPC_ROLE_DRAFTER && peer != SPECD_IPC_ROLE_VERIFIER)
        return specd_fail(err, SPECD_E_INVALID_ARG, "client_create: peer role %d", (int)peer);
    if (params->timeout_ms <= 0 || params->retry_ms < 0 || params->hwm <= 0 ||
        model->vocab_size == 0)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "client_create: timeout_ms, hwm and vocab_size must be > 0");
    specd_ipc_client *c = specd_alloc_array(1, sizeof *c);
    if (!c) return specd_fail(err, SPECD_E_NOMEM, "client_create: out of memory");
    c->p = *params;
    if (c->p.max_frame == 0) c->p.max_frame = SPECD_IPC_FRAME_MAX_DEFAULT;
    c->peer = peer;
    c->model = *model;
    const char *name =
        params->name ? params->name : (peer == SPECD_IPC_ROLE_DRAFTER ? "drafter" : "verifier");
    specd_status st = SPECD_OK;
    if (params->endpoint) {
        if (strlen(params->endpoint) >= sizeof c->endpoint)
            st = specd_fail(err, SPECD_E_INVALID_ARG, "endpoint too long");
        else
            strcpy(c->endpoint, params->endpoint);
    } else {
        st = specd_ipc_default_endpoint(name, c->endpoint, sizeof c->endpoint, err);
    }
    if (st == SPECD_OK) st = copy_key(c->k_server, params->curve_server_public, "server key", err);
    if (st == SPECD_OK) st = copy_key(c->k_public, params->curve_public, "public key", err);
    if (st == SPECD_OK) st = copy_key(c->k_secret, params->curve_secret, "secret key", err);
    int have_curve = c->k_server[0] && c->k_public[0] && c->k_secret[0];
    if (st == SPECD_OK) st = specd_ipc_endpoint_check(c->endpoint, have_curve, err);
    if (st == SPECD_OK && strncmp(c->endpoint, "inproc://", 9) == 0 && !params->zmq_context)
        st = specd_fail(err, SPECD_E_INVALID_ARG, "inproc:// needs the service's zmq_context");
    if (st == SPECD_OK) st = specd_ipc_decoder_create(c->p.max_frame, &c->dec, err);
    if (st == SPECD_OK) {
        c->ctx = params->zmq_context;
        if (!c->ctx) {
            c->ctx = zmq_ctx_new();
            c->own_ctx = 1;
            if (!c->ctx) st = specd_fail(err, SPECD_E_IO, "zmq_ctx_new: %s", zmq_strerror(errno));
        }
    }
    if (st != SPECD_OK) {
        specd_ipc_client_destroy(c);
        return st;
    }
    *out = c;
    return SPECD_OK;
}

static void drop(specd_ipc_client *c) {
    if (c->sock) {
        int zero = 0;
        zmq_setsockopt(c->sock, ZMQ_LINGER, &zero, sizeof zero);
        zmq_close(c->sock);
        c->sock = NULL;
    }
    c->up = 0;
}

void specd_ipc_client_destroy(specd_ipc_client *c) {
    if (!c) return;
    drop(c);
    if (c->own_ctx && c->ctx) zmq_ctx_term(c->ctx);
    for (size_t i = 0; i < c->n_seqs; i++)
        specd_free(c->seqs[i].tokens);
    specd_free(c->seqs);
    specd_ipc_buffer_table_destroy(c->peer_bufs);
    specd_ipc_decoder_destroy(c->dec);
    specd_free(c);
}

int specd_ipc_client_connected(const specd_ipc_client *c) {
    return c && c->up;
}
uint64_t specd_ipc_client_sessions(const specd_ipc_client *c) {
    return c ? c->sessions : 0;
}

static void init_env(SpecdWire__Envelope *e, SpecdWire__Envelope__BodyCase body) {
    SpecdWire__Envelope init = SPECD_WIRE__ENVELOPE__INIT;
    *e = init;
    e->body_case = body;
}

/* One request/reply on the current socket. On a transport failure the socket is dropped. */
static specd_status exchange(specd_ipc_client *c, SpecdWire__Envelope *q,
                             SpecdWire__Envelope__BodyCase expect, const SpecdWire__Envelope **out,
                             specd_error *err) {
    c->refused = SPECD_WIRE__ERROR_REASON__REASON_NONE;
    c->q_dev = NULL; /* the drafter may rewrite its q buffer once it has this request */
    if (!c->sock) return specd_fail(err, SPECD_E_PEER, "not connected");
    q->request_id = ++c->next_id;
    specd_status st = specd_ipc_send(c->sock, NULL, 0, q, c->p.max_frame, err);
    if (st != SPECD_OK) {
        drop(c);
        return st;
    }
    uint64_t deadline = specd_now_ns() + (uint64_t)c->p.timeout_ms * 1000000u;
    for (;;) {
        uint64_t now = specd_now_ns();
        if (now >= deadline) {
            drop(c);
            return specd_fail(err, SPECD_E_TIMEOUT, "%s at %s: no answer to request %llu in %d ms",
                              c->peer == SPECD_IPC_ROLE_DRAFTER ? "drafter" : "verifier",
                              c->endpoint, (unsigned long long)q->request_id, c->p.timeout_ms);
        }
        zmq_pollitem_t item = {.socket = c->sock, .events = ZMQ_POLLIN};
        long wait_ms = (long)((deadline - now + 999999u) / 1000000u);
        int rc = zmq_poll(&item, 1, wait_ms);
        if (rc < 0 && errno != EINTR) {
            drop(c);
            return specd_fail(err, SPECD_E_IO, "zmq_poll: %s", zmq_strerror(errno));
        }
        if (rc <= 0) continue;
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, c->sock, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            continue;
        }
        const SpecdWire__Envelope *r = NULL;
        specd_error derr;
        st = specd_ipc_frame_decode(c->dec, zmq_msg_data(&msg), zmq_msg_size(&msg), &r, &derr);
        zmq_msg_close(&msg);
        if (st != SPECD_OK) {
            drop(c);
            return specd_fail(err, SPECD_E_PROTOCOL, "bad reply: %s", derr.message);
        }
        /* Replies are in order on one socket; a different id is a late answer to a request we
         * gave up on, and is never taken for this one. */
        if (r->request_id != q->request_id) continue;
        if (r->body_case == SPECD_WIRE__ENVELOPE__BODY_ERROR) {
            if (r->error->has_reason) c->refused = r->error->reason;
            return specd_fail(err, (specd_status)r->error->code, "%s refused: %s",
                              c->peer == SPECD_IPC_ROLE_DRAFTER ? "drafter" : "verifier",
                              r->error->message);
        }
        if (r->body_case != expect) {
            drop(c);
            return specd_fail(err, SPECD_E_PROTOCOL, "reply of kind %d to a request expecting %d",
                              (int)r->body_case, (int)expect);
        }
        *out = r;
        return SPECD_OK;
    }
}

static specd_status connect_now(specd_ipc_client *c, specd_error *err);

/* The daemon answered that this connection has no session (it restarted between two of our
 * requests, so it applied nothing): decided by the reply's reason code, never its text. */
static int lost_session(const specd_ipc_client *c, specd_status st) {
    return st != SPECD_OK && c->refused == SPECD_WIRE__ERROR_REASON__REASON_NO_SESSION;
}

/* What a request does when it meets a lost session. */
typedef enum replay_then {
    NO_REPLAY,   /* part of a replay itself: the lost session is the error */
    THEN_DONE,   /* recorded here before it was sent, so the replay itself delivered it */
    THEN_RESEND, /* sent once more on the new session */
} replay_then;

/* Every request within the session goes through here, on the current connection (callers
 * connect first, as each needs). If the daemon lost our session, says Hello and replays the
 * session from the history kept here, then per `then`; before resending, *replayed (when not
 * NULL) is zeroed: a count of items the replay already delivered (a Propose's commit tokens).
 * *out (when not NULL) is set only when a reply was received, never for THEN_DONE's replay. */
static specd_status request(specd_ipc_client *c, SpecdWire__Envelope *q,
                            SpecdWire__Envelope__BodyCase expect, replay_then then,
                            size_t *replayed, const SpecdWire__Envelope **out, specd_error *err) {
    specd_error local;
    if (!err) err = &local;
    const SpecdWire__Envelope *r = NULL;
    specd_status st = exchange(c, q, expect, &r, err);
    if (then != NO_REPLAY && lost_session(c, st)) {
        SPECD_TRY(connect_now(c, err));
        if (then == THEN_DONE) return SPECD_OK;
        if (replayed) *replayed = 0;
        st = exchange(c, q, expect, &r, err);
    }
    if (st == SPECD_OK && out) *out = r;
    return st;
}

/* request() after connecting if needed, for requests the replay does not carry. */
static specd_status request_connected(specd_ipc_client *c, SpecdWire__Envelope *q,
                                      SpecdWire__Envelope__BodyCase expect,
                                      const SpecdWire__Envelope **out, specd_error *err) {
    SPECD_TRY(specd_ipc_client_connect(c, err));
    return request(c, q, expect, THEN_RESEND, NULL, out, err);
}

static specd_status send_open(specd_ipc_client *c, const seq_rec *s, replay_then then,
                              specd_error *err) {
    SpecdWire__SamplingParams sp = SPECD_WIRE__SAMPLING_PARAMS__INIT;
    sp.temperature = s->sampling.temperature;
    sp.has_top_k = sp.has_top_p = sp.has_min_p = 1;
    sp.top_k = s->sampling.top_k;
    sp.top_p = s->sampling.top_p;
    sp.min_p = s->sampling.min_p;
    SpecdWire__OpenSeq o = SPECD_WIRE__OPEN_SEQ__INIT;
    o.seq_id = s->seq_id;
    o.n_prompt = s->n;
    o.prompt = s->tokens;
    o.sampling = &sp;
    o.seed = s->seed;
    o.policy = s->has_policy ? (char *)s->policy : NULL;
    o.has_max_draft = s->max_draft != 0;
    o.max_draft = s->max_draft;
    o.has_rule = 1;
    o.rule = specd_ipc_rule_to_wire(s->rule);
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ);
    e.open_seq = &o;
    return request(c, &e, SPECD_WIRE__ENVELOPE__BODY_ACK, then, NULL, NULL, err);
}

static specd_status send_attach(specd_ipc_client *c, specd_ipc_buffer *b, replay_then then,
                                specd_error *err) {
    SpecdWire__BufferDesc d;
    specd_ipc_buffer_describe(b, &d);
    SpecdWire__AttachBuffer a = SPECD_WIRE__ATTACH_BUFFER__INIT;
    a.desc = &d;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER);
    e.attach_buffer = &a;
    SPECD_TRY(request(c, &e, SPECD_WIRE__ENVELOPE__BODY_ACK, then, NULL, NULL, err));
    specd_ipc_buffer_shared(b);
    return SPECD_OK;
}

/* A killed daemon leaves its socket file behind; probing it tells "nobody there" at once instead
 * of after a full timeout, so the host falls back without stalling. */
static int listening(const char *path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof a.sun_path) return 0;
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return 1; /* cannot tell: let the real connection decide */
    int ok = connect(fd, (struct sockaddr *)&a, sizeof a) == 0;
    close(fd);
    return ok;
}

/* Hello and replay, on a fresh socket. */
static specd_status connect_now(specd_ipc_client *c, specd_error *err) {
    drop(c);
    if (c->peer_bufs) specd_ipc_buffer_table_detach_owner(c->peer_bufs, 0); /* the old daemon's */
    c->q_buffer_id = 0;
    c->q_dev = NULL;
    c->last_attempt_ns = specd_now_ns();
    c->attempted = 1;
    if (strncmp(c->endpoint, "ipc://", 6) == 0 && !listening(c->endpoint + 6))
        return specd_fail(err, SPECD_E_PEER, "no daemon listening at %s", c->endpoint);
    int curve = c->k_server[0] != 0;
    specd_ipc_sockopts o = {.hwm = c->p.hwm,
                            .max_frame = c->p.max_frame,
                            .heartbeat_ivl_ms = c->p.heartbeat_ivl_ms,
                            .heartbeat_timeout_ms = c->p.heartbeat_timeout_ms,
                            .send_timeout_ms = c->p.timeout_ms,
                            .linger_ms = 0,
                            .curve_server_public = curve ? c->k_server : NULL,
                            .curve_public = curve ? c->k_public : NULL,
                            .curve_secret = curve ? c->k_secret : NULL};
    SPECD_TRY(specd_ipc_socket_open(c->ctx, ZMQ_DEALER, c->endpoint, &o, &c->sock, err));
    SpecdWire__ModelFingerprint m = SPECD_WIRE__MODEL_FINGERPRINT__INIT;
    m.vocab_size = c->model.vocab_size;
    m.tokenizer_hash = c->model.tokenizer_hash;
    SpecdWire__Hello h = SPECD_WIRE__HELLO__INIT;
    h.major = SPECD_IPC_MAJOR;
    h.schema_hash = SPECD_IPC_SCHEMA_HASH;
    h.model = &m;
    h.role = SPECD_WIRE__ROLE__ROLE_HOST;
    h.has_pid = 1;
    h.pid = (uint32_t)getpid();
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_HELLO);
    e.hello = &h;
    const SpecdWire__Envelope *r;
    specd_status st = exchange(c, &e, SPECD_WIRE__ENVELOPE__BODY_HELLO_OK, &r, err);
    if (st == SPECD_OK) {
        int want = c->peer == SPECD_IPC_ROLE_DRAFTER ? SPECD_WIRE__ROLE__ROLE_DRAFTER
                                                     : SPECD_WIRE__ROLE__ROLE_VERIFIER;
        if ((int)r->hello_ok->role != want)
            st = specd_fail(err, SPECD_E_MISMATCH, "%s is a daemon of role %d, not %d", c->endpoint,
                            (int)r->hello_ok->role, want);
        else
            c->instance = r->hello_ok->instance;
    }
    for (size_t i = 0; st == SPECD_OK && i < c->n_bufs; i++) {
        st = send_attach(c, c->bufs[i], NO_REPLAY, err);
        if (st != SPECD_OK && c->sock) {
            specd_log(SPECD_LOG_WARN, "buffer dropped from the session: %s",
                      err ? err->message : "refused");
            c->bufs[i--] = c->bufs[--c->n_bufs];
            st = SPECD_OK;
        }
    }
    for (size_t i = 0; st == SPECD_OK && i < c->n_seqs; i++) {
        st = send_open(c, &c->seqs[i], NO_REPLAY, err);
        if (st != SPECD_OK && c->sock) {
            /* Answered and refused (a policy this daemon lacks, ...): it cannot be opened there,
             * and keeping it would fail every later reconnect. */
            specd_log(SPECD_LOG_WARN, "sequence %llu dropped from the session: %s",
                      (unsigned long long)c->seqs[i].seq_id, err ? err->message : "refused");
            specd_free(c->seqs[i].tokens);
            c->seqs[i--] = c->seqs[--c->n_seqs];
            st = SPECD_OK;
        }
    }
    if (st != SPECD_OK) {
        drop(c);
        return st;
    }
    c->up = 1;
    c->sessions++;
    if (c->sessions > 1)
        specd_log(SPECD_LOG_INFO, "reconnected to %s (session %llu, %zu sequence(s) replayed)",
                  c->endpoint, (unsigned long long)c->sessions, c->n_seqs);
    return SPECD_OK;
}

specd_status specd_ipc_client_connect(specd_ipc_client *c, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "client is NULL");
    if (c->up) return SPECD_OK;
    uint64_t since = specd_now_ns() - c->last_attempt_ns;
    if (c->attempted && since < (uint64_t)c->p.retry_ms * 1000000u)
        return specd_fail(err, SPECD_E_PEER, "%s is down; next attempt in %llu ms", c->endpoint,
                          (unsigned long long)((uint64_t)c->p.retry_ms - since / 1000000u));
    return connect_now(c, err);
}

static seq_rec *find_seq(const specd_ipc_client *c, uint64_t id) {
    for (size_t i = 0; i < c->n_seqs; i++)
        if (c->seqs[i].seq_id == id) return &c->seqs[i];
    return NULL;
}

static specd_status append(seq_rec *s, const uint32_t *t, size_t n, specd_error *err) {
    size_t need;
    if (!specd_add_ok(s->n, n, &need))
        return specd_fail(err, SPECD_E_INVALID_ARG, "sequence too long");
    if (need > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < need)
            cap *= 2;
        uint32_t *nt = specd_alloc_array(cap, sizeof *nt);
        if (!nt) return specd_fail(err, SPECD_E_NOMEM, "history of %zu tokens", cap);
        if (s->n) memcpy(nt, s->tokens, s->n * sizeof *nt);
        specd_free(s->tokens);
        s->tokens = nt;
        s->cap = cap;
    }
    if (n) memcpy(s->tokens + s->n, t, n * sizeof *t);
    s->n = need;
    return SPECD_OK;
}

static specd_status check_tokens(const specd_ipc_client *c, const uint32_t *t, size_t n,
                                 const char *what, specd_error *err) {
    if (n && !t) return specd_fail(err, SPECD_E_INVALID_ARG, "%s: tokens NULL", what);
    for (size_t i = 0; i < n; i++)
        if (t[i] >= c->model.vocab_size)
            return specd_fail(err, SPECD_E_INVALID_ARG, "%s: token %zu = %u >= vocab %u", what, i,
                              t[i], c->model.vocab_size);
    return SPECD_OK;
}

specd_status specd_ipc_client_open_seq(specd_ipc_client *c, const specd_ipc_seq_params *p,
                                       specd_error *err) {
    if (!c || !p) return specd_fail(err, SPECD_E_INVALID_ARG, "open_seq: NULL argument");
    if (find_seq(c, p->seq_id))
        return specd_fail(err, SPECD_E_STATE, "open_seq: sequence %llu already open",
                          (unsigned long long)p->seq_id);
    SPECD_TRY(check_tokens(c, p->prompt, p->n_prompt, "open_seq", err));
    if (p->policy && strlen(p->policy) > 64)
        return specd_fail(err, SPECD_E_INVALID_ARG, "open_seq: policy name longer than 64");
    if (!(p->sampling.temperature >= 0.0f) ||
        !(p->sampling.top_p > 0.0f && p->sampling.top_p <= 1.0f) ||
        !(p->sampling.min_p >= 0.0f && p->sampling.min_p <= 1.0f) ||
        p->max_draft > SPECD_IPC_MAX_DRAFT || !specd_ipc_rule_valid((int64_t)p->rule))
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "open_seq: temperature >= 0, top_p in (0,1], min_p in [0,1], "
                          "max_draft <= %u",
                          SPECD_IPC_MAX_DRAFT);
    if (c->n_seqs == c->cap_seqs) {
        size_t cap = c->cap_seqs ? 2 * c->cap_seqs : 8;
        seq_rec *ns = specd_alloc_array(cap, sizeof *ns);
        if (!ns) return specd_fail(err, SPECD_E_NOMEM, "open_seq: out of memory");
        if (c->n_seqs) memcpy(ns, c->seqs, c->n_seqs * sizeof *ns);
        specd_free(c->seqs);
        c->seqs = ns;
        c->cap_seqs = cap;
    }
    seq_rec s = {.seq_id = p->seq_id,
                 .sampling = p->sampling,
                 .seed = p->seed,
                 .max_draft = p->max_draft,
                 .rule = p->rule};
    if (p->policy) {
        s.has_policy = 1;
        snprintf(s.policy, sizeof s.policy, "%s", p->policy);
    }
    SPECD_TRY(append(&s, p->prompt, p->n_prompt, err));
    c->seqs[c->n_seqs++] = s;
    /* Recorded first: a daemon that is down now gets it on reconnect. */
    if (!c->up) {
        specd_status st = specd_ipc_client_connect(c, err); /* connecting replays it */
        if (st == SPECD_OK && !find_seq(c, p->seq_id))
            return specd_fail(err, SPECD_E_INVALID_ARG, "open_seq: sequence %llu refused by %s",
                              (unsigned long long)p->seq_id, c->endpoint);
        return st;
    }
    specd_status st = send_open(c, &c->seqs[c->n_seqs - 1], THEN_DONE, err);
    if (st != SPECD_OK && c->up) {
        /* The daemon answered and refused it (bad policy, ...): it is not open anywhere. */
        specd_free(c->seqs[--c->n_seqs].tokens);
    } else if (st == SPECD_OK && !find_seq(c, p->seq_id)) {
        /* a restarted daemon refused it in the replay, which dropped it */
        return specd_fail(err, SPECD_E_INVALID_ARG, "open_seq: sequence %llu refused by %s",
                          (unsigned long long)p->seq_id, c->endpoint);
    }
    return st;
}

specd_status specd_ipc_client_close_seq(specd_ipc_client *c, uint64_t seq_id, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "close_seq: NULL client");
    seq_rec *s = find_seq(c, seq_id);
    if (!s)
        return specd_fail(err, SPECD_E_STATE, "close_seq: sequence %llu not open",
                          (unsigned long long)seq_id);
    specd_free(s->tokens);
    *s = c->seqs[--c->n_seqs];
    if (!c->up) return SPECD_OK; /* a reconnect will not reopen it */
    SpecdWire__CloseSeq m = SPECD_WIRE__CLOSE_SEQ__INIT;
    m.seq_id = seq_id;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_CLOSE_SEQ);
    e.close_seq = &m;
    /* a replay does not reopen it */
    return request(c, &e, SPECD_WIRE__ENVELOPE__BODY_ACK, THEN_DONE, NULL, NULL, err);
}

specd_status specd_ipc_client_commit(specd_ipc_client *c, uint64_t seq_id, const uint32_t *tokens,
                                     size_t n, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "commit: NULL client");
    seq_rec *s = find_seq(c, seq_id);
    if (!s)
        return specd_fail(err, SPECD_E_STATE, "commit: sequence %llu not open",
                          (unsigned long long)seq_id);
    SPECD_TRY(check_tokens(c, tokens, n, "commit", err));
    SPECD_TRY(append(s, tokens, n, err));
    /* Not connected: connecting replays the history, which now includes these tokens. */
    if (!c->up) return specd_ipc_client_connect(c, err);
    SpecdWire__Commit m = SPECD_WIRE__COMMIT__INIT;
    m.seq_id = seq_id;
    m.n_tokens = n;
    m.tokens = (uint32_t *)tokens;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_COMMIT);
    e.commit = &m;
    /* A restarted daemon that refused it gets the whole history (with these tokens) instead. */
    return request(c, &e, SPECD_WIRE__ENVELOPE__BODY_ACK, THEN_DONE, NULL, NULL, err);
}

/* Checks q rows on the host: each row a distribution (finite, >= 0, summing to 1 within 1e-3)
 * under which its drafted token is possible. The bytes come from another process: nothing is
 * trusted. */
static specd_status check_q_rows(const float *q, size_t n, size_t vocab, const uint32_t *tokens,
                                 specd_error *err) {
    for (size_t i = 0; i < n; i++) {
        const float *row = q + i * vocab;
        double sum = 0.0;
        for (size_t x = 0; x < vocab; x++) {
            if (!(row[x] >= 0.0f && row[x] <= 1.0f))
                return specd_fail(err, SPECD_E_PROTOCOL, "draft distribution %zu, token %zu: %g",
                                  i, x, (double)row[x]);
            sum += row[x];
        }
        if (!(sum > 1.0 - 1e-3 && sum < 1.0 + 1e-3) || !(row[tokens[i]] > 0.0f))
            return specd_fail(err, SPECD_E_PROTOCOL,
                              "draft distribution %zu sums to %g, drafted token %u has %g", i,
                              sum, tokens[i], (double)row[tokens[i]]);
    }
    return SPECD_OK;
}

/* Copies n rows of q from the device (device dev) to the host q. */
static specd_status download_q(int dev, const float *q_dev, size_t n, size_t vocab, float *q,
                               specd_error *err) {
    const specd_cudart *rt = specd_cudart_get(NULL); /* loaded: the buffer was opened with it */
    int rc = rt->set_device(dev);
    if (rc == SPECD_CUDA_SUCCESS)
        rc = rt->memcpy(q, q_dev, n * vocab * sizeof(float), SPECD_CUDA_MEMCPY_DEVICE_TO_HOST);
    if (rc != SPECD_CUDA_SUCCESS) {
        (void)rt->get_last_error();
        return specd_fail(err, SPECD_E_IO, "copying draft distributions from CUDA device %d: %s",
                          dev, rt->get_error_string(rc));
    }
    return SPECD_OK;
}

/* A Draft's q rows in the drafter's buffer (mapped on first sight of its id), as a view; a CUDA
 * buffer opens only on want_device when that is >= 0. */
static specd_status map_q(specd_ipc_client *c, const SpecdWire__Draft *d, int want_device,
                          specd_ipc_view *v, specd_error *err) {
    if (strncmp(c->endpoint, "tcp://", 6) == 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "a drafter across tcp:// cannot share its draft distributions");
    const SpecdWire__BufferDesc *desc = d->q_buffer;
    if (desc->kind == SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA && want_device >= 0) {
        int dev = desc->has_cuda_device ? desc->cuda_device : 0;
        if (dev != want_device)
            return specd_fail(err, SPECD_E_MISMATCH,
                              "the drafter's q buffer lives on CUDA device %d; this host works on "
                              "device %d", dev, want_device);
    }
    if (!c->peer_bufs) SPECD_TRY(specd_ipc_buffer_table_create(2, &c->peer_bufs, err));
    if (desc->buffer_id != c->q_buffer_id) {
        /* the drafter replaced its buffer (a larger max_draft): one is mapped at a time */
        if (c->q_buffer_id) specd_ipc_buffer_table_detach(c->peer_bufs, 0, c->q_buffer_id, NULL);
        c->q_buffer_id = 0;
        SPECD_TRY(specd_ipc_buffer_table_attach(c->peer_bufs, 0, desc, err));
        c->q_buffer_id = desc->buffer_id;
    }
    /* a CUDA view: the default stream has waited on the drafter's event */
    SPECD_TRY(specd_ipc_buffer_table_resolve(c->peer_bufs, 0, d->q, v, err));
    size_t vocab = c->model.vocab_size, n = d->n_tokens;
    if (v->rank != 2 || v->shape[0] != n || v->shape[1] != vocab || v->dtype != SPECD_IPC_F32)
        return specd_fail(err, SPECD_E_PROTOCOL, "draft distributions of shape [%llu, %llu], want "
                          "[%zu, %zu] f32", (unsigned long long)v->shape[0],
                          (unsigned long long)v->shape[1], n, vocab);
    return SPECD_OK;
}

/* A Draft's q rows: copied to q on the host and checked, or, from a CUDA buffer when q_dev is
 * not NULL, left there (*q_dev points at them; the checks wait for specd_ipc_client_fetch_q,
 * and the device kernel makes its own). */
static specd_status read_q(specd_ipc_client *c, const SpecdWire__Draft *d, float *q,
                           int want_device, const float **q_dev, specd_error *err) {
    specd_ipc_view v;
    SPECD_TRY(map_q(c, d, want_device, &v, err));
    size_t vocab = c->model.vocab_size, n = d->n_tokens;
    if (v.on_device) {
        int dev = d->q_buffer->has_cuda_device ? d->q_buffer->cuda_device : 0;
        if (q_dev) {
            *q_dev = c->q_dev = v.data;
            c->q_dev_device = dev;
            c->q_dev_rows = n;
            memcpy(c->q_dev_tokens, d->tokens, n * sizeof *d->tokens);
            return SPECD_OK;
        }
        SPECD_TRY(download_q(dev, v.data, n, vocab, q, err));
    } else {
        memcpy(q, v.data, n * vocab * sizeof(float));
        SPECD_TRY(specd_ipc_view_recheck(&v, err)); /* not rewritten while we copied */
    }
    return check_q_rows(q, n, vocab, d->tokens, err);
}

specd_status specd_ipc_client_fetch_q(specd_ipc_client *c, float *q, specd_error *err) {
    if (!c || !q) return specd_fail(err, SPECD_E_INVALID_ARG, "fetch_q: NULL argument");
    if (!c->q_dev)
        return specd_fail(err, SPECD_E_STATE,
                          "fetch_q: the last proposal left no draft distributions on the device");
    size_t vocab = c->model.vocab_size;
    SPECD_TRY(download_q(c->q_dev_device, c->q_dev, c->q_dev_rows, vocab, q, err));
    return check_q_rows(q, c->q_dev_rows, vocab, c->q_dev_tokens, err);
}

static specd_status propose(specd_ipc_client *c, uint64_t seq_id, uint64_t step,
                            const uint32_t *commit, size_t n_commit, uint32_t *draft, size_t cap,
                            size_t *n_draft, float *q, int *has_q, int want_device,
                            const float **q_dev, specd_error *err) {
    if (has_q) *has_q = 0;
    if (q_dev) *q_dev = NULL;
    if (!c || !n_draft || (cap && !draft))
        return specd_fail(err, SPECD_E_INVALID_ARG, "propose: NULL argument");
    seq_rec *s = find_seq(c, seq_id);
    if (!s)
        return specd_fail(err, SPECD_E_STATE, "propose: sequence %llu not open",
                          (unsigned long long)seq_id);
    SPECD_TRY(check_tokens(c, commit, n_commit, "propose", err));
    if (n_commit > SPECD_IPC_MAX_DRAFT + 1)
        return specd_fail(err, SPECD_E_INVALID_ARG, "propose: %zu commit tokens", n_commit);
    SPECD_TRY(append(s, commit, n_commit, err));
    int was_up = c->up;
    specd_error local;
    if (!err) err = &local;
    SPECD_TRY(specd_ipc_client_connect(c, err));
    SpecdWire__Propose m = SPECD_WIRE__PROPOSE__INIT;
    m.seq_id = seq_id;
    m.step = step;
    /* Just reconnected: the replay already carried these tokens. */
    m.n_commit_tokens = was_up ? n_commit : 0;
    m.commit_tokens = (uint32_t *)commit;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_PROPOSE);
    e.propose = &m;
    const SpecdWire__Envelope *r;
    /* resent after a replay, which carried the commit tokens */
    SPECD_TRY(request(c, &e, SPECD_WIRE__ENVELOPE__BODY_DRAFT, THEN_RESEND, &m.n_commit_tokens, &r,
                      err));
    const SpecdWire__Draft *d = r->draft;
    if (d->seq_id != seq_id || d->step != step || d->n_tokens > cap)
        return specd_fail(err, SPECD_E_PROTOCOL,
                          "draft for seq %llu step %llu with %zu tokens "
                          "(room for %zu)",
                          (unsigned long long)d->seq_id, (unsigned long long)d->step, d->n_tokens,
                          cap);
    SPECD_TRY(check_tokens(c, d->tokens, d->n_tokens, "draft", err));
    if (q && d->q && d->n_tokens) {
        specd_error qe;
        specd_status qs = d->q_buffer ? read_q(c, d, q, want_device, q_dev, &qe)
                                      : specd_fail(&qe, SPECD_E_PROTOCOL, "q without its buffer");
        if (qs != SPECD_OK) {
            /* a sampled draft without its q would be judged as deterministic: a plain step */
            if (!c->q_warned)
                specd_log(SPECD_LOG_WARN,
                          "draft distributions from %s unusable, drafts dropped: %s", c->endpoint,
                          qe.message);
            c->q_warned = 1;
            *n_draft = 0;
            return SPECD_OK;
        }
        if (has_q) *has_q = 1;
    }
    if (d->n_tokens) memcpy(draft, d->tokens, d->n_tokens * sizeof *draft);
    *n_draft = d->n_tokens;
    return SPECD_OK;
}

specd_status specd_ipc_client_propose(specd_ipc_client *c, uint64_t seq_id, uint64_t step,
                                      const uint32_t *commit, size_t n_commit, uint32_t *draft,
                                      size_t cap, size_t *n_draft, specd_error *err) {
    return propose(c, seq_id, step, commit, n_commit, draft, cap, n_draft, NULL, NULL, -1, NULL,
                   err);
}

specd_status specd_ipc_client_propose_q(specd_ipc_client *c, uint64_t seq_id, uint64_t step,
                                        const uint32_t *commit, size_t n_commit, uint32_t *draft,
                                        size_t cap, size_t *n_draft, float *q, int *has_q,
                                        specd_error *err) {
    return propose(c, seq_id, step, commit, n_commit, draft, cap, n_draft, q, has_q, -1, NULL,
                   err);
}

specd_status specd_ipc_client_propose_q_device(specd_ipc_client *c, uint64_t seq_id,
                                               uint64_t step, const uint32_t *commit,
                                               size_t n_commit, uint32_t *draft, size_t cap,
                                               size_t *n_draft, float *q, int *has_q,
                                               int cuda_device, const float **q_device,
                                               specd_error *err) {
    if (cuda_device < 0)
        return specd_fail(err, SPECD_E_INVALID_ARG, "propose: CUDA device %d", cuda_device);
    return propose(c, seq_id, step, commit, n_commit, draft, cap, n_draft, q, has_q, cuda_device,
                   q_device, err);
}

specd_status specd_ipc_client_seq_info(specd_ipc_client *c, uint64_t seq_id, uint64_t *length,
                                       uint64_t *hash, specd_error *err) {
    if (!c || !length || !hash) return specd_fail(err, SPECD_E_INVALID_ARG, "seq_info: NULL");
    SpecdWire__SeqInfoRequest m = SPECD_WIRE__SEQ_INFO_REQUEST__INIT;
    m.seq_id = seq_id;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO_REQUEST);
    e.seq_info_request = &m;
    const SpecdWire__Envelope *r;
    SPECD_TRY(request_connected(c, &e, SPECD_WIRE__ENVELOPE__BODY_SEQ_INFO, &r, err));
    *length = r->seq_info->length;
    *hash = r->seq_info->tokens_hash;
    return SPECD_OK;
}

specd_status specd_ipc_client_history(const specd_ipc_client *c, uint64_t seq_id, uint64_t *length,
                                      uint64_t *hash, specd_error *err) {
    if (!c || !length || !hash) return specd_fail(err, SPECD_E_INVALID_ARG, "history: NULL");
    const seq_rec *s = find_seq(c, seq_id);
    if (!s)
        return specd_fail(err, SPECD_E_STATE, "history: sequence %llu not open",
                          (unsigned long long)seq_id);
    *length = s->n;
    *hash = specd_ipc_tokens_hash(s->tokens, s->n);
    return SPECD_OK;
}

specd_status specd_ipc_client_stats(specd_ipc_client *c, specd_ipc_stats *out, specd_error *err) {
    if (!c || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "stats: NULL");
    SpecdWire__StatsRequest m = SPECD_WIRE__STATS_REQUEST__INIT;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_STATS_REQUEST);
    e.stats_request = &m;
    const SpecdWire__Envelope *r;
    SPECD_TRY(request_connected(c, &e, SPECD_WIRE__ENVELOPE__BODY_STATS, &r, err));
    const SpecdWire__Stats *s = r->stats;
    specd_ipc_stats o = {s->requests, s->errors,  s->sequences_open,   s->proposes,
                         s->verifies, s->commits, s->buffers_attached, s->uptime_ns};
    *out = o;
    return SPECD_OK;
}

specd_status specd_ipc_client_ping(specd_ipc_client *c, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "ping: NULL client");
    SpecdWire__Ping m = SPECD_WIRE__PING__INIT;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_PING);
    e.ping = &m;
    const SpecdWire__Envelope *r;
    return request_connected(c, &e, SPECD_WIRE__ENVELOPE__BODY_PONG, &r, err);
}

specd_status specd_ipc_client_attach_buffer(specd_ipc_client *c, specd_ipc_buffer *b,
                                            specd_error *err) {
    if (!c || !b) return specd_fail(err, SPECD_E_INVALID_ARG, "attach_buffer: NULL argument");
    for (size_t i = 0; i < c->n_bufs; i++)
        if (c->bufs[i] == b) return SPECD_OK;
    if (c->n_bufs == MAX_BUFFERS)
        return specd_fail(err, SPECD_E_STATE, "attach_buffer: %d buffers already", MAX_BUFFERS);
    c->bufs[c->n_bufs++] = b;
    if (!c->up) return specd_ipc_client_connect(c, err); /* connecting attaches it */
    specd_status st = send_attach(c, b, THEN_DONE, err);
    if (st != SPECD_OK && c->up) {
        c->n_bufs--; /* answered and refused: not shared anywhere */
    } else if (st == SPECD_OK) {
        size_t i = 0;
        while (i < c->n_bufs && c->bufs[i] != b) i++;
        if (i == c->n_bufs) /* a restarted daemon refused it in the replay, which dropped it */
            return specd_fail(err, SPECD_E_INVALID_ARG, "attach_buffer: refused by %s",
                              c->endpoint);
    }
    return st;
}

specd_status specd_ipc_client_detach_buffer(specd_ipc_client *c, uint64_t id, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "detach_buffer: NULL client");
    size_t i = 0;
    while (i < c->n_bufs && specd_ipc_buffer_id(c->bufs[i]) != id)
        i++;
    if (i == c->n_bufs)
        return specd_fail(err, SPECD_E_STATE, "detach_buffer: buffer %llu not attached",
                          (unsigned long long)id);
    c->bufs[i] = c->bufs[--c->n_bufs];
    if (!c->up) return SPECD_OK;
    SpecdWire__DetachBuffer m = SPECD_WIRE__DETACH_BUFFER__INIT;
    m.buffer_id = id;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_DETACH_BUFFER);
    e.detach_buffer = &m;
    /* a replay does not attach it again */
    return request(c, &e, SPECD_WIRE__ENVELOPE__BODY_ACK, THEN_DONE, NULL, NULL, err);
}

specd_status specd_ipc_client_verify(specd_ipc_client *c, uint64_t seq_id, uint64_t step,
                                     const uint32_t *draft, size_t n_draft,
                                     const specd_ipc_ref *ref, specd_ipc_verify_result *out,
                                     specd_error *err) {
    return specd_ipc_client_verify_q(c, seq_id, step, draft, n_draft, ref, NULL, out, err);
}

static void wire_ref(const specd_ipc_ref *ref, uint64_t *shape, SpecdWire__BufferRef *br) {
    memcpy(shape, ref->shape, SPECD_IPC_REF_MAX_RANK * sizeof *shape);
    br->buffer_id = ref->buffer_id;
    br->offset = ref->offset;
    br->n_shape = ref->rank;
    br->shape = shape;
    br->dtype = (SpecdWire__DType)ref->dtype;
    br->seq = ref->seq;
}

specd_status specd_ipc_client_verify_q(specd_ipc_client *c, uint64_t seq_id, uint64_t step,
                                       const uint32_t *draft, size_t n_draft,
                                       const specd_ipc_ref *ref, const specd_ipc_ref *q,
                                       specd_ipc_verify_result *out, specd_error *err) {
    if (!c || !ref || !out || (n_draft && !draft))
        return specd_fail(err, SPECD_E_INVALID_ARG, "verify: NULL argument");
    if (n_draft > SPECD_IPC_MAX_DRAFT)
        return specd_fail(err, SPECD_E_INVALID_ARG, "verify: %zu draft tokens", n_draft);
    if (ref->rank == 0 || ref->rank > SPECD_IPC_REF_MAX_RANK)
        return specd_fail(err, SPECD_E_INVALID_ARG, "verify: reference rank %u", ref->rank);
    if (q && (q->rank == 0 || q->rank > SPECD_IPC_REF_MAX_RANK))
        return specd_fail(err, SPECD_E_INVALID_ARG, "verify: q reference rank %u", q->rank);
    SPECD_TRY(check_tokens(c, draft, n_draft, "verify", err));
    SpecdWire__BufferRef br = SPECD_WIRE__BUFFER_REF__INIT, bq = SPECD_WIRE__BUFFER_REF__INIT;
    uint64_t shape[SPECD_IPC_REF_MAX_RANK], qshape[SPECD_IPC_REF_MAX_RANK];
    wire_ref(ref, shape, &br);
    if (q) wire_ref(q, qshape, &bq);
    SpecdWire__Verify m = SPECD_WIRE__VERIFY__INIT;
    m.seq_id = seq_id;
    m.step = step;
    m.n_draft_tokens = n_draft;
    m.draft_tokens = (uint32_t *)draft;
    m.target_logits = &br;
    m.q = q ? &bq : NULL;
    SpecdWire__Envelope e;
    init_env(&e, SPECD_WIRE__ENVELOPE__BODY_VERIFY);
    e.verify = &m;
    const SpecdWire__Envelope *r;
    SPECD_TRY(request_connected(c, &e, SPECD_WIRE__ENVELOPE__BODY_RESULT, &r, err));
    const SpecdWire__Result *res = r->result;
    if (res->seq_id != seq_id || res->step != step || res->n_emitted > n_draft + 1 ||
        res->accepted > n_draft || res->n_stats > n_draft + 1)
        return specd_fail(err, SPECD_E_PROTOCOL, "result does not match the request");
    SPECD_TRY(check_tokens(c, res->emitted, res->n_emitted, "result", err));
    seq_rec *s = find_seq(c, seq_id);
    /* The verifier appended them on its side; keep the histories equal. */
    if (s) SPECD_TRY(append(s, res->emitted, res->n_emitted, err));
    out->accepted = res->accepted;
    out->n_emitted = res->n_emitted;
    memcpy(out->emitted, res->emitted, res->n_emitted * sizeof *res->emitted);
    out->n_stats = res->n_stats;
    for (size_t i = 0; i < res->n_stats; i++) {
        out->accept_prob[i] = res->stats[i]->accept_prob;
        out->position_accepted[i] = res->stats[i]->accepted ? 1 : 0;
    }
    return SPECD_OK;
}
