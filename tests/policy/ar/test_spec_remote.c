/* The host API with a remote verifier (specd_spec_params.verifier_endpoint): a real specd-verifier
 * process over a real ZeroMQ ipc:// socket decides the drafting steps of a host-driven session,
 * and the output is token-identical to in-process verification, also when the daemon is killed
 * mid-sequence (steps are then decided in-process) and restarted (it verifies again). Bad setups
 * are refused with a message. The "target" is a deterministic function of (position, token), so
 * the host loop needs no model. */
#include "test_main.h"

#include "ipc/daemon_util.h"
#include "ipc/service.h"

#include <pthread.h>
#include "specd/spec.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

enum { V = TEST_VOCAB, MAX_DRAFT = 4, N_TOKENS = 48 };

static const char *verifier_bin;
static char dir[64], ep[128];
static pid_t d; /* the daemon, 0 when none runs (killed by the teardown if a test fails) */

static int teardown(void **s) {
    (void)s;
    if (d > 0) daemon_stop(d, SIGKILL);
    d = 0;
    return 0;
}

#define TOY_V V
#include "toy_drafter.h"

/* The drafter and rule run() uses: the deterministic toy under the default rule, or the
 * sampling toy (it reports q) under REJECTION. */
static int with_q;

static float logits_local[(MAX_DRAFT + 1) * (size_t)V];

static specd_seq_params seq_params(float temperature) {
    specd_seq_params p = specd_seq_default_params();
    p.policy_ops = with_q ? &toy_q_ops : &toy_ops;
    if (with_q) p.rule = SPECD_ACCEPT_REJECTION;
    p.sampling.temperature = temperature;
    p.sampling.top_k = 50;
    p.seed = 7;
    p.max_tokens = N_TOKENS;
    p.adaptive = 0; /* every step drafts: every step is a remote verification */
    return p;
}

/* One step of the host loop: the toy target's logits for the laid-out rows, written where the
 * verifier reads them when there is one. */
static specd_status host_step(specd_spec *spec, specd_step_outcome *o, specd_error *err) {
    specd_step_layout lay;
    specd_status st = specd_spec_seq_layout(spec, 0, &lay, err);
    if (st != SPECD_OK) return st;
    float *out = specd_spec_verifier_logits(spec);
    if (!out) out = logits_local;
    for (int32_t r = 0; r < lay.n_rows; r++)
        target_row(lay.pos[lay.rows[r]], lay.tokens[lay.rows[r]], out + (size_t)r * V);
    return specd_spec_seq_verify(spec, 0, out, o, err);
}

static const int32_t prompt[] = {11, 22, 33, 44};

/* Runs the sequence to the end; kill_at >= 0: kill -9 the daemon before that step, restart it
 * 6 steps later. Returns the output (static storage) and the stats. */
static int64_t run(specd_spec *spec, float temperature, int kill_at, pid_t *daemon,
                   int32_t *out, specd_seq_stats *stats) {
    specd_error err;
    specd_seq_params p = seq_params(temperature);
    if (specd_spec_seq_open(spec, 0, prompt, 4, &p, &err) != SPECD_OK) fail_msg("%s", err.message);
    specd_step_outcome o;
    for (int step = 0; !specd_spec_seq_done(spec, 0); step++) {
        if (step == kill_at) {
            assert_int_equal(daemon_stop(*daemon, SIGKILL), 128 + SIGKILL);
            *daemon = 0;
        }
        if (kill_at >= 0 && step == kill_at + 6) {
            *daemon = daemon_start(verifier_bin, ep, NULL);
            assert_true(daemon_wait_ready(ep, SPECD_IPC_ROLE_VERIFIER));
            sleep_ms(600); /* past the client's reconnect back-off */
        }
        if (host_step(spec, &o, &err) != SPECD_OK) fail_msg("step %d: %s", step, err.message);
    }
    int64_t n;
    const int32_t *toks = specd_spec_seq_output(spec, 0, &n);
    memcpy(out, toks, (size_t)n * sizeof *toks);
    assert_int_equal(specd_spec_seq_stats(spec, 0, stats, &err), SPECD_OK);
    specd_spec_seq_close(spec, 0);
    return n;
}

