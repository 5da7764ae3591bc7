/* Peers of the real daemons cannot get in each other's way: two hosts that both number
 * their sequence 0 keep two sequences; a peer can neither read nor close another's; what a peer
 * held is released when its connection closes; one peer cannot fill the buffer table for all; a
 * peer that floods requests without reading the replies and then leaves neither crashes the
 * daemon nor delays a well-behaved peer.
 * usage: test_peers DRAFTER_BINARY VERIFIER_BINARY */
#include "test_main.h"

#include <string.h>
#include <sys/mman.h>
#include <zmq.h>

#include "common/clock.h"
#include "daemon_util.h"
#include "ipc/buffer.h"
#include "ipc/frame.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "specd/sampling.h"

enum { K = 4, V = TEST_VOCAB };

static const char *drafter_bin, *verifier_bin;
static const specd_ipc_fingerprint model = {.vocab_size = TEST_VOCAB,
                                            .tokenizer_hash = TEST_TOKHASH};

static pid_t running; /* killed by the teardown when a test fails half way */

static int teardown(void **state) {
    (void)state;
    if (running > 0) daemon_stop(running, SIGKILL);
    running = 0;
    return 0;
}

static void start(daemon_fixture *f, const char *bin, specd_ipc_role role) {
    int ready = daemon_fixture_start(f, bin, role);
    running = f->pid;
    assert_true(ready);
}

static void finish(daemon_fixture *f) {
    running = 0; /* reaped by the stop, whatever its status */
    assert_int_equal(daemon_fixture_stop(f), 0);
}

static specd_ipc_client *client(const char *ep, specd_ipc_role role) {
    specd_error err;
    specd_ipc_client *c = daemon_client(ep, role, &model, 3000, 0, &err);
    if (!c) fail_msg("client_create: %s", err.message);
    return c;
}

/* A host with its own logits buffer and one sequence 0 (prompt of n_prompt tokens, seed). */
typedef struct host {
    specd_ipc_client *c;
    specd_ipc_buffer *b;
    uint64_t seed;
    uint32_t n; /* history length */
} host;

static void host_open(host *h, const char *ep, uint64_t seed, uint32_t n_prompt) {
    specd_error err;
    h->c = client(ep, SPECD_IPC_ROLE_VERIFIER);
    h->seed = seed;
    h->n = n_prompt;
    assert_int_equal(
        specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, (size_t)(K + 1) * V * 4, 0, &h->b, &err),
        SPECD_OK);
    if (specd_ipc_client_attach_buffer(h->c, h->b, &err) != SPECD_OK)
        fail_msg("attach: %s", err.message);
    uint32_t prompt[64];
    for (uint32_t i = 0; i < n_prompt; i++)
        prompt[i] = 7 + i;
    specd_ipc_seq_params sq = {.seq_id = 0,
                               .prompt = prompt,
                               .n_prompt = n_prompt,
                               .sampling = {.temperature = 1.0f, .top_p = 1.0f},
                               .seed = seed,
                               .rule = SPECD_ACCEPT_COUPLED};
    if (specd_ipc_client_open_seq(h->c, &sq, &err) != SPECD_OK)
        fail_msg("open_seq: %s", err.message);
}

static void host_close(host *h) {
    specd_ipc_client_destroy(h->c);
    specd_ipc_buffer_destroy(h->b);
}

/* One verify step whose drafts are this host's own keyed samples: a daemon that verifies with
 * this host's seed and position accepts all K and emits the keyed sample of the last row. */
