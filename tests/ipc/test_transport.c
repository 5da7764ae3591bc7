/* Transport: hello (accepted, and refused with a reason on version/model mismatch), endpoint
 * policy (private ipc:// directory, tcp:// only with CURVE, an unauthenticated tcp peer refused),
 * finite timeouts, hostile frames, requests before hello (refused with the NO_SESSION reason code,
 * on which alone the client replays its session), and library mode over inproc://. */
#include "test_main.h"

#include <pthread.h>
#include <sys/stat.h>
#include <zmq.h>

#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "ipc_test_util.h"
#include "peer_reply.h"
#include "specd/ipc.h"

static const specd_ipc_fingerprint model = {.vocab_size = TEST_VOCAB,
                                            .tokenizer_hash = TEST_TOKHASH};

static specd_ipc_service_params service_params(const char *ep) {
    specd_ipc_service_params p = specd_ipc_service_default_params(SPECD_IPC_ROLE_DRAFTER);
    p.model = model;
    p.endpoint = ep;
    p.drain_linger_ms = 0;
    return p;
}

static specd_ipc_client *client_for(const char *ep, const specd_ipc_fingerprint *m, void *ctx) {
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = ep;
    p.timeout_ms = 2000; /* generous: a loaded CI machine must not fail the success paths */
    p.retry_ms = 0;
    p.zmq_context = ctx;
    specd_ipc_client *c = NULL;
    specd_error err;
    if (specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, m, &c, &err) != SPECD_OK)
        fail_msg("client_create: %s", err.message);
    return c;
}

