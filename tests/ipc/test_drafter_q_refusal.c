/* Draft distributions in a CUDA IPC buffer (specd-drafter --q-device cuda[:N]) where they cannot
 * be used, without any device work:
 *   - the real specd-drafter with --q-device cuda on a machine without a CUDA runtime or device
 *     refuses to start, saying why (where a device exists it starts and answers instead); a bad
 *     --q-device value, or --q-device given to the verifier, is a usage error;
 *   - a host handed a Draft whose q lies in a CUDA buffer it cannot open (a scripted drafter
 *     sends the descriptor): a buffer of another device than the host's, a stale handle (its
 *     owner is gone), no CUDA runtime or device here: the drafts are dropped with one warning
 *     naming the reason, the client stays connected, and a session step with the `remote`
 *     policy goes on as a plain step (one row, one token).
 * usage: test_drafter_q_refusal DRAFTER_BINARY VERIFIER_BINARY */
#include "test_main.h"

#include <pthread.h>
#include <string.h>
#include <zmq.h>

#include "daemon_util.h"
#include "ipc/frame.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "kernels/cuda/cudart.h"
#include "peer_reply.h"
#include "specd/log.h"
#include "specd/spec_batch.h"

static const char *drafter_bin, *verifier_bin;
static const specd_ipc_fingerprint fp = {.vocab_size = TEST_VOCAB, .tokenizer_hash = TEST_TOKHASH};

static int have_device(void) {
    return specd_cudart_get(NULL) && specd_cuda_device_count() > 0;
}

/* Runs binary with args (NULL-terminated) and stderr into a file; its exit code and stderr. */
static int run_capture(const char *const *argv, char *out, size_t cap) {
    FILE *f = tmpfile(); /* unnamed: removed when closed */
    assert_non_null(f);
    int fd = fileno(f);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd, 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int code = daemon_wait_exit(pid, 20000);
    ssize_t n = pread(fd, out, cap - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    fclose(f);
    return code;
}

static void test_drafter_refuses_without_device(void **state) {
    (void)state;
    char text[4096];
    const char *bad[] = {drafter_bin, "--vocab", "49152", "--tokenizer-hash", TEST_TOKHASH_ARG,
                         "--q-device", "gpu", NULL};
    assert_int_equal(run_capture(bad, text, sizeof text), 2);
    assert_non_null(strstr(text, "--q-device"));
    const char *verifier[] = {verifier_bin, "--vocab", "49152", "--tokenizer-hash",
                              TEST_TOKHASH_ARG, "--q-device", "cuda", NULL};
    assert_int_equal(run_capture(verifier, text, sizeof text), 2);
    assert_non_null(strstr(text, "--q-device is a drafter option"));
    if (have_device()) {
        /* with a device it starts: shown by its answer */
        daemon_fixture d;
        assert_true(daemon_temp_endpoint(&d));
        d.pid = fork();
        if (d.pid == 0) {
            execl(drafter_bin, drafter_bin, "--endpoint", d.ep, "--vocab", "49152",
                  "--tokenizer-hash", TEST_TOKHASH_ARG, "--q-device", "cuda", (char *)NULL);
            _exit(127);
        }
        int ready = daemon_wait_ready(d.ep, SPECD_IPC_ROLE_DRAFTER);
        assert_int_equal(daemon_fixture_stop(&d), 0);
        assert_true(ready);
        print_message("a CUDA device is present: --q-device cuda starts\n");
        return;
    }
    daemon_fixture d;
    assert_true(daemon_temp_endpoint(&d));
    const char *cuda[] = {drafter_bin, "--endpoint", d.ep, "--vocab", "49152",
                          "--tokenizer-hash", TEST_TOKHASH_ARG, "--q-device", "cuda", NULL};
    int code = run_capture(cuda, text, sizeof text);
    daemon_fixture_clean(&d);
    print_message("specd-drafter --q-device cuda: exit %d: %s", code, text);
    assert_int_equal(code, 1);
    assert_non_null(strstr(text, "--q-device cuda:0"));
    assert_true(strstr(text, "CUDA runtime (libcudart) is not available") ||
                strstr(text, "no usable CUDA device 0"));
}

/* ---- a scripted drafter whose drafts carry q in a CUDA buffer -------------------------------- */

typedef struct fake_drafter {
    void *ctx, *sock;
    char dir[64], ep[128];
    pthread_t thread;
    volatile int stop;
    int proposes;
    /* the q buffer's descriptor sent with every draft */
    int32_t q_device;
    uint32_t owner_pid;
} fake_drafter;

static const uint32_t draft_tokens[] = {5, 6};

static void fake_reply(fake_drafter *f, const zmq_msg_t *rid, const SpecdWire__Envelope *q) {
    peer_reply r;
    peer_reply_init(&r, q, 91);
    SpecdWire__BufferDesc desc = SPECD_WIRE__BUFFER_DESC__INIT;
    uint8_t mem[SPECD_IPC_CUDA_HANDLE_BYTES], ev[SPECD_IPC_CUDA_HANDLE_BYTES];
    memset(mem, 0x5a, sizeof mem);
    memset(ev, 0x3c, sizeof ev);
    if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_PROPOSE) {
        f->proposes++;
        desc.buffer_id = 4242;
        desc.kind = SPECD_WIRE__BUFFER_KIND__BUFFER_CUDA;
        desc.bytes = 2 * (uint64_t)TEST_VOCAB * sizeof(float);
        desc.has_owner_pid = 1;
        desc.owner_pid = f->owner_pid;
        desc.has_cuda_mem_handle = desc.has_cuda_event_handle = desc.has_cuda_device = 1;
        desc.cuda_mem_handle.len = desc.cuda_event_handle.len = SPECD_IPC_CUDA_HANDLE_BYTES;
        desc.cuda_mem_handle.data = mem;
        desc.cuda_event_handle.data = ev;
        desc.cuda_device = f->q_device;
        peer_reply_draft_q(&r, q->propose, 2, draft_tokens, &desc, TEST_VOCAB,
                           (uint64_t)f->proposes, 0);
    }
    specd_ipc_send(f->sock, zmq_msg_data((zmq_msg_t *)rid), zmq_msg_size((zmq_msg_t *)rid), &r.e,
                   1 << 20, NULL);
}