static void host_step(host *h) {
    specd_error err;
    float *logits = specd_ipc_buffer_data(h->b);
    for (size_t i = 0; i < (size_t)(K + 1) * V; i++)
        logits[i] = (float)(((i + h->n) * 2654435761u) % 1000u) * 0.004f;
    specd_sampling_params spp = specd_sampling_default_params();
    specd_sampler *sampler = NULL;
    assert_int_equal(specd_sampler_create(&spp, V, &sampler, &err), SPECD_OK);
    int32_t keyed[K + 1];
    for (uint32_t i = 0; i <= K; i++) {
        specd_sample_key key = {.seed = h->seed, .sequence = 0, .position = h->n + i};
        assert_int_equal(
            specd_sampler_sample(sampler, logits + (size_t)i * V, V, key, &keyed[i], &err),
            SPECD_OK);
    }
    specd_sampler_destroy(sampler);
    uint32_t draft[K];
    for (int i = 0; i < K; i++)
        draft[i] = (uint32_t)keyed[i];
    uint64_t seq;
    assert_int_equal(specd_ipc_buffer_publish(h->b, NULL, &seq, &err), SPECD_OK);
    uint64_t shape[2] = {K + 1, V};
    specd_ipc_ref r;
    assert_int_equal(specd_ipc_buffer_ref(h->b, 0, 2, shape, SPECD_IPC_F32, seq, &r, &err),
                     SPECD_OK);
    specd_ipc_verify_result res;
    if (specd_ipc_client_verify(h->c, 0, h->n, draft, K, &r, &res, &err) != SPECD_OK)
        fail_msg("verify: %s", err.message);
    assert_int_equal(res.accepted, K);
    assert_int_equal(res.n_emitted, K + 1);
    assert_int_equal(res.emitted[K], keyed[K]);
    h->n += K + 1;
}

static void test_sequences_belong_to_their_peer(void **state) {
    (void)state;
    daemon_fixture f;
    start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER);
    host a, b;
    host_open(&a, f.ep, 1111, 5);
    host_open(&b, f.ep, 2222, 9); /* same sequence id 0 */
    specd_error err;
    uint64_t len, hash;
    assert_int_equal(specd_ipc_client_seq_info(a.c, 0, &len, &hash, &err), SPECD_OK);
    assert_int_equal(len, 5); /* not replaced by b's */
    for (int i = 0; i < 6; i++) { /* interleaved steps: each host's own seed and position */
        host_step(&a);
        host_step(&b);
    }
    assert_int_equal(specd_ipc_client_seq_info(b.c, 0, &len, &hash, &err), SPECD_OK);
    assert_int_equal(len, b.n);
    /* b closes its sequence 0: a's is still open and still a's */
    assert_int_equal(specd_ipc_client_close_seq(b.c, 0, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_seq_info(a.c, 0, &len, &hash, &err), SPECD_OK);
    assert_int_equal(len, a.n);
    host_step(&a);
    host_close(&a);
    host_close(&b);
    finish(&f);
}

static specd_ipc_stats stats_of(specd_ipc_client *c) {
    specd_ipc_stats st;
    specd_error err;
    if (specd_ipc_client_stats(c, &st, &err) != SPECD_OK) fail_msg("stats: %s", err.message);
    return st;
}

/* A peer that leaves without closing anything: its sequences and buffers are released. And one
 * peer after another, each leaving its buffer attached, never fills the table for the next. */
static void test_a_peer_that_leaves_is_reclaimed(void **state) {
    (void)state;
    daemon_fixture f;
    start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER);
    specd_ipc_client *watch = client(f.ep, SPECD_IPC_ROLE_VERIFIER);
    for (int round = 0; round < 24; round++) {
        host h;
        host_open(&h, f.ep, 100 + (uint64_t)round, 3);
        host_step(&h); /* verified remotely, also after the 16th host */
        host_close(&h);
    }
    /* the last host's connection close reaches the daemon asynchronously */
    specd_ipc_stats st = stats_of(watch);
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS;
         (st.sequences_open || st.buffers_attached) && daemon_now_ms() < end;) {
        sleep_ms(20);
        st = stats_of(watch);
    }
    assert_int_equal(st.sequences_open, 0);
    assert_int_equal(st.buffers_attached, 0);
    specd_ipc_client_destroy(watch);
    finish(&f);
}

