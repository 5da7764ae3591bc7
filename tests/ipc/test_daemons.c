/* The real daemon binaries (paths passed by CMake): --help, bad options, Hello refused on a model
 * mismatch, sequences, shared logit buffers mapped across processes with their references checked,
 * and SIGTERM: every request received is answered, then exit 0.
 * usage: test_daemons DRAFTER_BINARY VERIFIER_BINARY */
#include "test_main.h"

#include <dirent.h>
#include <string.h>
#include <zmq.h>

#include "daemon_util.h"
#include "ipc/frame.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "specd/sampling.h"

static const char *drafter_bin, *verifier_bin;
static const specd_ipc_fingerprint model = {.vocab_size = TEST_VOCAB,
                                            .tokenizer_hash = TEST_TOKHASH};

static specd_ipc_client *client(const char *ep, specd_ipc_role role,
                                const specd_ipc_fingerprint *m) {
    specd_error err;
    specd_ipc_client *c = daemon_client(ep, role, m, 2000, 0, &err);
    if (!c) fail_msg("client_create: %s", err.message);
    return c;
}

static int run_status(const char *bin, const char *arg) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(bin, bin, arg, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs bin with argv (NULL-terminated, argv[0] included) and its stderr into log; the exit code. */
static int run_logged(const char *bin, char *const argv[], const char *log) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        execv(bin, argv);
        _exit(127);
    }
    return daemon_wait_exit(pid, DAEMON_WAIT_MS); /* -1 (killed) if it kept running */
}

static int file_has(const char *path, const char *text);

static void test_help_and_bad_options(void **state) {
    (void)state;
    assert_int_equal(run_status(drafter_bin, "--help"), 0);
    assert_int_equal(run_status(verifier_bin, "--help"), 0);
    assert_int_equal(run_status(drafter_bin, "--no-such-option"), 2);
    assert_int_equal(run_status(verifier_bin, "--vocab=abc"), 2);
}

/* A daemon with no fingerprint to check hosts against (no --model, no typed --tokenizer-hash), or
 * a --model whose fingerprint cannot be computed, refuses to start and names the option: it would
 * otherwise listen and refuse every host. */
static void test_no_fingerprint_no_start(void **state) {
    (void)state;
    char dir[64] = "/tmp/specd-test-XXXXXX", ep[128], log[128], sock[128], notgguf[128];
    assert_non_null(mkdtemp(dir));
    snprintf(ep, sizeof ep, "ipc://%s/d.sock", dir);
    snprintf(sock, sizeof sock, "%s/d.sock", dir);
    snprintf(log, sizeof log, "%s/err.log", dir);
    snprintf(notgguf, sizeof notgguf, "%s/not.gguf", dir);
    FILE *f = fopen(notgguf, "w");
    assert_non_null(f);
    fputs("not a model\n", f);
    fclose(f);
    const char *bins[] = {drafter_bin, verifier_bin};
    for (int b = 0; b < 2; b++) {
        char *bare[] = {(char *)bins[b], "--endpoint", ep, NULL};
        assert_int_equal(run_logged(bins[b], bare, log), 2);
        assert_true(file_has(log, "--model"));
        assert_true(file_has(log, "--tokenizer-hash"));
        char *vocab_only[] = {(char *)bins[b], "--endpoint", ep, "--vocab", "49152", NULL};
        assert_int_equal(run_logged(bins[b], vocab_only, log), 2);
        assert_true(file_has(log, "no model fingerprint"));
        char *missing[] = {(char *)bins[b], "--endpoint", ep, "--model", "/nonexistent.gguf", NULL};
        assert_int_not_equal(run_logged(bins[b], missing, log), 0);
        assert_true(file_has(log, "--model /nonexistent.gguf"));
        char *bad[] = {(char *)bins[b], "--endpoint", ep, "--model", notgguf, NULL};
        assert_int_not_equal(run_logged(bins[b], bad, log), 0);
        assert_true(file_has(log, "cannot compute the model fingerprint"));
        assert_int_equal(access(sock, F_OK), -1); /* none of them listened */
    }
    unlink(log);
    unlink(notgguf);
    rmdir(dir);
}