static void test_hello_and_session(void **state) {
    (void)state;
    char dir[64], ep[128];
    test_private_dir(dir, sizeof dir);
    snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
    test_service t;
    specd_ipc_service_params sp = service_params(ep);
    specd_error err;
    assert_int_equal(test_service_start(&t, &sp, NULL, &err), SPECD_OK);
    specd_ipc_client *c = client_for(ep, &model, NULL);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_OK);
    assert_true(specd_ipc_client_connected(c));
    uint32_t prompt[3] = {1, 2, 3}, more[2] = {40000, 5};
    specd_ipc_seq_params sq = {.seq_id = 11,
                               .prompt = prompt,
                               .n_prompt = 3,
                               .sampling = {.temperature = 0.8f, .top_p = 1.0f},
                               .seed = 5};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_commit(c, 11, more, 2, &err), SPECD_OK);
    uint64_t len, hash, mylen, myhash;
    assert_int_equal(specd_ipc_client_seq_info(c, 11, &len, &hash, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_history(c, 11, &mylen, &myhash, &err), SPECD_OK);
    assert_int_equal(len, 5);
    assert_int_equal(len, mylen);
    assert_int_equal(hash, myhash);
    /* Propose without a proposer is refused (no made-up drafts), and the refusal is an error
     * status, not a transport failure: the session stays up. */
    uint32_t draft[8];
    size_t n = 99;
    assert_int_equal(specd_ipc_client_propose(c, 11, 1, NULL, 0, draft, 8, &n, &err),
                     SPECD_E_UNSUPPORTED);
    assert_int_equal(n, 99);
    assert_true(specd_ipc_client_connected(c));
    /* Out-of-vocabulary tokens are refused on our side before sending. */
    uint32_t bad = TEST_VOCAB;
    assert_int_equal(specd_ipc_client_commit(c, 11, &bad, 1, &err), SPECD_E_INVALID_ARG);
    specd_ipc_stats st;
    assert_int_equal(specd_ipc_client_stats(c, &st, &err), SPECD_OK);
    assert_int_equal(st.sequences_open, 1);
    assert_int_equal(st.commits, 1);
    assert_int_equal(specd_ipc_client_close_seq(c, 11, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_seq_info(c, 11, &len, &hash, &err), SPECD_E_STATE);
    specd_ipc_client_destroy(c);
    test_service_stop(&t);
    test_private_dir_remove(dir);
}

static void test_hello_mismatch_refused(void **state) {
    (void)state;
    char dir[64], ep[128];
    test_private_dir(dir, sizeof dir);
    snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
    test_service t;
    specd_ipc_service_params sp = service_params(ep);
    specd_error err;
    assert_int_equal(test_service_start(&t, &sp, NULL, &err), SPECD_OK);
    specd_ipc_fingerprint other_vocab = {.vocab_size = TEST_VOCAB + 1,
                                         .tokenizer_hash = TEST_TOKHASH};
    specd_ipc_client *c = client_for(ep, &other_vocab, NULL);
    assert_int_equal(specd_ipc_client_connect(c, &err), SPECD_E_MISMATCH);
    assert_non_null(strstr(err.message, "vocab size 49153"));
    assert_false(specd_ipc_client_connected(c));
    specd_ipc_client_destroy(c);
    specd_ipc_fingerprint other_tok = {.vocab_size = TEST_VOCAB,
                                       .tokenizer_hash = TEST_TOKHASH ^ 1};
    c = client_for(ep, &other_tok, NULL);
    assert_int_equal(specd_ipc_client_connect(c, &err), SPECD_E_MISMATCH);
    assert_non_null(strstr(err.message, "tokenizer hash"));
    specd_ipc_client_destroy(c);

    /* A raw peer with the wrong major version or schema hash, and one that skips hello. */
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_int_equal(zmq_connect(s, ep), 0);
    specd_ipc_decoder *dec = NULL;
    assert_int_equal(specd_ipc_decoder_create(0, &dec, NULL), SPECD_OK);
    struct {
        uint32_t major;
        uint64_t schema;
        int ping_only;
        const char *needle;
        SpecdWire__ErrorReason reason; /* what the host acts on: a code, not the text */
    } cases[] = {{SPECD_IPC_MAJOR + 1, SPECD_IPC_SCHEMA_HASH, 0, "major version 2",
                  SPECD_WIRE__ERROR_REASON__REASON_NONE},
                 {SPECD_IPC_MAJOR, SPECD_IPC_SCHEMA_HASH ^ 0xff, 0, "schema hash",
                  SPECD_WIRE__ERROR_REASON__REASON_NONE},
                 {0, 0, 1, "no session", SPECD_WIRE__ERROR_REASON__REASON_NO_SESSION}};
    for (size_t i = 0; i < 3; i++) {
        SpecdWire__ModelFingerprint m = SPECD_WIRE__MODEL_FINGERPRINT__INIT;
        m.vocab_size = TEST_VOCAB;
        m.tokenizer_hash = TEST_TOKHASH;
        SpecdWire__Hello h = SPECD_WIRE__HELLO__INIT;
        h.major = cases[i].major;
        h.schema_hash = cases[i].schema;
        h.model = &m;
        SpecdWire__Ping ping = SPECD_WIRE__PING__INIT;
        SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
        e.request_id = 100 + i;
        if (cases[i].ping_only) {
            e.body_case = SPECD_WIRE__ENVELOPE__BODY_PING;
            e.ping = &ping;
        } else {
            e.body_case = SPECD_WIRE__ENVELOPE__BODY_HELLO;
            e.hello = &h;
        }
        assert_int_equal(specd_ipc_send(s, NULL, 0, &e, 1 << 20, &err), SPECD_OK);
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        assert_int_equal(zmq_poll(&it, 1, 2000), 1);
        char buf[512];
        int n = zmq_recv(s, buf, sizeof buf, 0);
        assert_true(n > 0);
        const SpecdWire__Envelope *r = NULL;
        assert_int_equal(specd_ipc_frame_decode(dec, buf, (size_t)n, &r, &err), SPECD_OK);
        assert_int_equal(r->request_id, 100 + i);
        assert_int_equal(r->body_case, SPECD_WIRE__ENVELOPE__BODY_ERROR);
        if (!strstr(r->error->message, cases[i].needle))
            fail_msg("'%s' lacks '%s'", r->error->message, cases[i].needle);
        assert_int_equal(r->error->reason, cases[i].reason);
        assert_int_equal(r->error->has_reason,
                         cases[i].reason != SPECD_WIRE__ERROR_REASON__REASON_NONE);
    }
    /* Garbage and a two-frame message: answered with an Error, the service keeps serving. */
    assert_int_equal(zmq_send(s, "\xff\xff\xff", 3, 0), 3);
    assert_int_equal(zmq_send(s, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(s, "b", 1, 0), 1);
    for (int k = 0; k < 2; k++) {
        char buf[512];
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        assert_int_equal(zmq_poll(&it, 1, 2000), 1);
        int n = zmq_recv(s, buf, sizeof buf, 0);
        const SpecdWire__Envelope *r = NULL;
        assert_int_equal(specd_ipc_frame_decode(dec, buf, (size_t)n, &r, &err), SPECD_OK);
        assert_int_equal(r->body_case, SPECD_WIRE__ENVELOPE__BODY_ERROR);
        assert_int_equal(r->error->code, SPECD_E_FORMAT);
    }
    specd_ipc_decoder_destroy(dec);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);
    c = client_for(ep, &model, NULL);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_OK);
    specd_ipc_client_destroy(c);
    test_service_stop(&t);
    test_private_dir_remove(dir);
}