/* One peer cannot take the daemon's tables for itself: per-peer quotas on sequences (256) and
 * buffers (8), refused with a message; another peer is still served. */
static void test_per_peer_quotas(void **state) {
    (void)state;
    daemon_fixture f;
    start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER);
    specd_ipc_client *greedy = client(f.ep, SPECD_IPC_ROLE_VERIFIER);
    specd_error err;
    uint32_t prompt[2] = {1, 2};
    specd_ipc_seq_params sq = {.prompt = prompt, .n_prompt = 2,
                               .sampling = {.temperature = 1.0f, .top_p = 1.0f}};
    int opened = 0;
    specd_status st = SPECD_OK;
    for (uint64_t id = 0; id < 300 && st == SPECD_OK; id++) {
        sq.seq_id = id;
        st = specd_ipc_client_open_seq(greedy, &sq, &err);
        opened += st == SPECD_OK;
    }
    assert_int_equal(opened, 256);
    assert_non_null(strstr(err.message, "quota"));
    specd_ipc_buffer *bufs[9] = {0};
    int attached = 0;
    for (int i = 0; i < 9; i++) {
        assert_int_equal(specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, 4096, 0, &bufs[i], &err),
                         SPECD_OK);
        attached += specd_ipc_client_attach_buffer(greedy, bufs[i], &err) == SPECD_OK;
    }
    assert_int_equal(attached, 8);
    assert_non_null(strstr(err.message, "quota"));
    host other; /* a second peer still gets a sequence and a buffer */
    host_open(&other, f.ep, 5, 3);
    host_step(&other);
    host_close(&other);
    specd_ipc_client_destroy(greedy);
    for (int i = 0; i < 9; i++) specd_ipc_buffer_destroy(bufs[i]);
    finish(&f);
}

/* Hello on a raw DEALER socket configured as the host's client is. */
static void *raw_peer(void *ctx, const char *ep) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    int ivl = 250, tmo = 1500, hwm = 64;
    zmq_setsockopt(s, ZMQ_HEARTBEAT_IVL, &ivl, sizeof ivl);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TIMEOUT, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_HEARTBEAT_TTL, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(s, ZMQ_RCVHWM, &hwm, sizeof hwm);
    if (zmq_connect(s, ep) != 0) return NULL;
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
    specd_ipc_send(s, NULL, 0, &e, 1 << 20, NULL);
    return s;
}

/* The misbehaving peer (a child process): floods Stats requests for flood_ms without reading a
 * reply, then leaves abruptly. */
static void flood_and_leave(const char *ep, int flood_ms) {
    void *ctx = zmq_ctx_new();
    void *s = raw_peer(ctx, ep);
    if (!s) _exit(1);
    SpecdWire__StatsRequest sr = SPECD_WIRE__STATS_REQUEST__INIT;
    uint64_t end = specd_now_ns() + (uint64_t)flood_ms * 1000000u;
    for (uint64_t id = 2; specd_now_ns() < end; id++) {
        SpecdWire__Envelope p = SPECD_WIRE__ENVELOPE__INIT;
        p.request_id = id;
        p.body_case = SPECD_WIRE__ENVELOPE__BODY_STATS_REQUEST;
        p.stats_request = &sr;
        zmq_msg_t msg;
        size_t n = specd_wire__envelope__get_packed_size(&p);
        zmq_msg_init_size(&msg, n);
        specd_wire__envelope__pack(&p, zmq_msg_data(&msg));
        if (zmq_msg_send(&msg, s, ZMQ_DONTWAIT) < 0) {
            zmq_msg_close(&msg);
            usleep(200);
        }
    }
    _exit(0); /* no close, no linger: the connection just drops */
}