static void test_drafter_sequences(void **state) {
    (void)state;
    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, drafter_bin, SPECD_IPC_ROLE_DRAFTER));
    specd_error err;
    specd_ipc_fingerprint wrong = {.vocab_size = 32000, .tokenizer_hash = TEST_TOKHASH};
    specd_ipc_client *c = client(f.ep, SPECD_IPC_ROLE_DRAFTER, &wrong);
    assert_int_equal(specd_ipc_client_connect(c, &err), SPECD_E_MISMATCH);
    assert_non_null(strstr(err.message, "vocab size 32000"));
    specd_ipc_client_destroy(c);
    /* Asking the drafter to be a verifier is refused too. */
    c = client(f.ep, SPECD_IPC_ROLE_VERIFIER, &model);
    assert_int_equal(specd_ipc_client_connect(c, &err), SPECD_E_MISMATCH);
    specd_ipc_client_destroy(c);

    c = client(f.ep, SPECD_IPC_ROLE_DRAFTER, &model);
    uint32_t prompt[4] = {1, 100, 200, 300};
    specd_ipc_seq_params sq = {.seq_id = 3,
                               .prompt = prompt,
                               .n_prompt = 4,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f},
                               .policy = "ngram"};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    for (uint32_t i = 0; i < 20; i++) {
        uint32_t t = 1000 + i;
        assert_int_equal(specd_ipc_client_commit(c, 3, &t, 1, &err), SPECD_OK);
    }
    uint64_t len, hash, mylen, myhash;
    assert_int_equal(specd_ipc_client_seq_info(c, 3, &len, &hash, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_history(c, 3, &mylen, &myhash, &err), SPECD_OK);
    assert_int_equal(len, 24);
    assert_int_equal(hash, myhash);
    /* ngram proposes what followed the last earlier occurrence of the suffix. */
    uint32_t rep[8] = {5, 6, 7, 8, 9, 5, 6, 7};
    specd_ipc_seq_params sr = {.seq_id = 4,
                               .prompt = rep,
                               .n_prompt = 8,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f},
                               .policy = "ngram",
                               .max_draft = 8};
    assert_int_equal(specd_ipc_client_open_seq(c, &sr, &err), SPECD_OK);
    uint32_t draft[8];
    size_t n = 0;
    if (specd_ipc_client_propose(c, 4, 1, NULL, 0, draft, 8, &n, &err) != SPECD_OK)
        fail_msg("propose: %s", err.message);
    assert_true(n >= 2);
    assert_int_equal(draft[0], 8);
    assert_int_equal(draft[1], 9);
    /* The commit piggybacked on the next propose moves the drafter on: after "8" the suffix
     * "6 7 8" continues with 9. */
    uint32_t acc[1] = {8};
    assert_int_equal(specd_ipc_client_propose(c, 4, 2, acc, 1, draft, 8, &n, &err), SPECD_OK);
    assert_true(n >= 1);
    assert_int_equal(draft[0], 9);
    assert_int_equal(specd_ipc_client_seq_info(c, 4, &len, &hash, &err), SPECD_OK);
    assert_int_equal(len, 9);
    /* Unknown and self-speculative policies are refused at open, and not kept by the client. */
    specd_ipc_seq_params bad = sr;
    bad.seq_id = 5;
    bad.policy = "no-such-policy";
    assert_int_equal(specd_ipc_client_open_seq(c, &bad, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "no-such-policy"));
    assert_int_equal(specd_ipc_client_history(c, 5, &len, &hash, &err), SPECD_E_STATE);
    /* Peers choose among the operator's policies by name: no options, paths or endpoints of
     * theirs (these used to probe files, load a model per sequence, or make the drafter call
     * itself). */
    const char *steer[] = {"ngram:bogus=1", "ngram:n=3", "draft:model=/etc/shadow",
                           "remote:endpoint=ipc:///tmp/x.sock", "draft"};
    for (size_t i = 0; i < sizeof steer / sizeof *steer; i++) {
        bad.policy = steer[i];
        assert_int_equal(specd_ipc_client_open_seq(c, &bad, &err), SPECD_E_INVALID_ARG);
        assert_non_null(strstr(err.message, "not served here"));
        assert_null(strstr(err.message, "magic"));
    }
    assert_true(specd_ipc_client_connected(c));
    specd_ipc_client_destroy(c);
    assert_int_equal(daemon_fixture_stop(&f), 0);
}

