/* CUDA IPC end to end between processes: a host whose step logits lie on a CUDA device (host API
 * v2, specd_logits.device = CUDA) and a real specd-verifier --device cuda process over a real
 * ZeroMQ ipc:// socket. The host copies each step's rows device to device into one reusable CUDA
 * IPC pool, the daemon opens the pool once and decides on its device with the acceptance kernel
 * (verifier/remote/remote_verify.h, verifier/daemon/verifier_device.h). Shown here:
 *   - output token-identical to in-process verification, greedy (f32 rows) and at T 0.8 (bf16
 *     rows, padded stride), every drafting step before the kill decided through the pool;
 *   - REJECTION with a sampling drafter's q at T 0.8: q rows travel in the pool beside the
 *     logits (Verify.q), every drafting step decided there, output identical; a corrupted q row
 *     is refused by the daemon's kernel (BAD_Q), and the host decides that step in-process,
 *     failing it as the in-process run does, with the same output before it;
 *   - kill -9 of the daemon mid-generation: the host goes on in-process, output identical; the
 *     daemon restarted under the host opens the pool again and verifies again;
 *   - a daemon without --device refuses the pool with a reason: the host goes on through host
 *     memory, output identical;
 *   - device memory (cudaMemGetInfo, printed) is the same after as before: nothing left mapped
 *     or allocated.
 * The "target" is a deterministic function of (position, token), so no model is needed.
 * Skipped (77) without a CUDA runtime or device. usage: test_ipc_cuda_e2e SPECD_VERIFIER */
#include "test_check.h"
#include "test_main.h"

#include "ipc/daemon_util.h"
#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cudart.h"
#include "verifier/remote/remote_verify.h"
#include "session/spec_device.h"
#include "specd/spec.h"
#include "specd/spec_batch.h"

#include <stdio.h>
#include <string.h>

enum { V = 4096, STRIDE = V + 64, MAX_DRAFT = 4, N_TOKENS = 64, KILL_AT = 4, RESTART_AT = 10 };

#define CHECK(c, ...) CHECK_OR(c, cleanup(); return 1, __VA_ARGS__)

static const char *verifier_bin;
static char dir[64], ep[128];
static pid_t daemon_pid;
static const specd_cudart *rt;
static void *dev_rows; /* the host's logits block on the device */

static void cleanup(void) {
    if (daemon_pid > 0) daemon_stop(daemon_pid, SIGKILL);
    daemon_pid = 0;
}