/* A scripted daemon: a ROUTER socket served by a thread of this test, which expects the
 * client's requests in a given order and answers each as its step says (the normal reply, or an
 * Error with a chosen reason and message). It shows what the client does with each refusal: its
 * session is replayed on the NO_SESSION reason code and only on it, whatever the message says,
 * and then the one request helper resends what the replay did not carry. */
typedef struct step {
    SpecdWire__Envelope__BodyCase expect;
    SpecdWire__ErrorReason why; /* with text: refuse the request */
    const char *text;           /* NULL: the normal reply */
} step;

enum { MAX_STEPS = 24 };

typedef struct scripted {
    void *sock;
    const step *steps;
    int n_steps;
    int served, failed;
    size_t got[MAX_STEPS]; /* per step: tokens carried (OpenSeq prompt, Commit, Propose commit) */
} scripted;

/* Serves one request; returns 0, or -1 on anything unexpected. */
static int scripted_serve(scripted *d, specd_ipc_decoder *dec) {
    zmq_msg_t rid, body;
    zmq_msg_init(&rid);
    zmq_msg_init(&body);
    int rc = -1;
    zmq_pollitem_t it = {.socket = d->sock, .events = ZMQ_POLLIN};
    const SpecdWire__Envelope *q = NULL;
    const step *st = &d->steps[d->served];
    if (zmq_poll(&it, 1, 10000) != 1 || zmq_msg_recv(&rid, d->sock, 0) < 0 ||
        zmq_msg_recv(&body, d->sock, 0) < 0 ||
        specd_ipc_frame_decode(dec, zmq_msg_data(&body), zmq_msg_size(&body), &q, NULL) !=
            SPECD_OK ||
        q->body_case != st->expect)
        goto out;
    peer_reply r;
    peer_reply_init(&r, q, 77);
    SpecdWire__Error error;
    size_t *got = &d->got[d->served];
    switch (q->body_case) {
    case SPECD_WIRE__ENVELOPE__BODY_OPEN_SEQ: *got = q->open_seq->n_prompt; break;
    case SPECD_WIRE__ENVELOPE__BODY_COMMIT: *got = q->commit->n_tokens; break;
    case SPECD_WIRE__ENVELOPE__BODY_PROPOSE: *got = q->propose->n_commit_tokens; break;
    default: break;
    }
    if (st->text)
        specd_ipc_error_body(&r.e, &error, q->request_id, SPECD_E_STATE, st->why, st->text);
    else if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_PROPOSE)
        peer_reply_draft(&r, q->propose, 0, NULL);
    rc = specd_ipc_send(d->sock, zmq_msg_data(&rid), zmq_msg_size(&rid), &r.e, 1 << 20, NULL) ==
                 SPECD_OK
             ? 0
             : -1;
out:
    zmq_msg_close(&rid);
    zmq_msg_close(&body);
    return rc;
}

static void *scripted_run(void *arg) {
    scripted *d = arg;
    specd_ipc_decoder *dec = NULL;
    if (specd_ipc_decoder_create(0, &dec, NULL) != SPECD_OK) d->failed = 1;
    while (d->served < d->n_steps && !d->failed) {
        if (scripted_serve(d, dec) != 0)
            d->failed = 1;
        else
            d->served++;
    }
    specd_ipc_decoder_destroy(dec);
    return NULL;
}

typedef struct scripted_run_ctx {
    void *ctx;
    scripted d;
    pthread_t th;
    char dir[64], ep[128];
} scripted_run_ctx;

