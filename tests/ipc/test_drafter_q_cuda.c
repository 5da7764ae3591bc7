/* The drafter's draft distributions q through CUDA IPC, end to end between processes: a real
 * specd-drafter --q-device cuda:0 serving the draft policy with sample=1 (the default model as
 * its own drafter) and a host with CUDA logits (host API v2, specd_logits.device = CUDA; the
 * target is the same model on the CPU with noise on its logits, its rows uploaded to the device)
 * verifying in process
 * under REJECTION at T 0.8, with the `remote` policy. Shown here:
 *   - output token-identical to the same run with the drafter's q through shared host memory
 *     (a specd-drafter without --q-device), and to a run that reads the device q on the host
 *     (SPECD_CUDA_VERIFY=host: the session fetches the rows and checks them first);
 *   - with device q, every sampled draft's q stayed on the device (no fetch to the host) and
 *     every step was decided by the device kernel (specd_device_verify_count);
 *   - q rows on the device that are not distributions (a drafter of this test's own, this binary
 *     run as --bad-q-drafter): the kernel's BAD_Q sends each step to the host path, which fetches
 *     the rows, refuses them, drops the drafts with a warning: plain steps, plain decoding's
 *     output, no step lost; and rows referenced past the buffer's end are refused on arrival
 *     (drafts dropped by the client, plain steps);
 *   - with a specd-verifier --device cuda (its path the optional second argument), q never
 *     reaches the host: the rows go device to device into the host's CUDA IPC pool beside the
 *     logits and the daemon decides there, every drafting step, output identical;
 *   - kill -9 of the drafter mid-generation: the host goes on plainly, every step still decided
 *     on the device, output identical to the same schedule with q through shared memory;
 *   - device memory (cudaMemGetInfo, printed) is the same after the drafters are gone (one of
 *     them killed) as before they started: nothing left mapped or allocated.
 * Skipped (77) without a CUDA runtime or device, or without the model (SPECD_TEST_MODEL).
 * usage: test_drafter_q_cuda SPECD_DRAFTER [SPECD_VERIFIER] */
#include "test_check.h"
#include "test_main.h"

#include "ipc/buffer.h"
#include "ipc/daemon_util.h"
#include "ipc/drafter_q_seq.h"
#include "ipc/peer_reply.h"
#include "ipc/frame.h"
#include "ipc/schema_hash.h"
#include "ipc/transport.h"
#include "kernels/cuda/cudart.h"
#include "policy/ar/remote_q.h"
#include "verifier/remote/remote_verify.h"
#include "session/spec_device.h"
#include "specd/log.h"
#include "specd/runtime.h"
#include "specd/spec.h"
#include "specd/spec_batch.h"
#include "specd/spec_runtime.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

enum { K = 4, N_GEN = 32, N_WARM = 4, N_BAD = 6, MAX_ROWS = K + 1, KILL_AT = 3 };

#define CHECK(c, ...) CHECK_OR(c, cleanup(); return 1, __VA_ARGS__)

static const char *drafter_bin, *model_path;
static daemon_fixture drafter, verifier;
static const char *verifier_bin; /* NULL: the runs with a verifier daemon are left out */
static int use_verifier;         /* run_policy's spec verifies through `verifier` */
static const specd_cudart *rt;
static void *dev_rows; /* the host's logits block on the device */
static int32_t n_vocab;

static void cleanup(void) {
    if (drafter.pid > 0) daemon_fixture_stop(&drafter);
    drafter.pid = 0;
    if (verifier.pid > 0) daemon_fixture_stop(&verifier);
    verifier.pid = 0;
}

/* specd-verifier --device cuda:0, deciding on the device from the host's CUDA IPC pool. 1 when it
 * answers. */
static int start_verifier(void) {
    if (!daemon_temp_endpoint(&verifier)) return 0;
    verifier.pid = fork();
    if (verifier.pid == 0) {
        execl(verifier_bin, verifier_bin, "--endpoint", verifier.ep, "--vocab", "49152",
              "--tokenizer-hash", TEST_TOKHASH_ARG, "--device", "cuda:0", (char *)NULL);
        _exit(127);
    }
    return verifier.pid > 0 && daemon_wait_ready(verifier.ep, SPECD_IPC_ROLE_VERIFIER);
}