static pid_t start_verifier(int device) {
    pid_t pid = fork();
    if (pid == 0) {
        char vocab[16];
        snprintf(vocab, sizeof vocab, "%d", V);
        if (device)
            execl(verifier_bin, verifier_bin, "--endpoint", ep, "--vocab", vocab,
                  "--tokenizer-hash", TEST_TOKHASH_ARG, "--device", "cuda:0", (char *)NULL);
        else
            execl(verifier_bin, verifier_bin, "--endpoint", ep, "--vocab", vocab,
                  "--tokenizer-hash", TEST_TOKHASH_ARG, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Until the daemon answers a ping under our fingerprint (up to DAEMON_WAIT_MS). */
static int wait_ready(void) {
    return daemon_wait_ready_vocab(ep, SPECD_IPC_ROLE_VERIFIER, V);
}

#define TOY_V V
#include "toy_drafter.h"

static int with_q; /* run() drafts with the sampling toy (it reports q) under REJECTION */

static float host_f32[(MAX_DRAFT + 1) * (size_t)STRIDE];
static uint16_t host_bf16[(MAX_DRAFT + 1) * (size_t)STRIDE];

/* One host step: the laid-out rows computed, uploaded into the device block (padded stride),
 * verified from there. */
static specd_status host_step(specd_spec *spec, specd_dtype dtype, specd_step_outcome *o,
                              specd_error *err) {
    specd_step_layout lay;
    specd_status st = specd_spec_seq_layout(spec, 0, &lay, err);
    if (st != SPECD_OK) return st;
    for (int32_t r = 0; r < lay.n_rows; r++) {
        float *row = host_f32 + (size_t)r * STRIDE;
        target_row(lay.pos[lay.rows[r]], lay.tokens[lay.rows[r]], row);
        for (int32_t x = 0; x < V; x++)
            host_bf16[(size_t)r * STRIDE + x] = specd_fp32_to_bf16(row[x]);
    }
    size_t bytes = (size_t)lay.n_rows * STRIDE * (dtype == SPECD_DTYPE_F32 ? 4 : 2);
    const void *src = dtype == SPECD_DTYPE_F32 ? (const void *)host_f32 : (const void *)host_bf16;
    if (rt->memcpy(dev_rows, src, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE) != SPECD_CUDA_SUCCESS)
        return SPECD_E_IO;
    specd_logits lg = {.data = dev_rows,
                       .row_stride = STRIDE,
                       .n_rows = lay.n_rows,
                       .dtype = dtype,
                       .device = SPECD_DEVICE_CUDA};
    return specd_spec_seq_verify_logits(spec, 0, &lg, o, err);
}

static specd_spec *make_spec(int remote) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_draft = MAX_DRAFT;
    sp.max_seqs = 2;
    sp.verifier_endpoint = remote ? ep : NULL;
    sp.verifier_timeout_ms = 2000;
    sp.verifier_tokenizer_hash = TEST_TOKHASH;
    specd_spec *spec = NULL;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) {
        printf("spec_create: %s\n", err.message);
        return NULL;
    }
    return spec;
}

typedef struct run_out {
    int32_t tokens[N_TOKENS];
    int64_t n;
    specd_seq_stats stats;
    uint64_t cuda_steps_at_kill, cuda_steps_at_restart, cuda_steps_end;
    int ok;
    int failed_step;       /* the step that returned an error, or -1 */
    specd_status failed;   /* its status */
    char why[256];         /* its message */
} run_out;

/* Generates N_TOKENS; kill >= 0: kill -9 the daemon before step KILL_AT and restart it before
 * RESTART_AT (device = its --device). */
static void run(int remote, float temperature, specd_dtype dtype, int kill, int device,
                run_out *r) {
    memset(r, 0, sizeof *r);
    r->failed_step = -1;
    specd_spec *spec = make_spec(remote);
    if (!spec) return;
    specd_error err;
    specd_seq_params p = specd_seq_default_params();
    p.policy_ops = with_q ? &toy_q_ops : &toy_ops;
    if (with_q) p.rule = SPECD_ACCEPT_REJECTION;
    p.sampling.temperature = temperature;
    p.sampling.top_k = 50;
    p.sampling.top_p = temperature > 0.0f ? 0.9f : 1.0f; /* sampled runs take top-p's path */
    p.seed = 7;
    p.max_tokens = N_TOKENS;
    p.adaptive = 0;
    const int32_t prompt[] = {11, 22, 33, 44};
    if (specd_spec_seq_open(spec, 0, prompt, 4, &p, &err) != SPECD_OK) {
        printf("open: %s\n", err.message);
        specd_spec_destroy(spec);
        return;
    }
    specd_step_outcome o;
    for (int step = 0; !specd_spec_seq_done(spec, 0); step++) {
        if (kill && step == KILL_AT) {
            r->cuda_steps_at_kill = specd_rverify_cuda_steps();
            daemon_stop(daemon_pid, SIGKILL);
            daemon_pid = 0;
        }
        if (kill && step == RESTART_AT) {
            daemon_pid = start_verifier(device);
            if (!wait_ready()) {
                printf("the restarted daemon did not answer\n");
                break;
            }
            /* the client retries a lost daemon after its back-off (500 ms, retry_ms) */
            sleep_ms(600);
            r->cuda_steps_at_restart = specd_rverify_cuda_steps();
        }
        if ((r->failed = host_step(spec, dtype, &o, &err)) != SPECD_OK) {
            printf("step %d: %s\n", step, err.message);
            r->failed_step = step;
            snprintf(r->why, sizeof r->why, "%s", err.message);
            break;
        }
    }
    r->cuda_steps_end = specd_rverify_cuda_steps();
    const int32_t *toks = specd_spec_seq_output(spec, 0, &r->n);
    if (r->n > N_TOKENS) r->n = N_TOKENS;
    memcpy(r->tokens, toks, (size_t)r->n * sizeof *toks);
    r->ok =
        specd_spec_seq_done(spec, 0) && specd_spec_seq_stats(spec, 0, &r->stats, &err) == SPECD_OK;
    specd_spec_seq_close(spec, 0);
    specd_spec_destroy(spec);
}

static int same(const run_out *a, const run_out *b) {
    return a->ok && b->ok && a->n == b->n &&
           memcmp(a->tokens, b->tokens, (size_t)a->n * sizeof *a->tokens) == 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        printf("usage: test_ipc_cuda_e2e SPECD_VERIFIER\n");
        return 2;
    }
    verifier_bin = argv[1];
    rt = specd_cudart_get(NULL);
    if (!rt || specd_cuda_device_count() == 0) {
        printf("skipped: %s\n", rt ? "no CUDA device" : "no CUDA runtime");
        return SPECD_TEST_SKIP;
    }
    snprintf(dir, sizeof dir, "/tmp/specd-test-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(ep, sizeof ep, "ipc://%s/v.sock", dir);
    size_t block = (size_t)(MAX_DRAFT + 1) * STRIDE * sizeof(float);
    CHECK(rt->set_device(0) == 0 && rt->malloc(&dev_rows, block) == 0, "device block");

    /* in-process, from the same device rows (also loads every kernel this process will use) */
    static run_out local_greedy, local_hot;
    run(0, 0.0f, SPECD_DTYPE_F32, 0, 0, &local_greedy);
    run(0, 0.8f, SPECD_DTYPE_BF16, 0, 0, &local_hot);
    CHECK(local_greedy.ok && local_hot.ok, "in-process runs");
    printf("in-process: %llu steps decided by the device kernel in this process (0: the kernel "
           "library did not load here, and the rows were copied to the host)\n",
           (unsigned long long)specd_device_verify_count());
    /* the host side of a pool once (export, event, a device-to-device copy), so what the driver
     * sets up for that on first use is not counted as left behind */
    specd_ipc_buffer *warm = NULL;
    uint64_t warm_seq;
    size_t row_bytes = (size_t)V * sizeof(float), pitch = (size_t)STRIDE * sizeof(float);
    CHECK(specd_ipc_buffer_create(SPECD_IPC_BUFFER_CUDA, block, 0, &warm, NULL) == SPECD_OK &&
              rt->memcpy_2d(specd_ipc_buffer_data(warm), row_bytes, dev_rows, pitch, row_bytes,
                            MAX_DRAFT + 1, SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE) == 0 &&
              rt->memcpy_2d(host_f32, row_bytes, dev_rows, pitch, row_bytes, 1,
                            SPECD_CUDA_MEMCPY_DEVICE_TO_HOST) == 0 &&
              specd_ipc_buffer_publish(warm, NULL, &warm_seq, NULL) == SPECD_OK,
          "a CUDA IPC buffer");
    specd_ipc_buffer_destroy(warm);
    size_t free0 = 0, total = 0;
    CHECK(rt->mem_get_info(&free0, &total) == 0, "cudaMemGetInfo");

    /* 1. through the pool, greedy f32 and T 0.8 bf16 */
    daemon_pid = start_verifier(1);
    CHECK(wait_ready(), "specd-verifier --device cuda:0 did not answer on %s", ep);
    static run_out g, h;
    uint64_t c0 = specd_rverify_cuda_steps();
    run(1, 0.0f, SPECD_DTYPE_F32, 0, 1, &g);
    uint64_t c1 = specd_rverify_cuda_steps();
    run(1, 0.8f, SPECD_DTYPE_BF16, 0, 1, &h);
    uint64_t c2 = specd_rverify_cuda_steps();
    printf("greedy f32: %lld tokens, %lld drafting steps, %llu through the CUDA pool, %lld "
           "accepted of %lld drafted\n",
           (long long)g.n, (long long)g.stats.n_drafts, (unsigned long long)(c1 - c0),
           (long long)g.stats.n_accepted, (long long)g.stats.n_draft_tokens);
    printf("T 0.8 bf16: %lld tokens, %lld drafting steps, %llu through the CUDA pool, %lld "
           "accepted of %lld drafted\n",
           (long long)h.n, (long long)h.stats.n_drafts, (unsigned long long)(c2 - c1),
           (long long)h.stats.n_accepted, (long long)h.stats.n_draft_tokens);
    CHECK(same(&g, &local_greedy), "greedy output differs from in-process");
    CHECK(same(&h, &local_hot), "T 0.8 output differs from in-process");
    CHECK(c1 - c0 == (uint64_t)g.stats.n_drafts && c2 - c1 == (uint64_t)h.stats.n_drafts,
          "not every drafting step went through the CUDA pool");
    CHECK(g.stats.n_accepted > 0 && g.stats.n_accepted < g.stats.n_draft_tokens,
          "no mix of acceptances and rejections");

    /* 1b. REJECTION with the sampling drafter's q at T 0.8: q travels in the pool beside the
     * logits (Verify.q) and the daemon's kernel reads it there; every drafting step through the
     * pool, output identical to in-process */
    static run_out lq, rq;
    with_q = 1;
    run(0, 0.8f, SPECD_DTYPE_F32, 0, 0, &lq);
    uint64_t q0 = specd_rverify_cuda_steps();
    run(1, 0.8f, SPECD_DTYPE_F32, 0, 1, &rq);
    uint64_t q1 = specd_rverify_cuda_steps();
    printf("REJECTION with q, T 0.8 f32: %lld tokens, %lld drafting steps, %llu through the CUDA "
           "pool, %lld accepted of %lld drafted\n",
           (long long)rq.n, (long long)rq.stats.n_drafts, (unsigned long long)(q1 - q0),
           (long long)rq.stats.n_accepted, (long long)rq.stats.n_draft_tokens);
    CHECK(lq.ok, "in-process REJECTION with q");
    CHECK(same(&rq, &lq), "REJECTION with q: output differs from in-process");
    CHECK(q1 - q0 == (uint64_t)rq.stats.n_drafts,
          "REJECTION with q: not every drafting step went through the CUDA pool");
    CHECK(rq.stats.n_accepted > 0 && rq.stats.n_accepted < rq.stats.n_draft_tokens,
          "REJECTION with q: no mix of acceptances and rejections");
    /* a q row that is not a distribution: the daemon's kernel refuses it (BAD_Q, the row named),
     * the host decides the step in-process and fails it as the in-process run does */
    static run_out lb, rb;
    toy_q_corrupt_at = 12;
    run(0, 0.8f, SPECD_DTYPE_F32, 0, 0, &lb);
    toy_q_corrupt_at = 12;
    uint64_t q2 = specd_rverify_cuda_steps();
    run(1, 0.8f, SPECD_DTYPE_F32, 0, 1, &rb);
    uint64_t q3 = specd_rverify_cuda_steps();
    toy_q_corrupt_at = -1;
    with_q = 0;
    printf("corrupted q row: in-process status %d at step %d (%s); remote status %d at step %d "
           "(%s), %llu steps through the pool before it\n",
           (int)lb.failed, lb.failed_step, lb.why, (int)rb.failed, rb.failed_step, rb.why,
           (unsigned long long)(q3 - q2));
    CHECK(lb.failed_step >= 0 && lb.failed != SPECD_OK, "the corrupted q row was not refused");
    CHECK(rb.failed_step == lb.failed_step && rb.failed == lb.failed,
          "corrupted q: the remote run did not fail as the in-process one");
    CHECK(rb.n == lb.n && memcmp(rb.tokens, lb.tokens, (size_t)lb.n * sizeof *lb.tokens) == 0,
          "corrupted q: output before the bad step differs from in-process");
    CHECK(q3 - q2 >= 1, "corrupted q: no step before it went through the pool");

    c2 = specd_rverify_cuda_steps(); /* section 2 counts from here */

    /* 2. kill -9 mid-generation, restart under the host */
    static run_out k;
    run(1, 0.8f, SPECD_DTYPE_BF16, 1, 1, &k);
    printf("kill -9 at step %d, restart at step %d: %llu steps through the pool before the "
           "kill, %llu after the restart; %lld decided in-process\n",
           KILL_AT, RESTART_AT, (unsigned long long)(k.cuda_steps_at_kill - c2),
           (unsigned long long)(k.cuda_steps_end - k.cuda_steps_at_restart),
           (long long)k.stats.n_remote_fallback);
    CHECK(same(&k, &local_hot), "output after kill -9 differs from in-process");
    CHECK(k.cuda_steps_at_kill - c2 == KILL_AT, "steps before the kill not through the pool");
    CHECK(k.stats.n_remote_fallback >= 1, "no step was decided in-process while it was down");
    CHECK(k.cuda_steps_end > k.cuda_steps_at_restart, "the restarted daemon verified nothing");
    CHECK(daemon_stop(daemon_pid, SIGTERM) == 0, "daemon exit");
    daemon_pid = 0;

    /* 3. a daemon without --device refuses the pool: host memory instead, same output */
    daemon_pid = start_verifier(0);
    CHECK(wait_ready(), "specd-verifier (no device) did not answer");
    static run_out n;
    uint64_t c3 = specd_rverify_cuda_steps();
    run(1, 0.8f, SPECD_DTYPE_BF16, 0, 0, &n);
    printf("daemon without --device: %lld of %lld drafting steps verified by it through host "
           "memory, %llu through the pool\n",
           (long long)n.stats.n_remote_verified, (long long)n.stats.n_drafts,
           (unsigned long long)(specd_rverify_cuda_steps() - c3));
    CHECK(same(&n, &local_hot), "output through host memory differs");
    CHECK(specd_rverify_cuda_steps() == c3, "a daemon without a device took the pool");
    CHECK(n.stats.n_remote_verified == n.stats.n_drafts,
          "the daemon did not verify through host memory");
    CHECK(daemon_stop(daemon_pid, SIGTERM) == 0, "daemon exit");
    daemon_pid = 0;

    /* 4. nothing left on the device: the driver frees a killed process's memory on its own
     * time, so wait (bounded) for the figure to come back */
    size_t free1 = 0;
    for (uint64_t end = daemon_now_ms() + 10000;;) {
        CHECK(rt->mem_get_info(&free1, &total) == 0, "cudaMemGetInfo");
        if (free1 == free0 || daemon_now_ms() >= end) break;
        sleep_ms(20);
    }
    printf("cudaMemGetInfo: free %zu bytes before the daemons, %zu after (difference %lld, "
           "total %zu)\n",
           free0, free1, (long long)free1 - (long long)free0, total);
    CHECK(free1 == free0, "device memory differs after the daemons and pools are gone");
    rt->free(dev_rows);
    char sock[160];
    snprintf(sock, sizeof sock, "%s/v.sock", dir);
    unlink(sock);
    rmdir(dir);
    printf("PASS: CUDA IPC end to end\n");
    return 0;
}