static specd_spec *make_spec(const char *endpoint, uint64_t hash, specd_status want) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAX_DRAFT;
    sp.max_seqs = 2;
    sp.verifier_endpoint = endpoint;
    sp.verifier_timeout_ms = 300;
    sp.verifier_tokenizer_hash = hash;
    specd_spec *spec = NULL;
    specd_error err;
    specd_status st = specd_spec_create(&sp, &spec, &err);
    if (st != want) fail_msg("spec_create: %d (want %d): %s", st, want, err.message);
    return spec;
}

static void test_identical_to_in_process(void **s) {
    (void)s;
    d = daemon_start(verifier_bin, ep, NULL);
    assert_true(daemon_wait_ready(ep, SPECD_IPC_ROLE_VERIFIER));
    specd_spec *local = make_spec(NULL, 0, SPECD_OK);
    specd_spec *remote = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    assert_null(specd_spec_verifier_logits(local));
    assert_non_null(specd_spec_verifier_logits(remote));
    static int32_t a[N_TOKENS], b[N_TOKENS];
    const float temps[] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        specd_seq_stats sa, sb;
        int64_t na = run(local, temps[t], -1, NULL, a, &sa);
        int64_t nb = run(remote, temps[t], -1, &d, b, &sb);
        assert_int_equal(na, N_TOKENS);
        assert_int_equal(nb, na);
        assert_memory_equal(a, b, (size_t)na * sizeof *a);
        assert_int_equal(sa.n_remote_verified, 0);
        assert_int_equal(sb.n_remote_verified, sb.n_drafts); /* all decided by the daemon */
        assert_int_equal(sb.n_remote_fallback, 0);
        assert_true(sb.n_drafts > 5);
        /* same decisions, so the same acceptance: some accepted, some rejected */
        assert_int_equal(sb.n_accepted, sa.n_accepted);
        assert_true(sb.n_accepted > 0 && sb.n_accepted < sb.n_draft_tokens);
    }
    specd_spec_destroy(local);
    specd_spec_destroy(remote);
    assert_int_equal(daemon_stop(d, SIGTERM), 0);
    d = 0;
}

/* REJECTION with a sampling drafter's q: the rows go with the logits in the shared buffer
 * (Verify.q) and the daemon's CPU engine decides every drafting step, output identical. A q row
 * that is not a distribution: the daemon refuses the step, the host decides it in-process and
 * reports the same error at the same step as the in-process run. */