/* A drafter serving s = draft:model,sample=1 (q on cuda:0 with cuda_q). 1 when it answers. */
static int start_drafter(int cuda_q) {
    char spec[1200];
    if (!daemon_temp_endpoint(&drafter)) return 0;
    snprintf(spec, sizeof spec, "s=draft:model=%s,sample=1,k=%d", model_path, K);
    drafter.pid = fork();
    if (drafter.pid == 0) {
        if (cuda_q)
            execl(drafter_bin, drafter_bin, "--endpoint", drafter.ep, "--vocab", "49152",
                  "--tokenizer-hash", TEST_TOKHASH_ARG, "--policy", spec, "--q-device", "cuda:0",
                  (char *)NULL);
        else
            execl(drafter_bin, drafter_bin, "--endpoint", drafter.ep, "--vocab", "49152",
                  "--tokenizer-hash", TEST_TOKHASH_ARG, "--policy", spec, (char *)NULL);
        _exit(127);
    }
    return drafter.pid > 0 && daemon_wait_ready(drafter.ep, SPECD_IPC_ROLE_DRAFTER);
}

static int stop_drafter(void) {
    int code = daemon_fixture_stop(&drafter);
    drafter.pid = 0;
    return code;
}

typedef struct run_out {
    int32_t tokens[N_GEN];
    int64_t n;
    specd_seq_stats stats;
    uint64_t device_steps, q_device, q_fetched;
    uint64_t pool_steps; /* steps the verifier daemon decided from the CUDA IPC pool */
    int ok;
} run_out;

static float host_rows[MAX_ROWS * (size_t)TEST_VOCAB];
/* run_policy kills the drafter (kill -9) before this step's proposal when >= 0 */
static int kill_at = -1;
/* the remote policy's wait for an answer: long enough for any drafter that is up; a run that
 * kills its drafter waits this long once, for the proposal the dead drafter never answers */
static int remote_timeout_ms = 30000;

/* The target is the draft model with noise on its logits (a function of position and token), so
 * p differs from q and rejection sampling both accepts and rejects. */
static void perturb(float *row, int32_t pos) {
    for (int32_t x = 0; x < n_vocab; x++) {
        uint32_t h = ((uint32_t)pos * 2654435761u ^ (uint32_t)x * 2246822519u) * 3266489917u;
        row[x] += (float)(h >> 8) * (3.0f / 16777216.0f) - 1.5f;
    }
}

/* n_gen tokens under REJECTION at T 0.8 with the remote policy on the drafter running now; the
 * target's rows computed on ctx (CPU), uploaded to the device, verified from there. */