static int run_drafter_with(const char *arg) {
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        execl(drafter_bin, drafter_bin, "--endpoint", "ipc:///nonexistent/x.sock",
              "--tokenizer-hash", TEST_TOKHASH_ARG, "--policy", arg, (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The operator's --policy NAME=SPEC: bad ones stop the start; a served name is what peers use. */
static void test_drafter_serves_the_operators_policies(void **state) {
    (void)state;
    assert_int_equal(run_drafter_with("x=no-such-policy"), 1);
    assert_int_equal(run_drafter_with("x=remote"), 1);
    assert_int_equal(run_drafter_with("x=isd"), 1);
    assert_int_equal(run_drafter_with("x=ngram:bogus=1"), 1);
    assert_int_equal(run_drafter_with("nonameonly"), 2);
    daemon_fixture f;
    assert_true(daemon_temp_endpoint(&f));
    f.pid = fork();
    if (f.pid == 0) {
        execl(drafter_bin, drafter_bin, "--endpoint", f.ep, "--vocab", "49152",
              "--tokenizer-hash", TEST_TOKHASH_ARG, "--policy", "short=ngram:n=2,n_min=1",
              (char *)NULL);
        _exit(127);
    }
    assert_true(daemon_wait_ready(f.ep, SPECD_IPC_ROLE_DRAFTER));
    specd_ipc_client *c = client(f.ep, SPECD_IPC_ROLE_DRAFTER, &model);
    specd_error err;
    uint32_t rep[6] = {5, 6, 7, 9, 5, 6};
    specd_ipc_seq_params sq = {.seq_id = 1, .prompt = rep, .n_prompt = 6,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f},
                               .policy = "short", .max_draft = 4};
    if (specd_ipc_client_open_seq(c, &sq, &err) != SPECD_OK) fail_msg("open: %s", err.message);
    sq.seq_id = 2;
    sq.policy = "ngram"; /* not among this operator's */
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_E_INVALID_ARG);
    assert_non_null(strstr(err.message, "served: short"));
    uint32_t draft[4];
    size_t n = 0;
    assert_int_equal(specd_ipc_client_propose(c, 1, 1, NULL, 0, draft, 4, &n, &err), SPECD_OK);
    assert_true(n >= 1);
    assert_int_equal(draft[0], 7);
    specd_ipc_client_destroy(c);
    assert_int_equal(daemon_fixture_stop(&f), 0);
}

static int file_has(const char *path, const char *text) {
    char buf[8192] = "";
    FILE *fp = fopen(path, "r");
    if (!fp) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, fp);
    buf[n] = 0;
    fclose(fp);
    return strstr(buf, text) != NULL;
}

/* A second daemon on an endpoint in use refuses to start (libzmq's bind used to replace the
 * socket file and cut the first daemon off); a clean exit removes the socket file; a tcp daemon
 * says at start whether a client allow-list is active. */
static void test_operability(void **state) {
    (void)state;
    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER));
    char log[160], sock[160];
    snprintf(log, sizeof log, "%s/second.log", f.dir);
    snprintf(sock, sizeof sock, "%s/d.sock", f.dir);
    pid_t second = daemon_start(verifier_bin, f.ep, log);
    int code = daemon_wait_exit(second, DAEMON_WAIT_MS);
    assert_true(code > 0 && code < 128); /* exited by itself, with an error */
    assert_true(file_has(log, "in use"));
    unlink(log);
    /* the first one still serves */
    assert_true(daemon_wait_ready(f.ep, SPECD_IPC_ROLE_VERIFIER));
    assert_int_equal(daemon_stop(f.pid, SIGTERM), 0);
    assert_int_equal(access(sock, F_OK), -1); /* removed on the clean exit */

    char pub[41], sec[41], keyfile[160];
    assert_int_equal(zmq_curve_keypair(pub, sec), 0);
    snprintf(keyfile, sizeof keyfile, "%s/server.key", f.dir);
    FILE *kf = fopen(keyfile, "w");
    assert_non_null(kf);
    fprintf(kf, "%s\n", sec);
    fclose(kf);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", 20000 + (int)(getpid() % 20000));
    pid_t t = fork();
    if (t == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        dup2(fd, 2);
        execl(verifier_bin, verifier_bin, "--endpoint", ep, "--curve-secret-file", keyfile,
              "--tokenizer-hash", TEST_TOKHASH_ARG, (char *)NULL);
        _exit(127);
    }
    int seen = 0;
    for (uint64_t end = daemon_now_ms() + DAEMON_WAIT_MS; !seen && daemon_now_ms() < end;) {
        seen = file_has(log, "listening");
        if (!seen) sleep_ms(20);
    }
    daemon_stop(t, SIGTERM);
    assert_true(seen);
    assert_true(file_has(log, "no client allow-list"));
    unlink(log);
    unlink(keyfile);
    rmdir(f.dir);
}