static void test_rejection_with_q(void **s) {
    (void)s;
    d = daemon_start(verifier_bin, ep, NULL);
    assert_true(daemon_wait_ready(ep, SPECD_IPC_ROLE_VERIFIER));
    specd_spec *local = make_spec(NULL, 0, SPECD_OK);
    specd_spec *remote = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    static int32_t a[N_TOKENS], b[N_TOKENS];
    specd_seq_stats sa, sb;
    with_q = 1;
    int64_t na = run(local, 0.8f, -1, NULL, a, &sa);
    int64_t nb = run(remote, 0.8f, -1, &d, b, &sb);
    assert_int_equal(na, N_TOKENS);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_int_equal(sb.n_remote_verified, sb.n_drafts);
    assert_int_equal(sb.n_remote_fallback, 0);
    assert_int_equal(sb.n_accepted, sa.n_accepted);
    assert_true(sb.n_accepted > 0 && sb.n_accepted < sb.n_draft_tokens);
    printf("rejection with q through host memory: %lld tokens, %lld/%lld steps remote, "
           "%lld/%lld drafts accepted\n", (long long)nb, (long long)sb.n_remote_verified,
           (long long)sb.n_drafts, (long long)sb.n_accepted, (long long)sb.n_draft_tokens);

    /* a corrupted q row at the 4th drafting step (history 4 + 3 steps' tokens at least) */
    specd_spec *specs[2] = {local, remote};
    specd_status got[2];
    int steps[2];
    char msg[2][256];
    static int32_t outs[2][N_TOKENS];
    int64_t n_out[2];
    for (int i = 0; i < 2; i++) {
        specd_error err;
        specd_seq_params p = seq_params(0.8f);
        toy_q_corrupt_at = 10;
        assert_int_equal(specd_spec_seq_open(specs[i], 0, prompt, 4, &p, &err), SPECD_OK);
        specd_step_outcome o;
        got[i] = SPECD_OK;
        for (steps[i] = 0; got[i] == SPECD_OK && !specd_spec_seq_done(specs[i], 0); steps[i]++)
            got[i] = host_step(specs[i], &o, &err);
        snprintf(msg[i], sizeof msg[i], "%s", got[i] == SPECD_OK ? "" : err.message);
        const int32_t *toks = specd_spec_seq_output(specs[i], 0, &n_out[i]);
        memcpy(outs[i], toks, (size_t)n_out[i] * sizeof *toks);
        specd_spec_seq_close(specs[i], 0);
    }
    toy_q_corrupt_at = -1;
    with_q = 0;
    printf("corrupted q: in-process %d at step %d (%s); remote %d at step %d (%s)\n", got[0],
           steps[0], msg[0], got[1], steps[1], msg[1]);
    assert_int_not_equal(got[0], SPECD_OK); /* the corruption was reached */
    assert_int_equal(got[1], got[0]);
    assert_int_equal(steps[1], steps[0]);
    assert_string_equal(msg[1], msg[0]);
    assert_int_equal(n_out[1], n_out[0]);
    assert_memory_equal(outs[0], outs[1], (size_t)n_out[0] * sizeof **outs);
    specd_spec_destroy(local);
    specd_spec_destroy(remote);
    assert_int_equal(daemon_stop(d, SIGTERM), 0);
    d = 0;
}

static void test_daemon_killed_and_restarted(void **s) {
    (void)s;
    d = daemon_start(verifier_bin, ep, NULL);
    assert_true(daemon_wait_ready(ep, SPECD_IPC_ROLE_VERIFIER));
    specd_spec *local = make_spec(NULL, 0, SPECD_OK);
    specd_spec *remote = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    static int32_t a[N_TOKENS], b[N_TOKENS];
    specd_seq_stats sa, sb;
    int64_t na = run(local, 0.8f, -1, NULL, a, &sa);
    int64_t nb = run(remote, 0.8f, 4, &d, b, &sb);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_true(sb.n_remote_fallback >= 1);      /* decided here while it was down */
    assert_true(sb.n_remote_verified >= 4 + 1);  /* before the kill and after the restart */
    assert_int_equal(sb.n_remote_verified + sb.n_remote_fallback, sb.n_drafts);
    specd_spec_destroy(local);
    specd_spec_destroy(remote);
    if (d) assert_int_equal(daemon_stop(d, SIGTERM), 0);
    d = 0;
}

