/* Per-step round trip of propose + verify at k = 8, V = 49,152, three ways, in the same run:
 *   in-process   the same two handlers called directly, logits by pointer (the anchor);
 *   ipc shm      specd_ipc_client -> daemon process over ipc://, logits by shared-buffer
 *                reference (what specd does);
 *   ipc inline   the same, but the 9 x V f32 logits travel inside the Verify message.
 * The daemon side is a forked process running a drafter-like and a verifier-like service. The
 * verify work is the same everywhere: the acceptance engine's chain rule (greedy, so each step's
 * accepted count is set by the synthetic logits), so the differences are the transport's cost.
 * Prints p50/p99 per step and the p50 added over the in-process anchor. usage: bench_ipc [steps] */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <errno.h>
#include <zmq.h>

#include "common/clock.h"
#include "ipc/schema_hash.h"
#include "ipc/service.h"
#include "ipc/transport.h"
#include "specd/accept.h"
#include "specd/ipc.h"

enum { K = 8, V = 49152, ROWS = K + 1, WARMUP = 200 };
static const specd_ipc_fingerprint model = {V, 0xbe7cbe7cULL};

/* ---- the two handlers, shared by every mode ---------------------------------------------- */

static void propose_tokens(uint64_t step, uint32_t *out) {
    for (int i = 0; i < K; i++)
        out[i] = (uint32_t)((step * 31u + (uint64_t)i * 7u) % V);
}

/* The acceptance engine (greedy rule, so the accepted count is easy to steer), one per
 * process: the daemon side makes its own after fork. */
static specd_accept *engine;

static void make_engine(void) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = SPECD_ACCEPT_GREEDY;
    p.max_k = K;
    p.max_vocab = V;
    if (specd_accept_create(&p, &engine, NULL) != SPECD_OK) abort();
}

static void verify_greedy(const float *logits, const uint32_t *draft, size_t n,
                          specd_ipc_verify_result *out) {
    int32_t d[K], tok[K + 1];
    for (size_t i = 0; i < n; i++)
        d[i] = (int32_t)draft[i];
    specd_chain_input in = {.k = (int32_t)n, .draft = d, .target_logits = logits, .n_vocab = V};
    specd_chain_result res = {.tokens = tok};
    if (specd_accept_chain(engine, &in, &res, NULL) != SPECD_OK) abort();
    for (int32_t i = 0; i < res.n_emitted; i++)
        out->emitted[i] = (uint32_t)tok[i];
    out->n_emitted = (size_t)res.n_emitted;
    out->accepted = (uint32_t)res.n_accepted;
    out->n_stats = 0;
}

static specd_status h_propose(void *u, uint64_t owner, const SpecdWire__Propose *m,
                              specd_ipc_draft_out *o, specd_error *err) {
    (void)u, (void)owner;
    (void)err;
    propose_tokens(m->step, o->tokens);
    o->n = K;
    return SPECD_OK;
}

static specd_status h_verify(void *u, uint64_t owner, const SpecdWire__Verify *m,
                             const specd_ipc_view *v, const specd_ipc_view *q,
                             specd_ipc_verify_result *o, specd_error *err) {
    (void)q, (void)owner;
    (void)u;
    (void)err;
    verify_greedy(v->data, m->draft_tokens, m->n_draft_tokens, o);
    return SPECD_OK;
}

static specd_status h_open(void *u, uint64_t owner, const SpecdWire__OpenSeq *m,
                           specd_error *err) {
    (void)u, (void)owner, (void)m, (void)err;
    return SPECD_OK;
}

static specd_status h_commit(void *u, uint64_t owner, uint64_t s, const uint32_t *t, size_t n,
                             int rb, uint64_t to, specd_error *err) {
    (void)u, (void)owner, (void)s, (void)t, (void)n, (void)rb, (void)to, (void)err;
    return SPECD_OK;
}

/* ---- daemon side ---------------------------------------------------------------------------- */

static volatile int child_stop;

static void *serve(void *arg) {
    specd_ipc_service_run(arg, -1, &child_stop, 50, NULL);
    return NULL;
}

static void on_term(int sig) {
    (void)sig;
    child_stop = 1;
}

