/* The verify round trip per step through the real specd-verifier daemon, beside the same
 * decision made in-process, at k = 8 drafts, V = 49,152, greedy:
 *   cpu   host-memory f32 logits: in-process = the acceptance engine on the rows;
 *         ipc = publish the shared buffer + Verify by reference + Result (what a host with
 *         logits in host memory pays per step).
 *   cuda  device f32 logits: in-process = the device acceptance kernel on the rows plus its
 *         result copied back (what session/spec_device.c does); ipc = device-to-device copy of
 *         the rows into the CUDA IPC pool + event + Verify by reference + the daemon's kernel
 *         (specd-verifier --device cuda:0) + Result (verifier/remote/remote_verify.c's path).
 * Both paths decide the same tokens (checked every step). Prints the median and p99 per step of
 * each and the median added by the round trip.
 * usage: bench_ipc_verify SPECD_VERIFIER [cpu|cuda] [steps] */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"
#include "specd/accept.h"
#include "specd/ipc.h"

enum { K = 8, V = 49152, ROWS = K + 1, WARMUP = 100 };
#define TOKHASH 0xbe7cbe7c0badf00dULL

static char dir[64], ep[128];
static pid_t daemon_pid;

static void stop_daemon(void) {
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, NULL, 0);
    }
    daemon_pid = 0;
    char sock[160];
    snprintf(sock, sizeof sock, "%s/v.sock", dir);
    unlink(sock);
    rmdir(dir);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Rows whose argmax follows the draft for the first (step % K) positions, so the accepted count
 * varies from step to step. */
static void fill_rows(uint64_t step, const uint32_t *draft, float *rows) {
    uint32_t h = (uint32_t)step * 2654435761u;
    int accept = (int)(step % K);
    for (int r = 0; r < ROWS; r++) {
        float *row = rows + (size_t)r * V;
        for (int x = 0; x < V; x++) {
            h = h * 1664525u + 1013904223u;
            row[x] = (float)(h >> 8) / (float)(1u << 24) * 4.0f;
        }
        row[r < K && r < accept ? draft[r] : (h >> 7) % V] = 10.0f;
    }
}