static void run_policy(specd_context *ctx, int32_t n_gen, const char *policy, run_out *r) {
    memset(r, 0, sizeof *r);
    uint64_t dev0 = specd_device_verify_count(), qd0 = specd_remote_q_device_count(),
             qf0 = specd_remote_q_fetch_count(), pool0 = specd_rverify_cuda_steps();
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = n_vocab;
    sp.max_draft = K;
    sp.verifier_endpoint = use_verifier ? verifier.ep : NULL;
    sp.verifier_timeout_ms = 30000; /* the emulated kernel is slow; a device answers at once */
    sp.verifier_tokenizer_hash = TEST_TOKHASH;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) {
        printf("spec_create: %s\n", err.message);
        return;
    }
    char opts[400];
    snprintf(opts, sizeof opts,
             "endpoint=%s,policy=s,tokenizer_hash=" TEST_TOKHASH_ARG ",timeout_ms=%d",
             drafter.ep, remote_timeout_ms);
    const specd_seq_params p =
        drafter_q_seq_params(policy, strcmp(policy, "remote") == 0 ? opts : NULL, n_gen);
    const int32_t *prompt = DRAFTER_Q_PROMPT;
    const int64_t n_prompt = DRAFTER_Q_N_PROMPT;
    specd_status st = specd_spec_seq_open(spec, 0, prompt, n_prompt, &p, &err);
    /* the cache holds the history but its last token: each step starts with that one */
    if (st == SPECD_OK) st = specd_context_kv_truncate(ctx, 0, 0, &err);
    specd_seq_batch pre = {.seq = 0, .n_tokens = (int32_t)n_prompt - 1, .tokens = prompt};
    if (st == SPECD_OK) st = specd_context_extend(ctx, &pre, 1, NULL, &err);
    for (int step = 0; st == SPECD_OK && !specd_spec_seq_done(spec, 0); step++) {
        if (step == kill_at && drafter.pid > 0) {
            daemon_stop(drafter.pid, SIGKILL);
            drafter.pid = 0;
            daemon_fixture_clean(&drafter);
        }
        specd_step_layout lay;
        st = specd_spec_seq_layout(spec, 0, &lay, &err);
        if (st != SPECD_OK) break;
        if (lay.n_rows > MAX_ROWS) {
            printf("a step of %d rows\n", lay.n_rows);
            st = SPECD_E_INTERNAL;
            break;
        }
        int32_t kv_before = specd_context_kv_len(ctx, 0);
        specd_seq_batch b = specd_step_seq_batch(&lay, 0);
        specd_extend_out eo = {.n_rows = lay.n_rows, .rows = lay.rows, .logits = host_rows};
        st = specd_context_extend(ctx, &b, 1, &eo, &err);
        if (st != SPECD_OK) break;
        for (int32_t i = 0; i < lay.n_rows; i++)
            perturb(host_rows + (size_t)i * (size_t)n_vocab, lay.pos[lay.rows[i]]);
        size_t bytes = (size_t)lay.n_rows * (size_t)n_vocab * sizeof(float);
        if (rt->memcpy(dev_rows, host_rows, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) != 0) {
            printf("uploading the rows failed\n");
            st = SPECD_E_IO;
            break;
        }
        specd_logits lg = {.data = dev_rows, .row_stride = n_vocab, .n_rows = lay.n_rows,
                           .dtype = SPECD_DTYPE_F32, .device = SPECD_DEVICE_CUDA};
        specd_step_outcome o;
        st = specd_spec_seq_verify_logits(spec, 0, &lg, &o, &err);
        if (st != SPECD_OK) break;
        int32_t keep[MAX_ROWS]; /* the step's rows kept, as cache rows */
        for (int32_t i = 0; i < o.n_keep; i++) keep[i] = kv_before + o.keep[i];
        st = specd_context_kv_keep(ctx, 0, kv_before, o.n_keep, keep, &err);
    }
    if (st != SPECD_OK) printf("run: %s\n", err.message);
    const int32_t *toks = specd_spec_seq_output(spec, 0, &r->n);
    if (r->n > N_GEN) r->n = N_GEN;
    memcpy(r->tokens, toks, (size_t)r->n * sizeof *toks);
    r->ok = st == SPECD_OK && r->n == n_gen &&
            specd_spec_seq_stats(spec, 0, &r->stats, &err) == SPECD_OK;
    specd_spec_seq_close(spec, 0);
    specd_spec_destroy(spec);
    r->device_steps = specd_device_verify_count() - dev0;
    r->q_device = specd_remote_q_device_count() - qd0;
    r->q_fetched = specd_remote_q_fetch_count() - qf0;
    r->pool_steps = specd_rverify_cuda_steps() - pool0;
}

static void run(specd_context *ctx, int32_t n_gen, run_out *r) {
    run_policy(ctx, n_gen, "remote", r);
}

static int same(const run_out *a, const run_out *b) {
    return a->ok && b->ok && a->n == b->n &&
           memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof *a->tokens) == 0;
}