static void *fake_run(void *arg) {
    fake_drafter *f = arg;
    specd_ipc_decoder *dec = NULL;
    if (specd_ipc_decoder_create(0, &dec, NULL) != SPECD_OK) return NULL;
    while (!f->stop) {
        zmq_pollitem_t it = {.socket = f->sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 10) != 1) continue;
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        zmq_msg_init(&body);
        const SpecdWire__Envelope *q = NULL;
        if (zmq_msg_recv(&rid, f->sock, 0) >= 0 && zmq_msg_recv(&body, f->sock, 0) >= 0 &&
            specd_ipc_frame_decode(dec, zmq_msg_data(&body), zmq_msg_size(&body), &q, NULL) ==
                SPECD_OK)
            fake_reply(f, &rid, q);
        zmq_msg_close(&rid);
        zmq_msg_close(&body);
    }
    specd_ipc_decoder_destroy(dec);
    return NULL;
}

static void fake_start(fake_drafter *f, int32_t q_device, uint32_t owner_pid) {
    memset(f, 0, sizeof *f);
    f->q_device = q_device;
    f->owner_pid = owner_pid;
    snprintf(f->dir, sizeof f->dir, "/tmp/specd-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->ep, sizeof f->ep, "ipc://%s/d.sock", f->dir);
    f->ctx = zmq_ctx_new();
    f->sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    assert_int_equal(zmq_bind(f->sock, f->ep), 0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_run, f), 0);
}