static int run_daemons(const char *ep_d, const char *ep_v, size_t max_frame) {
    signal(SIGTERM, on_term);
    make_engine();
    specd_ipc_handlers h = {
        .propose = h_propose, .verify = h_verify, .open_seq = h_open, .commit = h_commit};
    specd_ipc_service_params pd = specd_ipc_service_default_params(SPECD_IPC_ROLE_DRAFTER);
    pd.model = model;
    pd.endpoint = ep_d;
    pd.drain_linger_ms = 0;
    specd_ipc_service_params pv = pd;
    pv.role = SPECD_IPC_ROLE_VERIFIER;
    pv.endpoint = ep_v;
    pv.max_frame = max_frame;
    specd_ipc_service *sd = NULL, *sv = NULL;
    specd_error err;
    if (specd_ipc_service_create(&pd, &h, &sd, &err) != SPECD_OK ||
        specd_ipc_service_create(&pv, &h, &sv, &err) != SPECD_OK) {
        fprintf(stderr, "bench_ipc daemon: %s\n", err.message);
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, serve, sd);
    serve(sv);
    pthread_join(t, NULL);
    specd_ipc_service_destroy(sd);
    specd_ipc_service_destroy(sv);
    return 0;
}

/* ---- host side ------------------------------------------------------------------------------ */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

typedef struct figures {
    double p50, p99;
} figures;

static figures summarize(uint64_t *ns, size_t n) {
    qsort(ns, n, sizeof *ns, cmp_u64);
    figures f = {ns[n / 2] / 1e3, ns[(n * 99) / 100] / 1e3};
    return f;
}

static void fill_logits(float *l, uint64_t step) {
    /* Make the draft's first (step % K) tokens the argmax, so acceptance varies per step. */
    uint32_t draft[K];
    propose_tokens(step, draft);
    size_t accept = step % (K + 1);
    for (size_t r = 0; r < ROWS; r++) {
        float *row = l + r * V;
        if (r < accept) row[draft[r]] = 100.0f + (float)step;
    }
}

static int fail(const char *what, const specd_error *err) {
    fprintf(stderr, "bench_ipc: %s: %s\n", what, err->message);
    return 1;
}

static specd_status recv_reply(void *s, specd_ipc_decoder *dec, const SpecdWire__Envelope **r,
                               specd_error *err) {
    zmq_msg_t msg;
    zmq_msg_init(&msg);
    if (zmq_msg_recv(&msg, s, 0) < 0) {
        zmq_msg_close(&msg);
        err->status = SPECD_E_PEER;
        snprintf(err->message, sizeof err->message, "recv: %s", zmq_strerror(errno));
        return SPECD_E_PEER;
    }
    specd_status st = specd_ipc_frame_decode(dec, zmq_msg_data(&msg), zmq_msg_size(&msg), r, err);
    zmq_msg_close(&msg);
    return st;
}

/* The inline mode speaks the protocol on its own DEALER (the public client only sends logits by
 * reference, as specd does): Hello once, then per step a propose through the client and a Verify
 * whose inline_logits carry the rows. */