static void report(const char *what, const run_out *r) {
    printf("%s: %lld tokens in %lld steps, %lld drafting, %lld accepted of %lld drafted; %llu "
           "steps decided on the device, %llu drafts' q on the device, %llu fetched to the host\n",
           what, (long long)r->n, (long long)r->stats.n_steps, (long long)r->stats.n_drafts,
           (long long)r->stats.n_accepted, (long long)r->stats.n_draft_tokens,
           (unsigned long long)r->device_steps, (unsigned long long)r->q_device,
           (unsigned long long)r->q_fetched);
}

/* ---- a drafter whose q rows on the device are not distributions --------------------------- */

static volatile sig_atomic_t bad_q_stop;
static void on_term(int sig) {
    (void)sig;
    bad_q_stop = 1;
}

enum { BAD_A = 11, BAD_B = 12 };

/* This binary run as `--bad-q-drafter EP MODE` (a process of its own, as CUDA IPC needs):
 * answers every Propose with drafts BAD_A, BAD_B whose q rows, in a CUDA IPC buffer on device 0,
 * give the drafted token 0.5 and nothing else (rows summing to 0.5: the kernel's BAD_Q, and the
 * host's checks refuse them too); MODE "offset" references them one row past the buffer's end
 * instead. Exits 0 on SIGTERM. */
static int bad_q_drafter(const char *ep, const char *mode) {
    const int past_end = strcmp(mode, "offset") == 0;
    signal(SIGTERM, on_term);
    const size_t v = TEST_VOCAB, bytes = 2 * v * sizeof(float);
    specd_ipc_buffer *b = NULL;
    specd_error err;
    if (specd_ipc_buffer_create(SPECD_IPC_BUFFER_CUDA, bytes, 0, &b, &err) != SPECD_OK) {
        fprintf(stderr, "bad-q drafter: %s\n", err.message);
        return 1;
    }
    float *rows = calloc(2 * v, sizeof *rows);
    if (!rows) return 1;
    rows[BAD_A] = 0.5f;
    rows[v + BAD_B] = 0.5f;
    if (rt->memcpy(specd_ipc_buffer_data(b), rows, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) != 0)
        return 1;
    free(rows);
    void *zctx = zmq_ctx_new(), *sock = zmq_socket(zctx, ZMQ_ROUTER);
    specd_ipc_decoder *dec = NULL;
    if (zmq_bind(sock, ep) != 0 || specd_ipc_decoder_create(0, &dec, NULL) != SPECD_OK) return 1;
    static const uint32_t tokens[] = {BAD_A, BAD_B};
    while (!bad_q_stop) {
        zmq_pollitem_t it = {.socket = sock, .events = ZMQ_POLLIN};
        if (zmq_poll(&it, 1, 20) != 1) continue;
        zmq_msg_t rid, body;
        zmq_msg_init(&rid);
        zmq_msg_init(&body);
        const SpecdWire__Envelope *q = NULL;
        if (zmq_msg_recv(&rid, sock, 0) >= 0 && zmq_msg_recv(&body, sock, 0) >= 0 &&
            specd_ipc_frame_decode(dec, zmq_msg_data(&body), zmq_msg_size(&body), &q, NULL) ==
                SPECD_OK) {
            peer_reply r;
            peer_reply_init(&r, q, 5);
            SpecdWire__BufferDesc desc;
            uint64_t seq = 0;
            if (q->body_case == SPECD_WIRE__ENVELOPE__BODY_PROPOSE &&
                specd_ipc_buffer_publish(b, NULL, &seq, NULL) == SPECD_OK) {
                specd_ipc_buffer_describe(b, &desc);
                peer_reply_draft_q(&r, q->propose, 2, tokens, &desc, v, seq,
                                   past_end ? v * sizeof(float) : 0);
            }
            specd_ipc_send(sock, zmq_msg_data(&rid), zmq_msg_size(&rid), &r.e, 1 << 20, NULL);
        }
        zmq_msg_close(&rid);
        zmq_msg_close(&body);
    }
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_close(sock);
    zmq_ctx_term(zctx);
    specd_ipc_decoder_destroy(dec);
    specd_ipc_buffer_destroy(b);
    return 0;
}

static const char *self_path;