static void misbehaving_peer(const char *bin, specd_ipc_role role) {
    daemon_fixture f;
    start(&f, bin, role);
    specd_ipc_client *good = client(f.ep, role);
    specd_error err;
    assert_int_equal(specd_ipc_client_ping(good, &err), SPECD_OK);
    pid_t bad = fork();
    if (bad == 0) flood_and_leave(f.ep, 3000);
    /* While the flood goes on (and after the flooder is gone), the good peer is served
     * promptly: no request waits on replies the flooder never reads. */
    uint64_t worst = 0, end = specd_now_ns() + 4500000000ull;
    int pings = 0;
    while (specd_now_ns() < end) {
        uint64_t t0 = specd_now_ns();
        if (specd_ipc_client_ping(good, &err) != SPECD_OK)
            fail_msg("ping %d from the good peer: %s", pings, err.message);
        uint64_t dt = specd_now_ns() - t0;
        if (dt > worst) worst = dt;
        pings++;
        sleep_ms(20);
    }
    int status;
    assert_int_equal(waitpid(bad, &status, 0), bad);
    printf("%s: %d pings during and after a flood, slowest %.1f ms\n", bin, pings,
           (double)worst / 1e6);
    assert_true(worst < 300000000ull); /* was ~1 s per request */
    /* the daemon is alive and still answers */
    sleep_ms(300);
    assert_int_equal(kill(f.pid, 0), 0);
    assert_int_equal(specd_ipc_client_ping(good, &err), SPECD_OK);
    specd_ipc_client_destroy(good);
    finish(&f);
}

static void test_flooding_peer_verifier(void **state) {
    (void)state;
    misbehaving_peer(verifier_bin, SPECD_IPC_ROLE_VERIFIER);
}

static void test_flooding_peer_drafter(void **state) {
    (void)state;
    misbehaving_peer(drafter_bin, SPECD_IPC_ROLE_DRAFTER);
}

/* One request on a raw peer socket; the reply's body case, and its error message in msg. */
static int raw_request(void *s, SpecdWire__Envelope *e, char *msg, size_t cap) {
    assert_int_equal(specd_ipc_send(s, NULL, 0, e, 1 << 20, NULL), SPECD_OK);
    specd_ipc_decoder *dec = NULL;
    assert_int_equal(specd_ipc_decoder_create(0, &dec, NULL), SPECD_OK);
    int body = -1;
    for (;;) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 3000) != 1) break;
        char buf[4096];
        int n = zmq_recv(s, buf, sizeof buf, 0);
        const SpecdWire__Envelope *r = NULL;
        if (n < 0 || specd_ipc_frame_decode(dec, buf, (size_t)n, &r, NULL) != SPECD_OK) break;
        if (r->request_id != e->request_id) continue; /* the Hello's answer */
        body = (int)r->body_case;
        if (r->body_case == SPECD_WIRE__ENVELOPE__BODY_ERROR)
            snprintf(msg, cap, "%s", r->error->message);
        break;
    }
    specd_ipc_decoder_destroy(dec);
    return body;
}

static int daemon_alive(pid_t pid) {
    int status;
    return waitpid(pid, &status, WNOHANG) == 0;
}

/* A host that shrinks its logits segment after the verifier mapped it used to kill the verifier
 * with SIGBUS at the next verify. Segments are sealed now (the shrink fails), and the verifier
 * maps no segment that is not sealed against shrinking. */