static int count_ours(void) {
    char prefix[32];
    int n = snprintf(prefix, sizeof prefix, "specd-%u-", (unsigned)geteuid());
    DIR *d = opendir("/dev/shm");
    int count = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, (size_t)n) == 0) count++;
    if (d) closedir(d);
    return count;
}

static void test_verifier_buffers(void **state) {
    (void)state;
    enum { K = 8, V = TEST_VOCAB };
    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, verifier_bin, SPECD_IPC_ROLE_VERIFIER));
    specd_error err;
    specd_ipc_buffer *b = NULL;
    assert_int_equal(
        specd_ipc_buffer_create(SPECD_IPC_BUFFER_SHM, (size_t)(K + 1) * V * 4, 0, &b, &err),
        SPECD_OK);
    specd_ipc_client *c = client(f.ep, SPECD_IPC_ROLE_VERIFIER, &model);
    assert_int_equal(specd_ipc_client_attach_buffer(c, b, &err), SPECD_OK);
    /* The daemon mapped it; the name is gone. */
    assert_int_equal(count_ours(), 0);
    uint32_t prompt[1] = {1};
    specd_ipc_seq_params sq = {.seq_id = 1,
                               .prompt = prompt,
                               .n_prompt = 1,
                               .sampling = {.temperature = 1.0f, .top_p = 1.0f},
                               .rule = SPECD_ACCEPT_COUPLED};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    /* Logits for K + 1 rows; the draft is the keyed sample of rows 0-2, then a wrong token, so
     * the coupled rule must accept exactly 3 and emit row 3's keyed sample. */
    float *logits = specd_ipc_buffer_data(b);
    for (size_t i = 0; i < (size_t)(K + 1) * V; i++)
        logits[i] = (float)((i * 2654435761u) % 1000u) * 0.004f;
    specd_sampling_params spp = specd_sampling_default_params();
    specd_sampler *sampler = NULL;
    assert_int_equal(specd_sampler_create(&spp, V, &sampler, &err), SPECD_OK);
    uint32_t draft[K] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t keyed[K + 1];
    for (uint32_t i = 0; i <= K; i++) {
        specd_sample_key key = {.seed = 0, .sequence = 1, .position = 1 + i};
        assert_int_equal(
            specd_sampler_sample(sampler, logits + (size_t)i * V, V, key, &keyed[i], &err),
            SPECD_OK);
    }
    specd_sampler_destroy(sampler);
    for (int i = 0; i < 3; i++)
        draft[i] = (uint32_t)keyed[i];
    draft[3] = (uint32_t)(keyed[3] + 1) % V;
    uint64_t seq;
    assert_int_equal(specd_ipc_buffer_publish(b, NULL, &seq, &err), SPECD_OK);
    uint64_t shape[2] = {K + 1, V};
    specd_ipc_ref r;
    assert_int_equal(specd_ipc_buffer_ref(b, 0, 2, shape, SPECD_IPC_F32, seq, &r, &err), SPECD_OK);
    specd_ipc_verify_result res;
    if (specd_ipc_client_verify(c, 1, 1, draft, K, &r, &res, &err) != SPECD_OK)
        fail_msg("verify: %s", err.message);
    assert_int_equal(res.accepted, 3);
    assert_int_equal(res.n_emitted, 4);
    for (int i = 0; i < 3; i++)
        assert_int_equal(res.emitted[i], draft[i]);
    assert_int_equal(res.emitted[3], keyed[3]);
    assert_int_equal(res.n_stats, 4);
    assert_true(res.position_accepted[2] && !res.position_accepted[3]);
    /* Both sides appended the emitted tokens. */
    uint64_t len, hash, mylen, myhash;
    assert_int_equal(specd_ipc_client_seq_info(c, 1, &len, &hash, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_history(c, 1, &mylen, &myhash, &err), SPECD_OK);
    assert_int_equal(len, 5);
    assert_int_equal(hash, myhash);
    /* Stale, out of bounds, wrong shape: refused by the daemon before any use. */
    uint64_t seq2;
    assert_int_equal(specd_ipc_buffer_publish(b, NULL, &seq2, &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_verify(c, 1, 2, draft, K, &r, &res, &err), SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "stale"));
    specd_ipc_ref oob = r;
    oob.seq = seq2;
    oob.offset = 64;
    assert_int_equal(specd_ipc_client_verify(c, 1, 3, draft, K, &oob, &res, &err),
                     SPECD_E_PROTOCOL);
    assert_non_null(strstr(err.message, "exceed"));
    specd_ipc_ref narrow = r;
    narrow.seq = seq2;
    narrow.shape[1] = V - 1;
    assert_int_equal(specd_ipc_client_verify(c, 1, 4, draft, K, &narrow, &res, &err),
                     SPECD_E_MISMATCH);
    specd_ipc_ref unknown = r;
    unknown.seq = seq2;
    unknown.buffer_id ^= 1;
    assert_int_equal(specd_ipc_client_verify(c, 1, 5, draft, K, &unknown, &res, &err),
                     SPECD_E_PROTOCOL);
    specd_ipc_stats st;
    assert_int_equal(specd_ipc_client_stats(c, &st, &err), SPECD_OK);
    assert_int_equal(st.buffers_attached, 1);
    assert_int_equal(specd_ipc_client_detach_buffer(c, specd_ipc_buffer_id(b), &err), SPECD_OK);
    assert_int_equal(specd_ipc_client_stats(c, &st, &err), SPECD_OK);
    assert_int_equal(st.buffers_attached, 0);
    specd_ipc_client_destroy(c);
    specd_ipc_buffer_destroy(b);
    assert_int_equal(daemon_fixture_stop(&f), 0);
    assert_int_equal(count_ours(), 0);
}

