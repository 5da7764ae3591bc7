/* The device acceptance kernel (kernels/cuda/verify.cu) against its anchors on the same card:
 * a device-to-device cudaMemcpy of the same logits bytes and an empty kernel launch. For 1, 8 and
 * 64 sequences x 9 rows (8 drafts + the bonus row) x 49,152 tokens, f32 and bf16, COUPLED at
 * T = 1 (the Gumbel race over every token), GREEDY, COUPLED with top-p 0.9 (on these flat rows
 * the cut lies deep in the row: top-p's worst case, a sorted chunk per 1,024 tokens before it) and
 * REJECTION with q rows on the device (uniform q: drafts mostly rejected, so a residual draw per
 * sequence); the median of N runs, each timed with
 * cudaEvents around the launcher call (which includes its small host-to-device copy of the
 * sequences and the memset of its arrival counters). Target: COUPLED verify <= 2x the copy at 64
 * sequences. Not a test: without a device it says so and exits 0.
 *   build/bench_verify [N]            (N runs per figure, default 50) */
#include <cuda_runtime.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/verify_plan.h"

enum { V = 49152, SLOTS_PER_SEQ = 9, MAX_SEQS = 64 };

static __global__ void empty_kernel(void) {}

/* The launcher's refusal buffer, which kernels/cuda/cuda_device.cu holds inside the library. */
static char refusal[256];
extern "C" char *specd_cuda_refusal_buffer(size_t *size) {
    *size = sizeof refusal;
    refusal[0] = '\0';
    return refusal;
}
extern "C" const char *specd_cuda_last_refusal(void) { return refusal; }

static void die(const char *what, int rc) {
    printf("FAIL: %s: %d (%s)\n", what, rc,
           rc > 0 ? cudaGetErrorString((cudaError_t)rc) : specd_cuda_last_refusal());
    exit(1);
}

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef int (*op_fn)(void *ctx);

/* Median microseconds of n runs of op, each between two events on the default stream. */
static float median_us(op_fn op, void *ctx, int n) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float *t = (float *)malloc((size_t)n * sizeof(float));
    for (int i = 0; i < 3; i++) /* warm-up */
        if (op(ctx)) die("warm-up", op(ctx));
    cudaDeviceSynchronize();
    for (int i = 0; i < n; i++) {
        cudaEventRecord(a, 0);
        int rc = op(ctx);
        if (rc) die("run", rc);
        cudaEventRecord(b, 0);
        cudaEventSynchronize(b);
        float ms = 0.0f;
        cudaEventElapsedTime(&ms, a, b);
        t[i] = ms * 1000.0f;
    }
    qsort(t, (size_t)n, sizeof(float), cmp_float);
    float m = t[n / 2];
    free(t);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return m;
}

typedef struct verify_ctx {
    specd_cuda_verify_args args;
} verify_ctx;
static int run_verify(void *c) { return specd_cuda_verify(&((verify_ctx *)c)->args, NULL); }

typedef struct copy_ctx {
    void *dst;
    const void *src;
    size_t bytes;
} copy_ctx;
static int run_copy(void *c) {
    copy_ctx *x = (copy_ctx *)c;
    return (int)cudaMemcpyAsync(x->dst, x->src, x->bytes, cudaMemcpyDeviceToDevice, 0);
}
static int run_empty(void *c) {
    (void)c;
    empty_kernel<<<1, 1>>>();
    return (int)cudaGetLastError();
}