static void fake_stop(fake_drafter *f) {
    f->stop = 1;
    pthread_join(f->thread, NULL);
    int zero = 0;
    zmq_setsockopt(f->sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(f->sock);
    zmq_ctx_term(f->ctx);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/d.sock", f->dir);
    unlink(sock);
    rmdir(f->dir);
}

/* Warnings logged, kept for the checks. */
static char warnings[4096];
static void keep_warning(specd_log_level level, const char *message, void *user) {
    (void)user;
    if (level < SPECD_LOG_WARN) return;
    size_t n = strlen(warnings);
    snprintf(warnings + n, sizeof warnings - n, "%s\n", message);
}

/* A pid that no process has: a reaped child's. */
static uint32_t gone_pid(void) {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    assert_int_equal(daemon_wait_exit(pid, 5000), 0);
    return (uint32_t)pid;
}

/* One proposal from a fake drafter whose q buffer is (q_device, owner): dropped, with a warning
 * that says `why` (NULL: any reason). */
static void expect_dropped(int32_t q_device, uint32_t owner, int host_device, const char *why) {
    fake_drafter f;
    fake_start(&f, q_device, owner);
    specd_error err;
    specd_ipc_client *c = daemon_client(f.ep, SPECD_IPC_ROLE_DRAFTER, &fp, 5000, 0, &err);
    assert_non_null(c);
    uint32_t prompt[] = {1, 2, 3};
    specd_ipc_seq_params sq = {.seq_id = 1, .prompt = prompt, .n_prompt = 3,
                               .sampling = {.temperature = 0.8f, .top_p = 1.0f}, .seed = 1,
                               .max_draft = 4, .rule = SPECD_ACCEPT_REJECTION};
    assert_int_equal(specd_ipc_client_open_seq(c, &sq, &err), SPECD_OK);
    static float q[4 * (size_t)TEST_VOCAB];
    uint32_t draft[4];
    size_t nd = 9;
    int has_q = 1;
    const float *q_dev = (const float *)q;
    warnings[0] = '\0';
    specd_log_set(keep_warning, NULL, SPECD_LOG_WARN);
    specd_status st =
        host_device >= 0
            ? specd_ipc_client_propose_q_device(c, 1, 0, NULL, 0, draft, 4, &nd, q, &has_q,
                                                host_device, &q_dev, &err)
            : specd_ipc_client_propose_q(c, 1, 0, NULL, 0, draft, 4, &nd, q, &has_q, &err);
    specd_log_set(NULL, NULL, SPECD_LOG_WARN);
    print_message("q on device %d, owner %u, host %d: %s", q_device, owner, host_device,
                  warnings);
    assert_int_equal(st, SPECD_OK);
    assert_int_equal(f.proposes, 1);
    assert_int_equal(nd, 0);
    assert_false(has_q);
    if (host_device >= 0) assert_null(q_dev);
    assert_true(specd_ipc_client_connected(c));
    assert_non_null(strstr(warnings, "draft distributions from"));
    assert_non_null(strstr(warnings, "unusable, drafts dropped"));
    if (why && !strstr(warnings, why)) fail_msg("the warning does not say '%s'", why);
    /* nothing to fetch: the proposal left nothing on the device */
    assert_int_equal(specd_ipc_client_fetch_q(c, q, &err), SPECD_E_STATE);
    specd_ipc_client_destroy(c);
    fake_stop(&f);
}

static void test_client_drops_unopenable_q(void **state) {
    (void)state;
    uint32_t me = (uint32_t)getpid();
    /* another device than the host's: refused before any CUDA call */
    expect_dropped(1, me, 0, "lives on CUDA device 1; this host works on device 0");
    /* its owner is gone: a stale handle, refused before any CUDA call (host rows wanted) */
    expect_dropped(0, gone_pid(), -1, "stale CUDA handle");
    if (!have_device()) {
        /* no CUDA runtime or device here: host rows and device rows alike */
        expect_dropped(0, me, -1, NULL);
        expect_dropped(0, me, 0, NULL);
        assert_true(strstr(warnings, "not available") || strstr(warnings, "no usable CUDA"));
    }
}

/* The session's step with the `remote` policy on such a drafter: a plain step. */
static void test_session_step_goes_on_plainly(void **state) {
    (void)state;
    fake_drafter f;
    fake_start(&f, 1, (uint32_t)getpid()); /* a device the host does not work on */
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = (int32_t)TEST_VOCAB;
    sp.max_draft = 4;
    specd_spec *spec = NULL;
    specd_error err;
    assert_int_equal(specd_spec_create(&sp, &spec, &err), SPECD_OK);
    char opts[300];
    snprintf(opts, sizeof opts,
             "endpoint=%s,policy=s,tokenizer_hash=" TEST_TOKHASH_ARG ",timeout_ms=5000", f.ep);
    specd_seq_params p = specd_seq_default_params();
    p.policy = "remote";
    p.policy_options = opts;
    p.rule = SPECD_ACCEPT_REJECTION;
    p.sampling.temperature = 0.8f;
    p.seed = 3;
    p.max_tokens = 8;
    p.adaptive = 0;
    const int32_t prompt[] = {1, 2, 3};
    specd_log_set(keep_warning, NULL, SPECD_LOG_WARN);
    warnings[0] = '\0';
    if (specd_spec_seq_open(spec, 0, prompt, 3, &p, &err) != SPECD_OK)
        fail_msg("open: %s", err.message);
    specd_step_layout lay;
    assert_int_equal(specd_spec_seq_layout(spec, 0, &lay, &err), SPECD_OK);
    assert_int_equal(f.proposes, 1);
    assert_int_equal(lay.n_tokens, 1); /* the drafts were dropped: a plain step */
    assert_int_equal(lay.n_rows, 1);
    static float row[TEST_VOCAB];
    for (uint32_t x = 0; x < TEST_VOCAB; x++) row[x] = (float)(x % 97) * 0.01f;
    row[77] = 9.0f;
    specd_logits lg = {.data = row, .row_stride = TEST_VOCAB, .n_rows = 1,
                       .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_HOST};
    specd_step_outcome o;
    assert_int_equal(specd_spec_seq_verify_logits(spec, 0, &lg, &o, &err), SPECD_OK);
    specd_log_set(NULL, NULL, SPECD_LOG_WARN);
    assert_int_equal(o.n_emitted, 1);
    assert_int_equal(o.n_drafted, 0);
    assert_non_null(strstr(warnings, "drafts dropped"));
    specd_spec_destroy(spec);
    fake_stop(&f);
}

int main(int argc, char **argv) {
    if (!daemon_test_binaries(argc, argv, &drafter_bin, &verifier_bin)) return 2;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_drafter_refuses_without_device),
                                       cmocka_unit_test(test_client_drops_unopenable_q),
                                       cmocka_unit_test(test_session_step_goes_on_plainly)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
