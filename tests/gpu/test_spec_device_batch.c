/* Host API v2 batches with logits on a CUDA device (session/spec_device.c): one launch decides
 * every eligible sequence of a batch, and each sequence's outcome equals the outcome of the same
 * sequence fed the same rows from host memory (the CPU engine), step after step. Sequences mix
 * rules and transforms the device takes (GREEDY, COUPLED, REJECTION with a deterministic drafter;
 * temperature, top-k, top-p, min-p) with one it does not (a logit bias: the copy path). bf16 rows
 * with a padded stride and -inf padding. The test asserts one launch per batch and that every
 * eligible step was decided on the device where the kernel library loads. Skips without a CUDA
 * runtime or device. */
#include "test_main.h"

#include "specd/spec_batch.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"
#include "session/spec_device.h"

enum { V = 300, STRIDE = 320, NSEQ = 6, STEPS = 8, MAX_ROWS = 128 };

typedef struct seq_setting {
    specd_accept_rule rule;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    int bias; /* a logit bias: not for the device */
} seq_setting;

static const seq_setting SET[NSEQ] = {
    {SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 0},
    {SPECD_ACCEPT_COUPLED, 0.8f, 0, 0.9f, 0.0f, 0},
    {SPECD_ACCEPT_COUPLED, 1.0f, 40, 1.0f, 0.02f, 0},
    {SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0},
    {SPECD_ACCEPT_REJECTION, 0.7f, 0, 0.8f, 0.0f, 0},
    {SPECD_ACCEPT_COUPLED, 1.0f, 0, 1.0f, 0.0f, 1},
};

static specd_spec *open_spec(void) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_seqs = NSEQ;
    specd_spec *spec;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) {
        printf("FAIL: spec_create: %s\n", err.message);
        exit(1);
    }
    static const specd_logit_bias bias[1] = {{7, -2.5f}};
    for (int i = 0; i < NSEQ; i++) {
        specd_seq_params p = specd_seq_default_params();
        p.policy = "ngram";
        p.adaptive = 0;
        p.rule = SET[i].rule;
        p.sampling.temperature = SET[i].temperature;
        p.sampling.top_k = SET[i].top_k;
        p.sampling.top_p = SET[i].top_p;
        p.sampling.min_p = SET[i].min_p;
        if (SET[i].bias) {
            p.sampling.bias = bias;
            p.sampling.n_bias = 1;
        }
        p.stream_key = 1000u + (uint64_t)i;
        const int32_t prompt[] = {1, 2, 3, 1, 2, 3, 1, 2};
        if (specd_spec_seq_open(spec, i, prompt, 8, &p, &err) != SPECD_OK) {
            printf("FAIL: seq_open %d: %s\n", i, err.message);
            exit(1);
        }
    }
    return spec;
}

/* A step's rows: random bf16 logits with -inf padding past V; most rows peak at the draft they
 * check or, past the drafts, at the prompt's cycle (so ngram keeps drafting and drafts are
 * accepted), the others do not. */
static void fill_rows(uint16_t *rows, const specd_batch *b, uint32_t *h) {
    for (int r = 0; r < b->n_rows; r++)
        for (int x = 0; x < STRIDE; x++) {
            *h = *h * 1664525u + 1013904223u;
            rows[r * STRIDE + x] =
                x < V ? specd_fp32_to_bf16((float)(*h >> 8) / (float)(1u << 24) * 6.0f - 3.0f)
                      : 0xff80u;
        }
    for (int i = 0; i < b->n_seqs; i++) {
        const specd_batch_seq *q = &b->seqs[i];
        for (int j = 0; j < q->layout.n_rows; j++) {
            const int32_t next = q->layout.rows[j] + 1;
            *h = *h * 1664525u + 1013904223u;
            if ((*h >> 28) % 4 == 0) continue;
            /* the draft, or past the drafts the prompt's cycle 1, 2, 3 (which ngram proposes) */
            const int32_t want = next < q->layout.n_tokens
                                     ? q->layout.tokens[next]
                                     : q->layout.tokens[next - 1] % 3 + 1;
            rows[(q->row_offset + j) * STRIDE + want] = specd_fp32_to_bf16(9.0f);
        }
    }
}