static int bench_inline(const char *ep_v, size_t big_frame, specd_ipc_client *cd, size_t steps,
                        uint64_t *t_out, uint64_t *checksum) {
    specd_error err;
    void *ctx = zmq_ctx_new();
    specd_ipc_sockopts o = {.hwm = 64,
                            .max_frame = big_frame,
                            .heartbeat_ivl_ms = 250,
                            .heartbeat_timeout_ms = 1500,
                            .send_timeout_ms = 5000};
    void *s = NULL;
    specd_ipc_decoder *dec = NULL;
    if (specd_ipc_socket_open(ctx, ZMQ_DEALER, ep_v, &o, &s, &err) != SPECD_OK ||
        specd_ipc_decoder_create(big_frame, &dec, &err) != SPECD_OK)
        return fail("inline socket", &err);
    size_t logit_bytes = (size_t)ROWS * V * sizeof(float);
    float *local = calloc(1, logit_bytes);
    uint64_t id = 0;
    const SpecdWire__Envelope *r = NULL;
    SpecdWire__ModelFingerprint m = SPECD_WIRE__MODEL_FINGERPRINT__INIT;
    m.vocab_size = model.vocab_size;
    m.tokenizer_hash = model.tokenizer_hash;
    SpecdWire__Hello h = SPECD_WIRE__HELLO__INIT;
    h.major = SPECD_IPC_MAJOR;
    h.schema_hash = SPECD_IPC_SCHEMA_HASH;
    h.model = &m;
    SpecdWire__Envelope e = SPECD_WIRE__ENVELOPE__INIT;
    e.request_id = ++id;
    e.body_case = SPECD_WIRE__ENVELOPE__BODY_HELLO;
    e.hello = &h;
    if (specd_ipc_send(s, NULL, 0, &e, big_frame, &err) != SPECD_OK ||
        recv_reply(s, dec, &r, &err) != SPECD_OK)
        return fail("inline hello", &err);
    uint32_t last[K + 1];
    size_t n_last = 0;
    for (size_t st = 0; st < WARMUP + steps; st++) {
        uint32_t draft[K];
        size_t nd = 0;
        fill_logits(local, st);
        uint64_t t0 = specd_now_ns();
        if (specd_ipc_client_propose(cd, 1, st, last, n_last, draft, K, &nd, &err) != SPECD_OK)
            return fail("inline propose", &err);
        SpecdWire__Verify v = SPECD_WIRE__VERIFY__INIT;
        v.seq_id = 1;
        v.step = st;
        v.n_draft_tokens = nd;
        v.draft_tokens = draft;
        v.has_inline_logits = 1;
        v.inline_logits.len = logit_bytes;
        v.inline_logits.data = (uint8_t *)local;
        SpecdWire__Envelope q = SPECD_WIRE__ENVELOPE__INIT;
        q.request_id = ++id;
        q.body_case = SPECD_WIRE__ENVELOPE__BODY_VERIFY;
        q.verify = &v;
        if (specd_ipc_send(s, NULL, 0, &q, big_frame, &err) != SPECD_OK ||
            recv_reply(s, dec, &r, &err) != SPECD_OK)
            return fail("inline verify", &err);
        uint64_t t1 = specd_now_ns();
        if (r->body_case != SPECD_WIRE__ENVELOPE__BODY_RESULT || r->request_id != id) {
            fprintf(stderr, "bench_ipc: inline verify: unexpected reply %d\n", (int)r->body_case);
            return 1;
        }
        *checksum += r->result->accepted;
        memcpy(last, r->result->emitted, r->result->n_emitted * sizeof *last);
        n_last = r->result->n_emitted;
        if (st >= WARMUP) t_out[st - WARMUP] = t1 - t0;
    }
    free(local);
    specd_ipc_decoder_destroy(dec);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}