static void test_sigterm_drains(void **state) {
    (void)state;
    enum { N = 200 };
    daemon_fixture f;
    assert_true(daemon_fixture_start(&f, drafter_bin, SPECD_IPC_ROLE_DRAFTER));
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    assert_int_equal(zmq_connect(s, f.ep), 0);
    specd_error err;
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
    assert_int_equal(specd_ipc_send(s, NULL, 0, &e, 1 << 20, &err), SPECD_OK);
    SpecdWire__Ping ping = SPECD_WIRE__PING__INIT;
    for (uint64_t i = 0; i < N; i++) {
        SpecdWire__Envelope p = SPECD_WIRE__ENVELOPE__INIT;
        p.request_id = 2 + i;
        p.body_case = SPECD_WIRE__ENVELOPE__BODY_PING;
        p.ping = &ping;
        assert_int_equal(specd_ipc_send(s, NULL, 0, &p, 1 << 20, &err), SPECD_OK);
    }
    /* Terminate while the requests are in flight. */
    kill(f.pid, SIGTERM);
    specd_ipc_decoder *dec = NULL;
    assert_int_equal(specd_ipc_decoder_create(0, &dec, NULL), SPECD_OK);
    uint64_t next = 1;
    for (;;) {
        zmq_pollitem_t it = {.socket = s, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 3000) != 1) break;
        char buf[256];
        int n = zmq_recv(s, buf, sizeof buf, 0);
        const SpecdWire__Envelope *r = NULL;
        assert_int_equal(specd_ipc_frame_decode(dec, buf, (size_t)n, &r, &err), SPECD_OK);
        assert_int_equal(r->request_id, next); /* each answered once, in order */
        next++;
    }
    assert_int_equal(next, N + 2);
    int status;
    assert_int_equal(waitpid(f.pid, &status, 0), f.pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    specd_ipc_decoder_destroy(dec);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(s);
    zmq_ctx_term(ctx);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/d.sock", f.dir);
    unlink(sock);
    rmdir(f.dir);
}

int main(int argc, char **argv) {
    if (!daemon_test_binaries(argc, argv, &drafter_bin, &verifier_bin)) return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help_and_bad_options),
        cmocka_unit_test(test_no_fingerprint_no_start),
        cmocka_unit_test(test_drafter_sequences),
        cmocka_unit_test(test_drafter_serves_the_operators_policies),
        cmocka_unit_test(test_verifier_buffers),
        cmocka_unit_test(test_sigterm_drains),
        cmocka_unit_test(test_operability),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