static void test_bad_setups_are_refused(void **s) {
    (void)s;
    make_spec("foo://nowhere", 0, SPECD_E_INVALID_ARG);
    make_spec("tcp://127.0.0.1:1", 0, SPECD_E_INVALID_ARG); /* tcp needs CURVE keys */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.verifier_endpoint = ep;
    sp.verifier_timeout_ms = 0;
    specd_spec *spec = NULL;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "verifier_timeout_ms"));

    d = daemon_start(verifier_bin, ep, NULL);
    assert_true(daemon_wait_ready(ep, SPECD_IPC_ROLE_VERIFIER));
    spec = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    specd_seq_params p = seq_params(0.8f);
    p.rule = SPECD_ACCEPT_REJECTION; /* exact rejection is sent (with q), relaxed is not */
    p.tau = 0.5f;
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 4, &p, &err), SPECD_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "relaxed"));
    p = seq_params(0.8f);
    p.policy_ops = NULL;
    p.policy = "isd";
    assert_int_equal(specd_spec_seq_open(spec, 0, prompt, 4, &p, &err), SPECD_E_UNSUPPORTED);
    assert_non_null(strstr(err.message, "isd"));
    specd_spec_destroy(spec);
    assert_int_equal(daemon_stop(d, SIGTERM), 0);
    d = 0;

    /* no daemon yet is not an error: verified in-process */
    spec = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    static int32_t out[N_TOKENS];
    specd_seq_stats st;
    assert_int_equal(run(spec, 0.0f, -1, NULL, out, &st), N_TOKENS);
    assert_int_equal(st.n_remote_verified, 0);
    assert_int_equal(st.n_remote_fallback, st.n_drafts);
    specd_spec_destroy(spec);
}

/* A daemon for another tokenizer refuses our Hello: a dead peer, not a failed session. Every step
 * is verified in-process while it runs (at the spec's creation and mid-run), and once a matching
 * daemon takes its place the host reconnects and the daemon decides again; the output is the
 * in-process one throughout. */
static void test_refusing_daemon_is_a_dead_peer(void **s) {
    (void)s;
    d = daemon_start_hash(verifier_bin, ep, "1234", NULL); /* not TEST_TOKHASH */
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = ep;
    p.retry_ms = 0;
    specd_ipc_fingerprint other = {.vocab_size = TEST_VOCAB, .tokenizer_hash = 0x1234};
    specd_ipc_client *probe = NULL;
    assert_int_equal(specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &other, &probe, NULL),
                     SPECD_OK);
    int up = 0; /* listening: it answers a Hello with its own fingerprint */
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS; !up && daemon_now_ms() < end;)
        if (!(up = specd_ipc_client_ping(probe, NULL) == SPECD_OK)) sleep_ms(50);
    specd_ipc_client_destroy(probe);
    assert_true(up);
    specd_spec *local = make_spec(NULL, 0, SPECD_OK);
    specd_spec *spec = make_spec(ep, TEST_TOKHASH, SPECD_OK); /* refused: not an error */
    static int32_t a[N_TOKENS], b[N_TOKENS];
    specd_seq_stats sa, sb;
    int64_t na = run(local, 0.8f, -1, NULL, a, &sa);
    int64_t nb = run(spec, 0.8f, -1, NULL, b, &sb);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_int_equal(sb.n_remote_verified, 0);
    assert_int_equal(sb.n_remote_fallback, sb.n_drafts);
    /* mid-run: the refusing daemon dies before step 4, a matching one is up from step 10 */
    nb = run(spec, 0.8f, 4, &d, b, &sb);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a);
    assert_true(sb.n_remote_fallback >= 4);     /* refused, then gone */
    assert_true(sb.n_remote_verified >= 1);     /* the matching daemon decided */
    assert_int_equal(sb.n_remote_verified + sb.n_remote_fallback, sb.n_drafts);
    specd_spec_destroy(local);
    specd_spec_destroy(spec);
    if (d) assert_int_equal(daemon_stop(d, SIGTERM), 0);
    d = 0;
}

/* A verifier that answers plausibly and wrongly (every draft accepted, then token 0): what a host
 * got from a daemon holding another sequence's seed or history. Served in this process over the
 * same ZeroMQ ipc:// socket and shared buffer. */