static void test_shrunk_segment_cannot_kill_the_verifier(void **state) {
    (void)state;
    daemon_fixture f;
    start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER);
    host h;
    host_open(&h, f.ep, 77, 4);
    host_step(&h);
    SpecdWire__BufferDesc d;
    specd_ipc_buffer_describe(h.b, &d);
    int shrunk = ftruncate(d.owner_fd, 4096) == 0;
    if (!shrunk) host_step(&h); /* still served */
    else {
        specd_ipc_verify_result res;
        specd_ipc_ref r = {.buffer_id = d.buffer_id, .rank = 2, .shape = {K + 1, V}, .seq = 2};
        uint32_t draft[K] = {1, 2, 3, 4};
        specd_ipc_client_verify(h.c, 0, 99, draft, K, &r, &res, NULL);
    }
    /* answered after the verify on the same connection: the daemon survived handling it */
    assert_int_equal(specd_ipc_client_ping(h.c, NULL), SPECD_OK);
    assert_true(daemon_alive(f.pid));
    assert_false(shrunk);

    /* A segment that is not sealed (made by hand, with a valid header) is refused. */
    size_t total = SPECD_SHM_HEADER_BYTES + 4096;
    int fd = memfd_create("unsealed", MFD_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)total), 0);
    specd_shm_header *hd = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    assert_true(hd != MAP_FAILED);
    memcpy(hd->magic, SPECD_SHM_MAGIC, 8);
    hd->version = 1;
    hd->header_bytes = SPECD_SHM_HEADER_BYTES;
    hd->buffer_id = 4242;
    hd->bytes = 4096;
    munmap(hd, total);
    void *ctx = zmq_ctx_new();
    void *s = raw_peer(ctx, f.ep);
    SpecdWire__BufferDesc u = SPECD_WIRE__BUFFER_DESC__INIT;
    u.buffer_id = 4242;
    u.kind = SPECD_WIRE__BUFFER_KIND__BUFFER_SHM;
    u.bytes = 4096;
    u.shm_name = "/unsealed";
    u.has_owner_pid = u.has_owner_fd = 1;
    u.owner_pid = (uint32_t)getpid();
    u.owner_fd = fd;
    SpecdWire__AttachBuffer a = SPECD_WIRE__ATTACH_BUFFER__INIT;
    a.desc = &u;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = 2;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_ATTACH_BUFFER;
    e.attach_buffer = &a;
    char msg[256] = "";
    int answer = raw_request(s, &e, msg, sizeof msg);
    /* shrink it, and make the daemon read it */
    assert_int_equal(ftruncate(fd, 0), 0);
    uint32_t draft[1] = {1};
    uint64_t shape[2] = {2, 512}; /* within the 4096 bytes it claims */
    SpecdWire__BufferRef ref = SPECD_WIRE__BUFFER_REF__INIT;
    ref.buffer_id = 4242;
    ref.n_shape = 2;
    ref.shape = shape;
    SpecdWire__Verify v = SPECD_WIRE__VERIFY__INIT;
    v.n_draft_tokens = 1;
    v.draft_tokens = draft;
    v.target_logits = &ref;
    SpecdWire__Envelope ve = SPECD_WIRE__ENVELOPE__INIT;
    ve.request_id = 3;
    ve.body_case = SPECD_WIRE__ENVELOPE__BODY_VERIFY;
    ve.verify = &v;
    char vmsg[256] = "";
    int vanswer = raw_request(s, &ve, vmsg, sizeof vmsg);
    printf("verify on the shrunk segment: answer %d (%s)\n", vanswer, vmsg);
    assert_true(daemon_alive(f.pid));
    assert_int_equal(answer, SPECD_WIRE__ENVELOPE__BODY_ERROR);
    assert_non_null(strstr(msg, "sealed"));
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);
    close(fd);
    host_close(&h);
    finish(&f);
}

int main(int argc, char **argv) {
    if (!daemon_test_binaries(argc, argv, &drafter_bin, &verifier_bin)) return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sequences_belong_to_their_peer, teardown),
        cmocka_unit_test_teardown(test_a_peer_that_leaves_is_reclaimed, teardown),
        cmocka_unit_test_teardown(test_per_peer_quotas, teardown),
        cmocka_unit_test_teardown(test_flooding_peer_verifier, teardown),
        cmocka_unit_test_teardown(test_flooding_peer_drafter, teardown),
        cmocka_unit_test_teardown(test_shrunk_segment_cannot_kill_the_verifier, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