static void scripted_start(scripted_run_ctx *r, const step *steps, int n) {
    test_private_dir(r->dir, sizeof r->dir);
    snprintf(r->ep, sizeof r->ep, "ipc://%s/d.sock", r->dir);
    r->ctx = zmq_ctx_new();
    r->d = (scripted){.sock = zmq_socket(r->ctx, ZMQ_ROUTER), .steps = steps, .n_steps = n};
    assert_int_equal(zmq_bind(r->d.sock, r->ep), 0);
    assert_int_equal(pthread_create(&r->th, NULL, scripted_run, &r->d), 0);
}

/* Joins the daemon thread: every step was served in order, and nothing else was asked. */
static void scripted_finish(scripted_run_ctx *r) {
    pthread_join(r->th, NULL);
    if (r->d.failed)
        fail_msg("scripted daemon: step %d (expecting request kind %d) not met", r->d.served,
                 (int)r->d.steps[r->d.served].expect);
    assert_int_equal(r->d.served, r->d.n_steps);
    zmq_pollitem_t it = {.socket = r->d.sock, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, 100), 0);
    int zero = 0;
    zmq_setsockopt(r->d.sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(r->d.sock);
    zmq_ctx_term(r->ctx);
    test_private_dir_remove(r->dir);
}

#define OK_(kind) {SPECD_WIRE__ENVELOPE__BODY_##kind, SPECD_WIRE__ERROR_REASON__REASON_NONE, NULL}
#define LOST_(kind, text) {SPECD_WIRE__ENVELOPE__BODY_##kind, \
                           SPECD_WIRE__ERROR_REASON__REASON_NO_SESSION, text}

static void test_lost_session_is_a_code(void **state) {
    (void)state;
    /* Ping 1: NO_SESSION under a message that never says so: Hello, and the Ping again. Ping 3:
     * a message that says "no session" but no reason: reported, nothing replayed. */
    static const step steps[] = {
        OK_(HELLO), LOST_(PING, "the daemon restarted"), OK_(HELLO), OK_(PING),
        {SPECD_WIRE__ENVELOPE__BODY_PING, SPECD_WIRE__ERROR_REASON__REASON_NONE,
         "no session: say hello first"},
        OK_(PING)};
    scripted_run_ctx r;
    scripted_start(&r, steps, (int)(sizeof steps / sizeof steps[0]));
    specd_ipc_client *c = client_for(r.ep, &model, NULL);
    specd_error err;
    if (specd_ipc_client_ping(c, &err) != SPECD_OK) fail_msg("ping 1: %s", err.message);
    assert_int_equal(specd_ipc_client_sessions(c), 2); /* replayed once */
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_E_STATE);
    assert_non_null(strstr(err.message, "no session"));
    assert_int_equal(specd_ipc_client_sessions(c), 2); /* the text alone replays nothing */
    assert_true(specd_ipc_client_connected(c));
    if (specd_ipc_client_ping(c, &err) != SPECD_OK) fail_msg("ping 4: %s", err.message);
    scripted_finish(&r);
    specd_ipc_client_destroy(c);
}

/* The one replaying request helper (ipc/client.c request()): after a lost session it replays
 * the whole recorded session; a Commit or CloseSeq the replay carried is not sent again, a
 * Propose is, without the commit tokens the replayed prompt already holds. */
static void test_replay_then(void **state) {
    (void)state;
    static const step steps[] = {
        OK_(HELLO), OK_(OPEN_SEQ),                                     /* open: 3 tokens */
        LOST_(COMMIT, "restarted"), OK_(HELLO), OK_(OPEN_SEQ),         /* commit 2: carried */
        LOST_(PROPOSE, "restarted"), OK_(HELLO), OK_(OPEN_SEQ),        /* propose, commit 1 */
        OK_(PROPOSE),                                                  /* resent, no tokens */
        OK_(PING),                                                     /* nothing in between */
        LOST_(CLOSE_SEQ, "restarted"), OK_(HELLO),                     /* nothing to reopen */
        OK_(PING)};
    scripted_run_ctx r;
    scripted_start(&r, steps, (int)(sizeof steps / sizeof steps[0]));
    specd_ipc_client *c = client_for(r.ep, &model, NULL);
    specd_error err;
    uint32_t prompt[3] = {1, 2, 3}, more[2] = {4, 5}, one[1] = {6}, draft[8];
    specd_ipc_seq_params sq = {.seq_id = 9, .prompt = prompt, .n_prompt = 3,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f}};
    size_t n_draft = 99;
    if (specd_ipc_client_open_seq(c, &sq, &err) != SPECD_OK ||
        specd_ipc_client_commit(c, 9, more, 2, &err) != SPECD_OK ||
        specd_ipc_client_propose(c, 9, 1, one, 1, draft, 8, &n_draft, &err) != SPECD_OK ||
        specd_ipc_client_ping(c, &err) != SPECD_OK ||
        specd_ipc_client_close_seq(c, 9, &err) != SPECD_OK ||
        specd_ipc_client_ping(c, &err) != SPECD_OK)
        fail_msg("%s", err.message);
    assert_int_equal(n_draft, 0);
    assert_int_equal(specd_ipc_client_sessions(c), 4);
    scripted_finish(&r);
    const size_t want[] = {0, 3, 2, 0, 5, 1, 0, 6, 0};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (r.d.got[i] != want[i])
            fail_msg("step %zu carried %zu tokens, want %zu", i, r.d.got[i], want[i]);
    specd_ipc_client_destroy(c);
}