static specd_status lie_ok(void *u, uint64_t o, const SpecdWire__OpenSeq *m, specd_error *e) {
    (void)u, (void)o, (void)m, (void)e;
    return SPECD_OK;
}
static specd_status lie_close(void *u, uint64_t o, uint64_t id, specd_error *e) {
    (void)u, (void)o, (void)id, (void)e;
    return SPECD_OK;
}
static specd_status lie_commit(void *u, uint64_t o, uint64_t id, const uint32_t *t, size_t n,
                               int rb, uint64_t to, specd_error *e) {
    (void)u, (void)o, (void)id, (void)t, (void)n, (void)rb, (void)to, (void)e;
    return SPECD_OK;
}
static specd_status lie_verify(void *u, uint64_t o, const SpecdWire__Verify *m,
                               const specd_ipc_view *l, const specd_ipc_view *q,
                               specd_ipc_verify_result *out, specd_error *e) {
    (void)u, (void)o, (void)l, (void)q, (void)e;
    for (size_t i = 0; i < m->n_draft_tokens; i++) out->emitted[i] = m->draft_tokens[i];
    out->emitted[m->n_draft_tokens] = 0;
    out->n_emitted = m->n_draft_tokens + 1;
    out->accepted = (uint32_t)m->n_draft_tokens;
    return SPECD_OK;
}
static volatile int liar_stop;
static void *liar_thread(void *svc) {
    specd_ipc_service_run(svc, -1, &liar_stop, 10, NULL);
    return NULL;
}

static void test_inconsistent_answers_fall_back(void **s) {
    (void)s;
    specd_ipc_service_params p = specd_ipc_service_default_params(SPECD_IPC_ROLE_VERIFIER);
    p.model = (specd_ipc_fingerprint){.vocab_size = V, .tokenizer_hash = TEST_TOKHASH};
    p.endpoint = ep;
    p.max_frame = (size_t)(MAX_DRAFT + 2) * V * 4;
    specd_ipc_handlers h = {.open_seq = lie_ok, .close_seq = lie_close, .commit = lie_commit,
                            .verify = lie_verify};
    specd_ipc_service *svc = NULL;
    specd_error err;
    if (specd_ipc_service_create(&p, &h, &svc, &err) != SPECD_OK) fail_msg("%s", err.message);
    pthread_t t;
    liar_stop = 0;
    pthread_create(&t, NULL, liar_thread, svc);
    specd_spec *local = make_spec(NULL, 0, SPECD_OK);
    specd_spec *remote = make_spec(ep, TEST_TOKHASH, SPECD_OK);
    static int32_t a[N_TOKENS], b[N_TOKENS];
    specd_seq_stats sa, sb;
    int64_t na = run(local, 0.8f, -1, NULL, a, &sa);
    int64_t nb = run(remote, 0.8f, -1, NULL, b, &sb);
    liar_stop = 1;
    pthread_join(t, NULL);
    specd_ipc_service_destroy(svc);
    assert_int_equal(nb, na);
    assert_memory_equal(a, b, (size_t)na * sizeof *a); /* not the liar's tokens */
    assert_int_equal(sb.n_remote_verified, 0);         /* its first answer was caught */
    assert_int_equal(sb.n_remote_fallback, sb.n_drafts);
    specd_spec_destroy(local);
    specd_spec_destroy(remote);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s VERIFIER\n", argv[0]);
        return 2;
    }
    verifier_bin = argv[1];
    snprintf(dir, sizeof dir, "/tmp/specd-rvt.%ld", (long)getpid());
    if (mkdir(dir, 0700) != 0) return 1;
    snprintf(ep, sizeof ep, "ipc://%s/verifier.sock", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_identical_to_in_process, teardown),
        cmocka_unit_test_teardown(test_rejection_with_q, teardown),
        cmocka_unit_test_teardown(test_daemon_killed_and_restarted, teardown),
        cmocka_unit_test_teardown(test_bad_setups_are_refused, teardown),
        cmocka_unit_test_teardown(test_refusing_daemon_is_a_dead_peer, teardown),
        cmocka_unit_test_teardown(test_inconsistent_answers_fall_back, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/verifier.sock", dir);
    unlink(sock);
    rmdir(dir);
    return rc;
}