int main(int argc, char **argv) {
    size_t steps = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000;
    if (steps < 100) steps = 100;
    char dir[] = "/tmp/specd-bench-XXXXXX";
    if (!mkdtemp(dir)) return 1;
    char ep_d[128], ep_v[128];
    snprintf(ep_d, sizeof ep_d, "ipc://%s/d.sock", dir);
    snprintf(ep_v, sizeof ep_v, "ipc://%s/v.sock", dir);
    size_t logit_bytes = (size_t)ROWS * V * sizeof(float);
    size_t big_frame = logit_bytes + 4096;

    pid_t pid = fork();
    if (pid == 0) _exit(run_daemons(ep_d, ep_v, big_frame));
    make_engine();

    specd_error err;
    specd_ipc_params p = specd_ipc_default_params();
    p.timeout_ms = 5000;
    p.retry_ms = 10;
    p.endpoint = ep_d;
    specd_ipc_client *cd = NULL, *cv = NULL;
    if (specd_ipc_client_create(&p, SPECD_IPC_ROLE_DRAFTER, &model, &cd, &err) != SPECD_OK)
        return fail("drafter client", &err);
    p.endpoint = ep_v;
    p.max_frame = big_frame;
    if (specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &model, &cv, &err) != SPECD_OK)
        return fail("verifier client", &err);
    for (int i = 0; i < 200; i++) {
        if (specd_ipc_client_ping(cd, NULL) == SPECD_OK &&
            specd_ipc_client_ping(cv, NULL) == SPECD_OK)
            break;
        usleep(20000);
    }
    specd_ipc_buffer *buf = NULL;
    if (specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, logit_bytes, 0, &buf, &err) != SPECD_OK)
        return fail("buffer", &err);
    if (specd_ipc_client_attach_buffer(cv, buf, &err) != SPECD_OK) return fail("attach", &err);
    uint32_t prompt[1] = {1};
    specd_ipc_seq_params sq = {.seq_id = 1,
                               .prompt = prompt,
                               .n_prompt = 1,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f}};
    if (specd_ipc_client_open_seq(cd, &sq, &err) != SPECD_OK ||
        specd_ipc_client_open_seq(cv, &sq, &err) != SPECD_OK)
        return fail("open", &err);

    float *logits = specd_ipc_buffer_data(buf);
    memset(logits, 0, logit_bytes);
    float *local = malloc(logit_bytes);
    memset(local, 0, logit_bytes);
    uint64_t *t_in = malloc(steps * sizeof *t_in), *t_shm = malloc(steps * sizeof *t_shm),
             *t_inl = malloc(steps * sizeof *t_inl), *t_ping = malloc(steps * sizeof *t_ping);
    uint64_t checksum[3] = {0, 0, 0};
    uint64_t shape[2] = {ROWS, V};
    uint32_t last[K + 1];
    size_t n_last = 0;

    for (size_t s = 0; s < WARMUP + steps; s++) {
        size_t idx = s >= WARMUP ? s - WARMUP : 0;
        uint32_t draft[K];
        specd_ipc_verify_result res;
        /* in-process anchor */
        fill_logits(local, s);
        uint64_t t0 = specd_now_ns();
        propose_tokens(s, draft);
        verify_greedy(local, draft, K, &res);
        uint64_t t1 = specd_now_ns();
        checksum[0] += res.accepted;
        if (s >= WARMUP) t_in[idx] = t1 - t0;

        /* ipc, logits by shared-buffer reference */
        fill_logits(logits, s);
        size_t nd = 0;
        t0 = specd_now_ns();
        if (specd_ipc_client_propose(cd, 1, s, last, n_last, draft, K, &nd, &err) != SPECD_OK)
            return fail("propose", &err);
        uint64_t seq;
        specd_ipc_ref ref;
        specd_ipc_buffer_publish(buf, NULL, &seq, NULL);
        specd_ipc_buffer_ref(buf, 0, 2, shape, SPECD_IPC_F32, seq, &ref, NULL);
        if (specd_ipc_client_verify(cv, 1, s, draft, nd, &ref, &res, &err) != SPECD_OK)
            return fail("verify", &err);
        t1 = specd_now_ns();
        checksum[1] += res.accepted;
        if (s >= WARMUP) t_shm[idx] = t1 - t0;
        /* The accepted tokens ride on the next propose, as a host would send them. */
        memcpy(last, res.emitted, res.n_emitted * sizeof *last);
        n_last = res.n_emitted;

        /* transport floor: two pings (one per daemon) */
        t0 = specd_now_ns();
        specd_ipc_client_ping(cd, NULL);
        specd_ipc_client_ping(cv, NULL);
        t1 = specd_now_ns();
        if (s >= WARMUP) t_ping[idx] = t1 - t0;
    }

    specd_ipc_client_destroy(cv);
    specd_ipc_buffer_destroy(buf);
    /* Inline logits: the verify message carries the 9 x V floats. */
    int rc = bench_inline(ep_v, big_frame, cd, steps, t_inl, &checksum[2]);

    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
    specd_ipc_client_destroy(cd);
    char path[160];
    snprintf(path, sizeof path, "%s/d.sock", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/v.sock", dir);
    unlink(path);
    rmdir(dir);
    if (rc != 0) return rc;
    if (checksum[0] != checksum[1] || checksum[0] != checksum[2]) {
        fprintf(stderr, "bench_ipc: modes disagree (%llu, %llu, %llu accepted)\n",
                (unsigned long long)checksum[0], (unsigned long long)checksum[1],
                (unsigned long long)checksum[2]);
        return 1;
    }
    figures in = summarize(t_in, steps), shm = summarize(t_shm, steps),
            inl = summarize(t_inl, steps), ping = summarize(t_ping, steps);
    printf("bench_ipc: k=%d V=%d, %zu steps (after %d warm-up), logits %zu bytes, "
           "same accepted count in all modes (%llu)\n",
           K, V, steps, WARMUP, logit_bytes, (unsigned long long)checksum[0]);
    printf("  %-34s p50 %9.1f us  p99 %9.1f us  (anchor)\n", "in-process calls", in.p50, in.p99);
    printf("  %-34s p50 %9.1f us  p99 %9.1f us  added p50 %+8.1f us  ratio %.2fx\n",
           "ipc, logits by shm reference", shm.p50, shm.p99, shm.p50 - in.p50, shm.p50 / in.p50);
    printf("  %-34s p50 %9.1f us  p99 %9.1f us  added p50 %+8.1f us  ratio %.2fx\n",
           "ipc, logits inside the message", inl.p50, inl.p99, inl.p50 - in.p50, inl.p50 / in.p50);
    printf("  %-34s p50 %9.1f us  p99 %9.1f us\n", "transport floor (2 pings)", ping.p50, ping.p99);
    free(local);
    free(t_in);
    free(t_shm);
    free(t_inl);
    free(t_ping);
    return 0;
}