static void test_endpoint_policy(void **state) {
    (void)state;
    specd_error err;
    char dir[64], ep[128];
    test_private_dir(dir, sizeof dir);
    chmod(dir, 0755);
    snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
    assert_int_equal(specd_ipc_endpoint_check(ep, 0, &err), SPECD_E_IO);
    assert_non_null(strstr(err.message, "mode 755"));
    chmod(dir, 0700);
    assert_int_equal(specd_ipc_endpoint_check(ep, 0, &err), SPECD_OK);
    test_private_dir_remove(dir);
    assert_int_equal(specd_ipc_endpoint_check("tcp://127.0.0.1:5555", 0, &err),
                     SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "CURVE"));
    assert_int_equal(specd_ipc_endpoint_check("ipc://@abstract", 0, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_ipc_endpoint_check("udp://1.2.3.4:5", 0, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(specd_ipc_endpoint_check("inproc://x", 0, &err), SPECD_OK);
    /* The default endpoint lives in a private directory. */
    char def[256];
    assert_int_equal(specd_ipc_default_endpoint("drafter", def, sizeof def, &err), SPECD_OK);
    assert_int_equal(specd_ipc_endpoint_check(def, 0, &err), SPECD_OK);
    /* The client refuses tcp:// without keys at create time. */
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = "tcp://127.0.0.1:5555";
    specd_ipc_client *c = NULL;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_E_INVALID_ARG);
    assert_null(c);
}

static void test_curve_refuses_unauthenticated(void **state) {
    (void)state;
    if (!zmq_has("curve")) {
        printf("skipped: libzmq without CURVE\n");
        skip();
    }
    char spub[41], ssec[41], cpub[41], csec[41], opub[41], osec[41];
    assert_int_equal(zmq_curve_keypair(spub, ssec), 0);
    assert_int_equal(zmq_curve_keypair(cpub, csec), 0);
    assert_int_equal(zmq_curve_keypair(opub, osec), 0);
    specd_error err;
    test_service t;
    specd_ipc_service_params sp = service_params("tcp://127.0.0.1:47311");
    sp.curve_secret = ssec;
    /* A server without a key is refused on tcp://. */
    specd_ipc_service_params nokey = sp;
    nokey.curve_secret = NULL;
    specd_ipc_service *bad = NULL;
    assert_int_equal(specd_ipc_service_create(&nokey, NULL, &bad, &err), SPECD_E_INVALID_ARG);
    assert_int_equal(test_service_start(&t, &sp, NULL, &err), SPECD_OK);

    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = sp.endpoint;
    p.timeout_ms = 2000; /* generous: a loaded CI machine must not fail the success paths */
    p.retry_ms = 0;
    p.curve_server_public = spub;
    p.curve_public = cpub;
    p.curve_secret = csec;
    specd_ipc_client *c = NULL;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_OK);
    /* No shared memory over tcp://: the peer is not known to be on this machine. */
    specd_ipc_buffer *b = NULL;
    assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 4096, 0, &b, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_attach_buffer(c, b, &err), SPECD_E_UNSUPPORTED);
    assert_int_equal(specd_ipc_client_detach_buffer(c, specd_ipc_buffer_id(b), &err),
                     SPECD_E_STATE); /* the refused buffer is not part of the session */
    specd_ipc_client_destroy(c);
    specd_ipc_buffer_destroy(b);

    /* A client that believes in another server key cannot complete the handshake. */
    p.curve_server_public = opub;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_E_TIMEOUT);
    specd_ipc_client_destroy(c);

    /* An unauthenticated peer (plain ZMTP, no CURVE) gets nothing back: its Hello never reaches
     * the service. */
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_int_equal(zmq_connect(s, sp.endpoint), 0);
    SpecdWire__ModelFingerprint m = SPECD_WIRE__MODEL_FINGERPRINT__INIT;
    m.vocab_size = TEST_VOCAB;
    m.tokenizer_hash = TEST_TOKHASH;
    SpecdWire__Hello h = SPECD_WIRE__HELLO__INIT;
    h.major = SPECD_IPC_MAJOR;
    h.schema_hash = SPECD_IPC_SCHEMA_HASH;
    h.model = &m;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 1;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    int to = 300;
    zmq_setsockopt(s, ZMQ_SNDTIMEO, &to, sizeof to);
    specd_ipc_send(s, NULL, 0, &e, 1 << 20, &err); /* may queue or time out: either way */
    zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
    assert_int_equal(zmq_poll(&it, 1, 1000), 0);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);

    /* Only the authenticated client's requests were served: hello + ping. */
    p.curve_server_public = spub;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    specd_ipc_stats st;
    assert_int_equal(specd_ipc_client_stats(c, &st, &err), SPECD_OK);
    /* First client: hello, ping, attach (refused). This one: hello, stats. Nothing from the
     * other two. */
    assert_int_equal(st.requests, 5);
    specd_ipc_client_destroy(c);
    test_service_stop(&t);

    /* With an allow-list of client keys (ZAP), a client with a valid handshake but a key not on
     * the list is refused too. */
    const char *allowed[1] = {cpub};
    sp.endpoint = "tcp://127.0.0.1:47312";
    sp.curve_clients = allowed;
    sp.n_curve_clients = 1;
    assert_int_equal(test_service_start(&t, &sp, NULL, &err), SPECD_OK);
    p.endpoint = sp.endpoint;
    p.curve_server_public = spub;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_OK);
    specd_ipc_client_destroy(c);
    p.curve_public = opub;
    p.curve_secret = osec;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &c, &err),
                     SPECD_OK);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_E_TIMEOUT);
    specd_ipc_client_destroy(c);
    test_service_stop(&t);
}