int main(void) {
    const specd_cudart *rt = specd_cudart_get(NULL);
    if (!rt) {
        printf("skipped: no CUDA runtime\n");
        return SPECD_TEST_SKIP;
    }
    if (specd_cuda_device_count() == 0) {
        printf("skipped: no CUDA device\n");
        return SPECD_TEST_SKIP;
    }
    const specd_cuda_kernels *k = specd_cuda_kernels_get(NULL);
    const int kernel = k && k->struct_size >= offsetof(specd_cuda_kernels, verify) +
                                                  sizeof k->verify && k->verify;
    specd_spec *sh = open_spec(), *sd = open_spec();
    static uint16_t rows[MAX_ROWS * STRIDE];
    void *dev = NULL;
    if (rt->malloc(&dev, sizeof rows) != SPECD_CUDA_SUCCESS) {
        printf("FAIL: cuda malloc\n");
        return 1;
    }
    const int32_t ids[NSEQ] = {0, 1, 2, 3, 4, 5};
    uint32_t h = 11;
    int total = 0, emitted = 0, accepted = 0, drafted = 0;
    uint64_t on_device = 0, launches = 0;
    for (int step = 0; step < STEPS; step++) {
        specd_batch bh, bd;
        specd_error err;
        if (specd_spec_batch_layout(sh, ids, NSEQ, &bh, &err) != SPECD_OK ||
            specd_spec_batch_layout(sd, ids, NSEQ, &bd, &err) != SPECD_OK) {
            printf("FAIL: layout: %s\n", err.message);
            return 1;
        }
        if (bh.n_rows != bd.n_rows || bh.n_rows > MAX_ROWS) {
            printf("FAIL: layouts differ or exceed %d rows\n", MAX_ROWS);
            return 1;
        }
        fill_rows(rows, &bh, &h);
        rt->memcpy(dev, rows, (size_t)bh.n_rows * STRIDE * sizeof(uint16_t),
                   SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        specd_logits lh = {rows, STRIDE, bh.n_rows, SPECD_DTYPE_BF16, SPECD_DEVICE_HOST};
        specd_logits ld = {dev, STRIDE, bd.n_rows, SPECD_DTYPE_BF16, SPECD_DEVICE_CUDA};
        specd_batch_result rh, rd;
        const uint64_t c0 = specd_device_verify_count(), l0 = specd_device_verify_launches();
        if (specd_spec_batch_verify(sh, &lh, &rh, &err) != SPECD_OK ||
            specd_spec_batch_verify(sd, &ld, &rd, &err) != SPECD_OK) {
            printf("FAIL: verify: %s\n", err.message);
            return 1;
        }
        const uint64_t dc = specd_device_verify_count() - c0;
        const uint64_t dl = specd_device_verify_launches() - l0;
        on_device += dc;
        launches += dl;
        for (int i = 0; i < NSEQ; i++) {
            const specd_step_outcome *a = &rh.outcome[i], *b = &rd.outcome[i];
            if (a->n_emitted != b->n_emitted || a->n_accepted != b->n_accepted ||
                memcmp(a->emitted, b->emitted, (size_t)a->n_emitted * sizeof(int32_t)) != 0) {
                printf("FAIL: step %d sequence %d: device logits gave %d tokens (%d accepted), "
                       "host logits %d (%d)\n", step, i, b->n_emitted, b->n_accepted,
                       a->n_emitted, a->n_accepted);
                return 1;
            }
            total++;
            emitted += a->n_emitted;
            accepted += a->n_accepted;
            drafted += a->n_drafted;
        }
        /* every sequence but the biased one on the device, in one launch */
        if (kernel && (dc != NSEQ - 1 || dl != 1)) {
            printf("FAIL: step %d: %llu steps decided on the device in %llu launches (want %d in "
                   "1)\n", step, (unsigned long long)dc, (unsigned long long)dl, NSEQ - 1);
            return 1;
        }
    }
    printf("%d sequence steps from device logits equal the host's (%d tokens emitted, %d of %d "
           "drafts accepted); %llu decided on the device in %llu launches%s\n", total, emitted,
           accepted, drafted, (unsigned long long)on_device, (unsigned long long)launches,
           kernel ? "" : " (no verify kernel: the copy path)");
    rt->free(dev);
    specd_spec_destroy(sh);
    specd_spec_destroy(sd);
    printf("ok\n");
    return 0;
}