/* The bad-q drafter on drafter's endpoint; 1 when it answers. */
static int start_bad_q_drafter(const char *mode) {
    if (!daemon_temp_endpoint(&drafter)) return 0;
    drafter.pid = fork();
    if (drafter.pid == 0) {
        execl(self_path, self_path, "--bad-q-drafter", drafter.ep, mode, (char *)NULL);
        _exit(127);
    }
    return drafter.pid > 0 && daemon_wait_ready(drafter.ep, SPECD_IPC_ROLE_DRAFTER);
}

/* Warnings logged, kept for the checks. */
static char warnings[2048];
static void keep_warning(specd_log_level level, const char *message, void *user) {
    (void)user;
    size_t n = strlen(warnings);
    if (level >= SPECD_LOG_WARN) snprintf(warnings + n, sizeof warnings - n, "%s\n", message);
}

/* A remote run of N_BAD tokens against the bad-q drafter in mode (its warnings kept in
 * warnings), reported as what: its output must be plain decoding's. 0, or 1 after a FAIL. */
static int run_bad_q(specd_context *ctx, const char *mode, const char *what, const run_out *plain,
                     run_out *out) {
    CHECK(start_bad_q_drafter(mode), "the bad-q drafter did not answer on %s", drafter.ep);
    warnings[0] = '\0';
    specd_log_set(keep_warning, NULL, SPECD_LOG_WARN);
    run_policy(ctx, N_BAD, "remote", out);
    specd_log_set(NULL, NULL, SPECD_LOG_WARN);
    CHECK(stop_drafter() == 0, "bad-q drafter exit");
    report(what, out);
    printf("its warning: %s", warnings);
    CHECK(same(out, plain), "%s: output differs from plain decoding", what);
    return 0;
}