int main(int argc, char **argv) {
    int n_runs = argc > 1 ? atoi(argv[1]) : 50;
    if (n_runs < 1) n_runs = 50;
    int dev_count = 0;
    if (cudaGetDeviceCount(&dev_count) != cudaSuccess || dev_count == 0) {
        printf("bench_verify: no CUDA device, nothing measured\n");
        return 0;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    const size_t max_rows = (size_t)MAX_SEQS * SLOTS_PER_SEQ;
    float *host = (float *)malloc(max_rows * V * sizeof(float));
    uint16_t *host16 = (uint16_t *)malloc(max_rows * V * sizeof(uint16_t));
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < max_rows * V; i++) {
        h ^= h << 13;
        h ^= h >> 7;
        h ^= h << 17;
        float v = (float)((h >> 40) & 0xffffff) * (8.0f / 16777216.0f) - 4.0f;
        host[i] = v;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        host16[i] = (uint16_t)(bits >> 16); /* bf16 by truncation: any bf16 values do */
    }
    void *d32 = NULL, *d16 = NULL, *dst = NULL, *scratch = NULL;
    specd_cuda_verify_out *out = NULL;
    size_t sb = specd_cuda_verify_scratch_bytes(MAX_SEQS);
    if (cudaMalloc(&d32, max_rows * V * 4) || cudaMalloc(&d16, max_rows * V * 2) ||
        cudaMalloc(&dst, max_rows * V * 4) || cudaMalloc(&scratch, sb) ||
        cudaMalloc((void **)&out, MAX_SEQS * sizeof *out))
        die("cudaMalloc", (int)cudaGetLastError());
    cudaMemcpy(d32, host, max_rows * V * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(d16, host16, max_rows * V * 2, cudaMemcpyHostToDevice);
    static specd_cuda_verify_seq seqs[MAX_SEQS];
    const float empty = median_us(run_empty, NULL, n_runs);
    printf("device: %s; median of %d runs; vocabulary %d, %d rows per sequence\n", prop.name,
           n_runs, V, SLOTS_PER_SEQ);
    /* q rows for REJECTION: uniform over the vocabulary */
    float *dq = NULL;
    {
        const size_t q_rows = (size_t)MAX_SEQS * (SLOTS_PER_SEQ - 1);
        float *hq = (float *)malloc(q_rows * V * sizeof(float));
        for (size_t i = 0; i < q_rows * V; i++) hq[i] = 1.0f / (float)V;
        if (cudaMalloc((void **)&dq, q_rows * V * sizeof(float))) die("cudaMalloc q", 2);
        cudaMemcpy(dq, hq, q_rows * V * sizeof(float), cudaMemcpyHostToDevice);
        free(hq);
    }
    enum { N_RULES = 4 };
    printf("%-5s %5s %12s %12s %12s %12s %12s %12s %14s %14s\n", "dtype", "seqs", "coupled_us",
           "greedy_us", "top-p0.9_us", "reject_us", "copy_us", "empty_us", "coupled/copy",
           "reject/copy");
    const int counts[3] = {1, 8, 64};
    for (int dt = 0; dt < 2; dt++) {
        for (int ci = 0; ci < 3; ci++) {
            const int n = counts[ci];
            float us[N_RULES];
            for (int rule = 0; rule < N_RULES; rule++) {
                for (int i = 0; i < n; i++) {
                    specd_cuda_verify_seq *s = &seqs[i];
                    memset(s, 0, sizeof *s);
                    s->rule = rule == 1   ? SPECD_CUDA_VERIFY_GREEDY
                              : rule == 3 ? SPECD_CUDA_VERIFY_REJECTION
                                          : SPECD_CUDA_VERIFY_COUPLED;
                    s->temperature = 1.0f;
                    s->top_p = rule == 2 ? 0.9f : 1.0f;
                    s->seed = 1234;
                    s->sequence = (uint32_t)i;
                    s->k = SLOTS_PER_SEQ - 1;
                    for (int j = 0; j < SLOTS_PER_SEQ; j++) {
                        s->row[j] = i * SLOTS_PER_SEQ + j;
                        s->pos[j] = 100u + (uint32_t)j;
                        if (j < s->k) s->draft[j] = (j * 7919) % V;
                    }
                    if (rule == 3) {
                        s->draft_probs = dq + (size_t)i * (SLOTS_PER_SEQ - 1) * V;
                        s->q_stride = V;
                    }
                }
                verify_ctx vc;
                memset(&vc, 0, sizeof vc);
                vc.args.logits = dt ? d16 : d32;
                vc.args.dtype = dt ? SPECD_CUDA_LOGITS_BF16 : SPECD_CUDA_LOGITS_F32;
                vc.args.row_stride = V;
                vc.args.n_rows = n * SLOTS_PER_SEQ;
                vc.args.n_vocab = V;
                vc.args.mask_at = -FLT_MAX;
                vc.args.n_seqs = n;
                vc.args.seqs = seqs;
                vc.args.out = out;
                vc.args.scratch = scratch;
                vc.args.scratch_bytes = sb;
                us[rule] = median_us(run_verify, &vc, n_runs);
            }
            copy_ctx cc = {dst, dt ? d16 : d32, (size_t)n * SLOTS_PER_SEQ * V * (dt ? 2 : 4)};
            const float copy = median_us(run_copy, &cc, n_runs);
            printf("%-5s %5d %12.1f %12.1f %12.1f %12.1f %12.1f %12.1f %14.2f %14.2f\n",
                   dt ? "bf16" : "f32", n, us[0], us[1], us[2], us[3], copy, empty, us[0] / copy,
                   us[3] / copy);
        }
    }
    cudaFree(dq);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) die("synchronize", (int)e);
    cudaFree(d32);
    cudaFree(d16);
    cudaFree(dst);
    cudaFree(scratch);
    cudaFree(out);
    free(host);
    free(host16);
    return 0;
}