static void make_draft(uint64_t step, uint32_t *draft) {
    for (int i = 0; i < K; i++)
        draft[i] = (uint32_t)((step * 31u + (uint64_t)i * 7919u) % V);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_ipc_verify SPECD_VERIFIER [cpu|cuda] [steps]\n");
        return 2;
    }
    int cuda = argc > 2 && strcmp(argv[2], "cuda") == 0;
    int steps = argc > 3 ? atoi(argv[3]) : 2000;
    if (steps < 10) steps = 10;
    const specd_cudart *rt = NULL;
    const specd_cuda_kernels *kt = NULL;
    if (cuda) {
        rt = specd_cudart_get(NULL);
        kt = specd_cuda_kernels_get(NULL);
        if (!rt || specd_cuda_device_count() == 0 || !kt || !kt->verify ||
            kt->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof kt->verify) {
            printf("skipped: no CUDA device, runtime or verify kernel\n");
            return 77;
        }
    }
    snprintf(dir, sizeof dir, "/tmp/specd-bench-XXXXXX");
    if (!mkdtemp(dir)) return 1;
    snprintf(ep, sizeof ep, "ipc://%s/v.sock", dir);
    daemon_pid = fork();
    if (daemon_pid == 0) {
        char vocab[16], hash[32];
        snprintf(vocab, sizeof vocab, "%d", V);
        snprintf(hash, sizeof hash, "%016llx", (unsigned long long)TOKHASH);
        execl(argv[1], argv[1], "--endpoint", ep, "--vocab", vocab, "--tokenizer-hash", hash,
              "--device", cuda ? "cuda:0" : "cpu", (char *)NULL);
        _exit(127);
    }
    specd_ipc_params p = specd_ipc_default_params();
    p.endpoint = ep;
    p.timeout_ms = 5000;
    p.retry_ms = 0;
    specd_ipc_fingerprint fp = {V, TOKHASH};
    specd_ipc_client *c = NULL;
    specd_error err;
    if (specd_ipc_client_create(&p, SPECD_IPC_ROLE_VERIFIER, &fp, &c, &err) != SPECD_OK) {
        fprintf(stderr, "client: %s\n", err.message);
        stop_daemon();
        return 1;
    }
    int up = 0;
    for (uint64_t end = specd_now_ns() + 30000000000ull; !up && specd_now_ns() < end;) {
        up = specd_ipc_client_ping(c, NULL) == SPECD_OK;
        if (!up) usleep(20000);
    }
    size_t bytes = (size_t)ROWS * V * sizeof(float);
    specd_ipc_buffer *buf = NULL;
    if (!up ||
        specd_ipc_buffer_create(cuda ? SPECD_IPC_BUFFER_CUDA : SPECD_IPC_BUFFER_SHM, bytes, 0, &buf,
                                &err) != SPECD_OK ||
        specd_ipc_client_attach_buffer(c, buf, &err) != SPECD_OK) {
        fprintf(stderr, "setup: %s\n", up ? err.message : "the daemon did not answer");
        specd_ipc_client_destroy(c);
        specd_ipc_buffer_destroy(buf);
        stop_daemon();
        return 1;
    }
    const uint32_t prompt[] = {1, 2, 3};
    specd_ipc_seq_params sq = {.seq_id = 1,
                               .prompt = prompt,
                               .n_prompt = 3,
                               .sampling = {.temperature = 0.0f, .top_p = 1.0f},
                               .seed = 7,
                               .rule = SPECD_ACCEPT_GREEDY};
    specd_ipc_client_open_seq(c, &sq, NULL);

    /* in-process: the engine (cpu) or the kernel (cuda) */
    specd_accept_params ap = specd_accept_default_params();
    ap.rule = SPECD_ACCEPT_GREEDY;
    ap.max_k = K;
    ap.max_vocab = V;
    specd_accept *engine = NULL;
    specd_accept_create(&ap, &engine, NULL);
    void *src = NULL, *d_out = NULL, *d_scratch = NULL;
    size_t scratch_bytes = specd_cuda_verify_scratch_bytes(1);
    if (cuda && (rt->malloc(&src, bytes) || rt->malloc(&d_out, sizeof(specd_cuda_verify_out)) ||
                 rt->malloc(&d_scratch, scratch_bytes))) {
        fprintf(stderr, "device memory\n");
        return 1;
    }
    float *rows = malloc(bytes);
    int total = WARMUP + steps;
    uint64_t *t_local = malloc((size_t)total * sizeof *t_local);
    uint64_t *t_ipc = malloc((size_t)total * sizeof *t_ipc);
    uint64_t n_hist = 3;
    int mismatches = 0, failures = 0;
    for (int s = 0; s < total; s++) {
        uint32_t draft[K];
        make_draft((uint64_t)s, draft);
        fill_rows((uint64_t)s, draft, rows);
        float *host = cuda ? rows : specd_ipc_buffer_data(buf);
        if (cuda)
            rt->memcpy(src, rows, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        else
            memcpy(host, rows, bytes);
        /* in-process */
        int32_t tok[K + 1], n_emitted = 0;
        uint64_t t0 = specd_now_ns();
        if (!cuda) {
            int32_t d[K];
            for (int i = 0; i < K; i++)
                d[i] = (int32_t)draft[i];
            specd_chain_input in = {
                .k = K,
                .draft = d,
                .target_logits = host,
                .n_vocab = V,
                .key = {.seed = 7, .sequence = 1, .position = (uint32_t)n_hist}};
            specd_chain_result res = {.tokens = tok};
            if (specd_accept_chain(engine, &in, &res, NULL) != SPECD_OK) failures++;
            n_emitted = res.n_emitted;
        } else {
            specd_cuda_verify_seq sv;
            memset(&sv, 0, sizeof sv);
            sv.rule = SPECD_CUDA_VERIFY_GREEDY;
            sv.top_p = 1.0f;
            sv.seed = 7;
            sv.sequence = 1;
            sv.k = K;
            for (int i = 0; i < K; i++)
                sv.draft[i] = (int32_t)draft[i];
            for (int i = 0; i <= K; i++) {
                sv.row[i] = i;
                sv.pos[i] = (uint32_t)n_hist + (uint32_t)i;
            }
            specd_cuda_verify_args a = {.logits = src,
                                        .dtype = SPECD_CUDA_LOGITS_F32,
                                        .row_stride = V,
                                        .n_rows = ROWS,
                                        .n_vocab = V,
                                        .mask_at = -3.402823466e38f,
                                        .n_seqs = 1,
                                        .seqs = &sv,
                                        .out = d_out,
                                        .scratch = d_scratch,
                                        .scratch_bytes = scratch_bytes};
            specd_cuda_verify_out o;
            if (kt->verify(&a, NULL) != 0 ||
                rt->memcpy(&o, d_out, sizeof o, SPECD_CUDA_MEMCPY_DEVICE_TO_HOST) != 0)
                failures++;
            memcpy(tok, o.tokens, sizeof tok);
            n_emitted = o.n_emitted;
        }
        uint64_t t1 = specd_now_ns();
        /* through the daemon */
        if (cuda)
            rt->memcpy(specd_ipc_buffer_data(buf), src, bytes, SPECD_CUDA_MEMCPY_DEVICE_TO_DEVICE);
        uint64_t seq;
        specd_ipc_ref ref;
        uint64_t shape[2] = {ROWS, V};
        specd_ipc_verify_result res;
        specd_status st = specd_ipc_buffer_publish(buf, NULL, &seq, &err);
        if (st == SPECD_OK)
            st = specd_ipc_buffer_ref(buf, 0, 2, shape, SPECD_IPC_F32, seq, &ref, &err);
        if (st == SPECD_OK)
            st = specd_ipc_client_verify(c, 1, (uint64_t)s, draft, K, &ref, &res, &err);
        uint64_t t2 = specd_now_ns();
        if (st != SPECD_OK) {
            if (failures++ == 0) fprintf(stderr, "verify: %s\n", err.message);
            continue;
        }
        if ((int)res.n_emitted != n_emitted ||
            memcmp(res.emitted, tok, (size_t)n_emitted * sizeof *tok) != 0)
            mismatches++;
        n_hist += res.n_emitted;
        t_local[s] = t1 - t0;
        t_ipc[s] = t2 - t1;
    }
    qsort(t_local + WARMUP, (size_t)steps, sizeof *t_local, cmp_u64);
    qsort(t_ipc + WARMUP, (size_t)steps, sizeof *t_ipc, cmp_u64);
    double l50 = (double)t_local[WARMUP + steps / 2] / 1e3,
           l99 = (double)t_local[WARMUP + steps * 99 / 100] / 1e3;
    double i50 = (double)t_ipc[WARMUP + steps / 2] / 1e3,
           i99 = (double)t_ipc[WARMUP + steps * 99 / 100] / 1e3;
    printf("bench_ipc_verify (%s, k=%d, V=%d, %d steps): in-process p50 %.1f us p99 %.1f us; "
           "ipc round trip p50 %.1f us p99 %.1f us; added over in-process p50 %.1f us "
           "(target <= 30 us); %d outcome mismatches, %d failures\n",
           cuda ? "cuda, specd-verifier --device cuda:0, CUDA IPC pool" : "cpu, shm buffer", K, V,
           steps, l50, l99, i50, i99, i50 - l50, mismatches, failures);
    const char *m = cuda ? "cuda" : "shm";
    printf(
        "FIGURE ipc_verify_%s_inprocess_p50_us %.1f\nFIGURE ipc_verify_%s_roundtrip_p50_us %.1f\n"
        "FIGURE ipc_verify_%s_added_p50_us %.1f\n",
        m, l50, m, i50, m, i50 - l50);
    specd_ipc_client_destroy(c);
    specd_ipc_buffer_destroy(buf);
    specd_accept_destroy(engine);
    if (cuda) {
        rt->free(src);
        rt->free(d_out);
        rt->free(d_scratch);
    }
    free(rows);
    free(t_local);
    free(t_ipc);
    stop_daemon();
    return mismatches || failures ? 1 : 0;
}