int main(int argc, char **argv) {
    rt = specd_cudart_get(NULL);
    if (argc == 4 && strcmp(argv[1], "--bad-q-drafter") == 0)
        return rt ? bad_q_drafter(argv[2], argv[3]) : 1;
    self_path = argv[0];
    if (argc < 2) {
        printf("usage: test_drafter_q_cuda SPECD_DRAFTER [SPECD_VERIFIER]\n");
        return 2;
    }
    drafter_bin = argv[1];
    verifier_bin = argc > 2 ? argv[2] : NULL;
    if (!rt || specd_cuda_device_count() == 0) {
        printf("skipped: %s\n", rt ? "no CUDA device" : "no CUDA runtime");
        return SPECD_TEST_SKIP;
    }
    model_path = specd_test_model_path();
    if (!model_path || !*model_path) {
        printf("skipped: SPECD_TEST_MODEL not set\n");
        return SPECD_TEST_SKIP;
    }
    specd_error err;
    specd_model *model = NULL;
    specd_context *ctx = NULL;
    CHECK(specd_model_create(model_path, &model, &err) == SPECD_OK, "model: %s", err.message);
    n_vocab = specd_model_get_info(model)->n_vocab;
    CHECK(n_vocab == (int32_t)TEST_VOCAB, "vocab %d", n_vocab);
    specd_context_params cp = specd_context_default_params();
    cp.device = SPECD_DEVICE_CPU; /* the target on the CPU: its rows go to the device by copy */
    cp.n_ctx = 256;
    cp.n_batch = 32;
    CHECK(specd_context_create(model, &cp, &ctx, &err) == SPECD_OK, "context: %s", err.message);
    CHECK(rt->set_device(0) == 0 &&
              rt->malloc(&dev_rows, (size_t)MAX_ROWS * (size_t)n_vocab * sizeof(float)) == 0,
          "device block");

    /* 1. q through shared host memory: the reference (also loads every kernel used here) */
    static run_out shm, warm, dev, host;
    CHECK(start_drafter(0), "specd-drafter did not answer on %s", drafter.ep);
    run(ctx, N_GEN, &shm);
    CHECK(stop_drafter() == 0, "drafter exit");
    report("q by shared host memory", &shm);
    CHECK(shm.ok, "the run with q by shared memory failed");

    /* a short run with device q first, so what the driver sets up on first use of an imported
     * buffer and event is not counted as left behind */
    CHECK(start_drafter(1), "specd-drafter --q-device cuda:0 did not answer on %s", drafter.ep);
    run(ctx, N_WARM, &warm);
    CHECK(stop_drafter() == 0, "drafter exit");
    CHECK(warm.ok, "the warm-up run failed");
    if (verifier_bin) { /* the same for the host's first CUDA IPC pool */
        CHECK(start_drafter(1) && start_verifier(), "the daemons did not answer");
        use_verifier = 1;
        run(ctx, N_WARM, &warm);
        use_verifier = 0;
        CHECK(stop_drafter() == 0 && daemon_fixture_stop(&verifier) == 0, "daemon exit");
        CHECK(warm.ok, "the warm-up run with a verifier failed");
    }
    size_t free0 = 0, total = 0;
    CHECK(rt->mem_get_info(&free0, &total) == 0, "cudaMemGetInfo");

    /* 2. q through a CUDA IPC buffer, verified on the device from there; then read on the host */
    CHECK(start_drafter(1), "specd-drafter --q-device cuda:0 did not answer on %s", drafter.ep);
    run(ctx, N_GEN, &dev);
    setenv("SPECD_CUDA_VERIFY", "host", 1);
    run(ctx, N_GEN, &host);
    unsetenv("SPECD_CUDA_VERIFY");
    CHECK(stop_drafter() == 0, "drafter exit");
    report("q by CUDA IPC, device verify", &dev);
    report("q by CUDA IPC, host verify (SPECD_CUDA_VERIFY=host)", &host);
    CHECK(same(&dev, &shm), "device q output differs from shared-memory q output");
    CHECK(same(&host, &shm), "device q read on the host: output differs");
    CHECK(dev.stats.n_accepted == shm.stats.n_accepted, "accepted drafts differ");
    CHECK(shm.stats.n_accepted > 0 && shm.stats.n_accepted < shm.stats.n_draft_tokens,
          "no mix of acceptances and rejections");
    CHECK(shm.q_device == 0 && shm.q_fetched == 0, "shared-memory q reported on the device");
    CHECK(dev.q_device == (uint64_t)dev.stats.n_drafts && dev.q_fetched == 0,
          "not every sampled draft's q stayed on the device");
    CHECK(shm.device_steps == (uint64_t)shm.stats.n_steps &&
              dev.device_steps == (uint64_t)dev.stats.n_steps,
          "not every step was decided on the device (the kernel library did not load?)");
    CHECK(host.device_steps == 0 && host.q_fetched == (uint64_t)host.stats.n_drafts,
          "the host-verify run did not fetch every draft's q");

    /* 2b. q never on the host: the drafter's CUDA rows go device to device into the host's pool
     * beside the logits, and specd-verifier --device cuda decides there */
    if (verifier_bin) {
        static run_out remote;
        CHECK(start_drafter(1) && start_verifier(), "the daemons did not answer");
        use_verifier = 1;
        run(ctx, N_GEN, &remote);
        use_verifier = 0;
        CHECK(stop_drafter() == 0 && daemon_fixture_stop(&verifier) == 0, "daemon exit");
        report("q by CUDA IPC, decided by specd-verifier --device cuda", &remote);
        printf("  %llu drafting steps through the CUDA IPC pool, %lld decided by the daemon\n",
               (unsigned long long)remote.pool_steps, (long long)remote.stats.n_remote_verified);
        CHECK(same(&remote, &shm), "verifier daemon: output differs from in-process");
        CHECK(remote.q_fetched == 0 && remote.q_device == (uint64_t)remote.stats.n_drafts,
              "verifier daemon: a draft's q went to the host");
        CHECK(remote.pool_steps == (uint64_t)remote.stats.n_drafts &&
                  remote.stats.n_remote_verified == remote.stats.n_drafts,
              "verifier daemon: not every drafting step decided through the pool");
    } else {
        printf("q by CUDA IPC, decided by specd-verifier --device cuda: not run (no verifier "
               "binary given)\n");
    }

    /* kill -9 of the drafter mid-generation (before step KILL_AT's proposal): the host goes on
     * with plain steps, still decided on the device; the same schedule with q through shared
     * memory gives the same tokens (the steps that drafted drew from the same q) */
    static run_out kill_shm, kill_dev;
    kill_at = KILL_AT;
    remote_timeout_ms = 5000;
    CHECK(start_drafter(0), "specd-drafter did not answer on %s", drafter.ep);
    run(ctx, N_GEN, &kill_shm);
    CHECK(drafter.pid == 0, "the drafter was not killed");
    CHECK(start_drafter(1), "specd-drafter --q-device cuda:0 did not answer on %s", drafter.ep);
    run(ctx, N_GEN, &kill_dev);
    CHECK(drafter.pid == 0, "the drafter was not killed");
    kill_at = -1;
    remote_timeout_ms = 30000;
    report("drafter killed (-9) before step 3, q by shared memory", &kill_shm);
    report("drafter killed (-9) before step 3, q by CUDA IPC", &kill_dev);
    CHECK(same(&kill_dev, &kill_shm), "after the kill: output differs from shared-memory q's");
    CHECK(kill_dev.stats.n_drafts > 0 && kill_dev.stats.n_drafts <= KILL_AT &&
              kill_dev.q_device == (uint64_t)kill_dev.stats.n_drafts &&
              kill_dev.stats.n_steps > KILL_AT,
          "after the kill: drafting did not stop at step %d", KILL_AT);
    CHECK(kill_dev.device_steps == (uint64_t)kill_dev.stats.n_steps,
          "after the kill: not every step decided on the device");

    /* 3. q rows that are not distributions, on the device: the kernel's BAD_Q sends each step to
     * the host path, whose checks of the fetched rows drop the drafts: plain steps, the output
     * plain decoding's */
    static run_out plain, bad;
    run_policy(ctx, N_BAD, "none", &plain);
    CHECK(plain.ok, "the plain run failed");
    if (run_bad_q(ctx, "sum", "q rows summing to 0.5 on the device", &plain, &bad)) return 1;
    CHECK(bad.q_device > 0 && bad.q_fetched == bad.q_device && bad.stats.n_drafts == 0,
          "bad device q: not every proposal fetched and dropped");
    CHECK(bad.device_steps + bad.q_fetched == (uint64_t)bad.stats.n_steps,
          "bad device q: a step neither decided on the device nor by the host path");
    CHECK(strstr(warnings, "drafts dropped") != NULL, "bad device q: no warning");

    /* ... and a reference past the buffer's end: refused when the draft arrives, before any
     * device work (drafts dropped by the client), plain steps decided on the device */
    static run_out past;
    if (run_bad_q(ctx, "offset", "q referenced past its buffer's end", &plain, &past)) return 1;
    CHECK(past.q_device == 0 && past.stats.n_drafts == 0 &&
              past.device_steps == (uint64_t)past.stats.n_steps,
          "q past the end: drafts not dropped, or steps not decided on the device");
    CHECK(strstr(warnings, "exceed") != NULL, "q past the end: the warning does not say why");

    /* 4. nothing left on the device once the drafter is gone: the driver frees a process's
     * memory on its own time, so wait (bounded) for the figure to come back */
    size_t free1 = 0;
    for (uint64_t end = daemon_now_ms() + 10000;;) {
        CHECK(rt->mem_get_info(&free1, &total) == 0, "cudaMemGetInfo");
        if (free1 == free0 || daemon_now_ms() >= end) break;
        sleep_ms(20);
    }
    printf("cudaMemGetInfo: free %zu bytes before the drafter with device q, %zu after "
           "(difference %lld, total %zu)\n",
           free0, free1, (long long)free1 - (long long)free0, total);
    CHECK(free1 == free0, "device memory differs after the drafter and its q buffers are gone");
    rt->free(dev_rows);
    specd_context_destroy(ctx);
    specd_model_destroy(model);
    printf("PASS: draft distributions by CUDA IPC\n");
    return 0;
}