static void test_timeout_is_finite(void **state) {
    (void)state;
    char dir[64], ep[128];
    test_private_dir(dir, sizeof dir);
    snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
    /* A bound ROUTER that never answers. */
    void *ctx = zmq_ctx_new();
    void *r = zmq_socket(ctx, ZMQ_ROUTER);
    assert_int_equal(zmq_bind(r, ep), 0);
    specd_ipc_client *c = client_for(ep, &model, NULL);
    specd_error err;
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_E_TIMEOUT);
    assert_non_null(strstr(err.message, "no answer"));
    assert_false(specd_ipc_client_connected(c));
    specd_ipc_client_destroy(c);
    int zero = 0;
    zmq_setsockopt(r, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(r);
    zmq_ctx_term(ctx);
    /* Nobody bound at all: refused at once, not after a timeout. */
    c = client_for(ep, &model, NULL);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_E_PEER);
    specd_ipc_client_destroy(c);
    test_private_dir_remove(dir);
}

static void test_inproc_library_mode(void **state) {
    (void)state;
    void *ctx = zmq_ctx_new();
    specd_ipc_service_params sp = service_params("inproc://specd-drafter");
    sp.zmq_context = ctx;
    test_service t;
    specd_error err;
    assert_int_equal(test_service_start(&t, &sp, NULL, &err), SPECD_OK);
    specd_ipc_client *c = client_for("inproc://specd-drafter", &model, ctx);
    assert_int_equal(specd_ipc_client_ping(c, &err), SPECD_OK);
    specd_ipc_client_destroy(c);
    test_service_stop(&t);
    zmq_ctx_term(ctx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hello_and_session),
        cmocka_unit_test(test_hello_mismatch_refused),
        cmocka_unit_test(test_lost_session_is_a_code),
        cmocka_unit_test(test_replay_then),
        cmocka_unit_test(test_endpoint_policy),
        cmocka_unit_test(test_curve_refuses_unauthenticated),
        cmocka_unit_test(test_timeout_is_finite),
        cmocka_unit_test(test_inproc_library_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
