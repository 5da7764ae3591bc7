/* Host API v2 batches with logits on a CUDA device (session/spec_device.c): one launch decides
 * every sequence of a batch, and each sequence's outcome (tokens, accepted count, keep list,
 * lossy) equals the outcome of the same sequence fed the same rows from host memory (the CPU
 * engine) and of one fed the device rows through the copy path (SPECD_CUDA_VERIFY=host), step
 * after step. Sequences mix every rule and transform the acceptance engine takes: GREEDY,
 * COUPLED, REJECTION with a deterministic drafter or with q rows, relaxed REJECTION (tau > 0,
 * lossy); temperature, top-k, top-p, min-p, a logit bias with a -inf ban; q rows under GREEDY and
 * COUPLED too (checked, as the engine checks them); ngram chains and the test's own tree drafter.
 * bf16 rows with a padded stride and -inf padding. Where the kernel library loads, the test
 * asserts one launch per batch, one bias upload per biased sequence (not per step) and that every
 * step was decided on the device; a bad q row under COUPLED and GREEDY is refused by the kernel
 * and fails with the host path's error, and a bias naming a token twice is refused when the
 * sequence opens. Skips without a CUDA runtime or device. */
#include "test_main.h"

#include "specd/spec_batch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/fp16.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"
#include "session/spec_device.h"

enum { V = 300, STRIDE = 320, NSEQ = 7, STEPS = 8, MAX_ROWS = 128 };

typedef struct seq_setting {
    specd_accept_rule rule;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    int bias;  /* the logit bias BIAS (a -inf ban among its values) */
    float tau; /* relaxed REJECTION: lossy */
} seq_setting;

/* Given unsorted (the engine sorts its copy); token 2, which ngram drafts, is banned. */
static const specd_logit_bias BIAS[] = {{.token = 11, .bias = 4.0f},
                                        {.token = 2, .bias = -INFINITY},
                                        {.token = 7, .bias = -2.5f},
                                        {.token = 5, .bias = 1.5f}};

static const seq_setting SET[NSEQ] = {
    {SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 1, 0.0f},
    {SPECD_ACCEPT_COUPLED, 0.8f, 0, 0.9f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_COUPLED, 1.0f, 40, 1.0f, 0.02f, 0, 0.0f},
    {SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_REJECTION, 0.7f, 0, 0.8f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_COUPLED, 1.0f, 0, 1.0f, 0.0f, 1, 0.0f},
    {SPECD_ACCEPT_REJECTION, 0.9f, 0, 1.0f, 0.0f, 0, 0.5f},
};


/* A drafter policy of the test's own that proposes trees: two siblings under the pending token
 * and a child of the first, each drawn from its own q by the policy's generator (option "q=0": a
 * deterministic drafter, no q). */
typedef struct tree_drafter {
    int32_t n_vocab;
    int with_q;
    int bad_q; /* option "q=bad": the first node's q row sums to 2 */
    uint64_t h;
} tree_drafter;

static specd_status td_create(const specd_policy_env *env, const char *options, void **state,
                              specd_error *err) {
    (void)err;
    tree_drafter *t = calloc(1, sizeof *t);
    if (!t) return SPECD_E_NOMEM;
    t->n_vocab = env->n_vocab;
    t->with_q = !(options && strcmp(options, "q=0") == 0);
    t->bad_q = options && strcmp(options, "q=bad") == 0;
    t->h = 0x9e3779b97f4a7c15ull ^ env->seq_key;
    *state = t;
    return SPECD_OK;
}

static void td_destroy(void *state) { free(state); }

static uint64_t td_next(tree_drafter *t) {
    t->h ^= t->h << 13;
    t->h ^= t->h >> 7;
    t->h ^= t->h << 17;
    return t->h;
}

/* q over the first 20 tokens, most of it on the prompt's cycle token after last. */
static void td_q(const tree_drafter *t, int32_t last, float *q) {
    double sum = 0.0;
    for (int32_t x = 0; x < t->n_vocab; x++) sum += q[x] = x < 20 ? (x == last % 3 + 1 ? 40.0f : 1.0f) : 0.0f;
    for (int32_t x = 0; x < t->n_vocab; x++) q[x] = (float)(q[x] / sum);
}

static int32_t td_draw(tree_drafter *t, const float *q) {
    const double u = (double)(td_next(t) >> 11) * 0x1p-53;
    double c = 0.0;
    int32_t x = 0;
    for (; x < t->n_vocab - 1; x++) {
        c += q[x];
        if (u < c && q[x] > 0.0f) break;
    }
    return x;
}

static specd_status td_tree(void *state, const int32_t *history, int64_t n_history,
                            int32_t max_nodes, int32_t max_depth, int32_t *parent, int32_t *token,
                            int32_t *n_nodes, float *q, int *has_q, specd_error *err) {
    (void)err;
    tree_drafter *t = state;
    *n_nodes = 0;
    if (max_nodes < 3 || max_depth < 2) return SPECD_OK;
    const int32_t last = history[n_history - 1];
    static const int32_t par[3] = {-1, -1, 0};
    for (int32_t i = 0; i < 3; i++) {
        parent[i] = par[i];
        const int32_t before = par[i] < 0 ? last : token[par[i]];
        if (t->with_q && q) {
            td_q(t, before, q + (size_t)i * (size_t)t->n_vocab);
            token[i] = td_draw(t, q + (size_t)i * (size_t)t->n_vocab);
            if (t->bad_q && i == 0)
                for (int32_t x = 0; x < t->n_vocab; x++) q[x] *= 2.0f;
        } else {
            token[i] = (before + (i == 1 ? 1 : 0)) % 3 + 1;
        }
    }
    *has_q = t->with_q && q != NULL;
    *n_nodes = 3;
    return SPECD_OK;
}

static specd_status td_propose(void *state, const int32_t *history, int64_t n_history,
                               int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                               int *has_q, specd_error *err) {
    (void)state, (void)history, (void)n_history, (void)max_draft, (void)draft, (void)q,
        (void)has_q, (void)err;
    *n_draft = 0; /* never called: propose_tree is */
    return SPECD_OK;
}

static specd_policy_ops tree_ops(void) {
    specd_policy_ops o;
    memset(&o, 0, sizeof o);
    o.abi_version = SPECD_POLICY_ABI_VERSION;
    o.name = "test-tree";
    o.create = td_create;
    o.destroy = td_destroy;
    o.propose = td_propose;
    o.flags = SPECD_POLICY_NEEDS_Q;
    o.propose_tree = td_tree;
    return o;
}

static specd_policy_ops TREE_OPS;

/* The trees' sequences: REJECTION with q (plain, top-p), without q, GREEDY and COUPLED with q
 * (checked, unread), COUPLED without q, relaxed REJECTION with q and the bias. */
static const seq_setting TREE_SET[NSEQ] = {
    {SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_REJECTION, 0.9f, 0, 0.9f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_REJECTION, 1.0f, 30, 1.0f, 0.01f, 0, 0.0f},
    {SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_COUPLED, 0.8f, 0, 1.0f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.8f, 0.0f, 0, 0.0f},
    {SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 1, 0.3f},
};
static const char *const TREE_OPTS[NSEQ] = {"", "", "q=0", "", "", "q=0", ""};

static specd_seq_params seq_params(const seq_setting *set, int trees, const char *options,
                                   int i) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = "ngram";
    if (trees) {
        p.policy_ops = &TREE_OPS;
        p.policy_options = options;
    }
    p.adaptive = 0;
    p.rule = set->rule;
    p.tau = set->tau;
    p.sampling.temperature = set->temperature;
    p.sampling.top_k = set->top_k;
    p.sampling.top_p = set->top_p;
    p.sampling.min_p = set->min_p;
    if (set->bias) {
        p.sampling.bias = BIAS;
        p.sampling.n_bias = sizeof BIAS / sizeof BIAS[0];
    }
    p.stream_key = 1000u + (uint64_t)i;
    return p;
}

static const int32_t PROMPT[] = {1, 2, 3, 1, 2, 3, 1, 2};

static specd_spec *new_spec(int32_t max_seqs) {
    specd_spec_params sp = specd_spec_default_params();
    sp.n_vocab = V;
    sp.max_seqs = max_seqs;
    specd_spec *spec;
    specd_error err;
    if (specd_spec_create(&sp, &spec, &err) != SPECD_OK) {
        printf("FAIL: spec_create: %s\n", err.message);
        exit(1);
    }
    return spec;
}

static specd_spec *open_spec(int trees) {
    specd_spec *spec = new_spec(NSEQ);
    specd_error err;
    const seq_setting *set = trees ? TREE_SET : SET;
    for (int i = 0; i < NSEQ; i++) {
        specd_seq_params p = seq_params(&set[i], trees, trees ? TREE_OPTS[i] : NULL, i);
        if (specd_spec_seq_open(spec, i, PROMPT, 8, &p, &err) != SPECD_OK) {
            printf("FAIL: seq_open %d: %s\n", i, err.message);
            exit(1);
        }
    }
    return spec;
}

/* A step's rows: random bf16 logits with -inf padding past V; most rows peak at the draft they
 * check or, past the drafts, at the prompt's cycle (so ngram keeps drafting and drafts are
 * accepted), the others do not. */
static void fill_rows(uint16_t *rows, const specd_batch *b, int trees, uint32_t *h) {
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
            const int32_t want = next < q->layout.n_tokens && !trees
                                     ? q->layout.tokens[next]
                                     : q->layout.tokens[next - 1] % 3 + 1;
            rows[(q->row_offset + j) * STRIDE + want] = specd_fp32_to_bf16(9.0f);
        }
    }
}

/* The same outcome: tokens, accepted drafts, kept rows, lossy. */
static int same_outcome(const specd_step_outcome *a, const specd_step_outcome *b) {
    return a->n_emitted == b->n_emitted && a->n_accepted == b->n_accepted &&
           memcmp(a->emitted, b->emitted, (size_t)a->n_emitted * sizeof(int32_t)) == 0 &&
           a->n_keep == b->n_keep &&
           memcmp(a->keep, b->keep, (size_t)a->n_keep * sizeof(int32_t)) == 0 &&
           a->n_drafted == b->n_drafted && !a->lossy == !b->lossy;
}

/* Verifies spec's batch from the device rows through the copy path (SPECD_CUDA_VERIFY=host). */
static specd_status verify_copy_path(specd_spec *spec, const specd_logits *ld,
                                     specd_batch_result *r, specd_error *err) {
    setenv("SPECD_CUDA_VERIFY", "host", 1);
    specd_status st = specd_spec_batch_verify(spec, ld, r, err);
    unsetenv("SPECD_CUDA_VERIFY");
    return st;
}

/* Steps three specs in lockstep on the same rows: one fed host logits (the CPU engine), one fed
 * them on the device, one fed the device rows through the copy path; 0 when every outcome agrees,
 * each batch took one launch for all its sequences and the copy path none. */
static int run(const specd_cudart *rt, void *dev, int kernel, int trees) {
    const char *what = trees ? "trees" : "chains";
    const seq_setting *set = trees ? TREE_SET : SET;
    specd_spec *sh = open_spec(trees), *sd = open_spec(trees), *sc = open_spec(trees);
    static uint16_t rows[MAX_ROWS * STRIDE];
    const int32_t ids[NSEQ] = {0, 1, 2, 3, 4, 5, 6};
    uint32_t h = 11;
    int total = 0, emitted = 0, accepted = 0, drafted = 0, lossy = 0;
    uint64_t on_device = 0, launches = 0;
    const uint64_t u0 = specd_device_verify_bias_uploads();
    int n_biased = 0;
    for (int i = 0; i < NSEQ; i++) n_biased += set[i].bias != 0;
    for (int step = 0; step < STEPS; step++) {
        specd_batch bh, bd, bc;
        specd_error err;
        if (specd_spec_batch_layout(sh, ids, NSEQ, &bh, &err) != SPECD_OK ||
            specd_spec_batch_layout(sd, ids, NSEQ, &bd, &err) != SPECD_OK ||
            specd_spec_batch_layout(sc, ids, NSEQ, &bc, &err) != SPECD_OK) {
            printf("FAIL: layout: %s\n", err.message);
            return 1;
        }
        if (bh.n_rows != bd.n_rows || bh.n_rows != bc.n_rows || bh.n_rows > MAX_ROWS) {
            printf("FAIL: layouts differ or exceed %d rows\n", MAX_ROWS);
            return 1;
        }
        fill_rows(rows, &bh, trees, &h);
        rt->memcpy(dev, rows, (size_t)bh.n_rows * STRIDE * sizeof(uint16_t),
                   SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        specd_logits lh = {.data = rows,
                           .row_stride = STRIDE,
                           .n_rows = bh.n_rows,
                           .dtype = SPECD_DTYPE_BF16,
                           .device = SPECD_DEVICE_HOST};
        specd_logits ld = {.data = dev,
                           .row_stride = STRIDE,
                           .n_rows = bd.n_rows,
                           .dtype = SPECD_DTYPE_BF16,
                           .device = SPECD_DEVICE_CUDA};
        specd_batch_result rh, rd, rc;
        const uint64_t c0 = specd_device_verify_count(), l0 = specd_device_verify_launches();
        if (verify_copy_path(sc, &ld, &rc, &err) != SPECD_OK) {
            printf("FAIL: verify (copy path): %s\n", err.message);
            return 1;
        }
        if (specd_device_verify_count() != c0 || specd_device_verify_launches() != l0) {
            printf("FAIL: SPECD_CUDA_VERIFY=host still decided on the device\n");
            return 1;
        }
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
            const specd_step_outcome *a = &rh.outcome[i], *b = &rd.outcome[i], *c = &rc.outcome[i];
            if (!same_outcome(a, b) || !same_outcome(a, c)) {
                printf("FAIL: %s step %d sequence %d: device logits gave %d tokens (%d "
                       "accepted, %d rows kept, lossy %d), the copy path %d (%d, %d, %d), host "
                       "logits %d (%d, %d, %d)\n", what, step, i, b->n_emitted, b->n_accepted,
                       b->n_keep, b->lossy, c->n_emitted, c->n_accepted, c->n_keep, c->lossy,
                       a->n_emitted, a->n_accepted, a->n_keep, a->lossy);
                return 1;
            }
            /* relaxed steps say so (the engine's lossy), exact ones do not */
            if (!a->lossy != !(set[i].tau > 0.0f && a->n_drafted > 0)) {
                printf("FAIL: %s step %d sequence %d: lossy %d with tau %g and %d drafts\n",
                       what, step, i, a->lossy, (double)set[i].tau, a->n_drafted);
                return 1;
            }
            total++;
            emitted += a->n_emitted;
            accepted += a->n_accepted;
            drafted += a->n_drafted;
            lossy += a->lossy != 0;
        }
        /* every sequence on the device, in one launch */
        if (kernel && (dc != (uint64_t)NSEQ || dl != 1)) {
            printf("FAIL: %s step %d: %llu steps decided on the device in %llu launches (want %d "
                   "in 1)\n", what, step, (unsigned long long)dc, (unsigned long long)dl, NSEQ);
            return 1;
        }
    }
    if (lossy == 0) {
        printf("FAIL: %s: no relaxed (lossy) step was drafted\n", what);
        return 1;
    }
    /* each biased sequence's dense bias went to the device once, not per step */
    const uint64_t uploads = specd_device_verify_bias_uploads() - u0;
    if (kernel && uploads != (uint64_t)n_biased) {
        printf("FAIL: %s: %llu bias uploads for %d biased sequences over %d steps\n", what,
               (unsigned long long)uploads, n_biased, STEPS);
        return 1;
    }
    printf("%s: %d sequence steps from device logits equal the host's and the copy path's (%d "
           "tokens emitted, %d of %d drafts accepted, %d lossy steps); %llu decided on the device "
           "in %llu launches, %llu bias uploads for %d biased sequences%s\n", what, total,
           emitted, accepted, drafted, lossy, (unsigned long long)on_device,
           (unsigned long long)launches, (unsigned long long)uploads, n_biased,
           kernel ? "" : " (no verify kernel: the copy path)");
    specd_spec_destroy(sh);
    specd_spec_destroy(sd);
    specd_spec_destroy(sc);
    return 0;
}

/* Tree drafters whose first q row sums to 2, under COUPLED and GREEDY (which never read q): the
 * engine refuses the step, and so does the device path, with the host path's status and message;
 * the kernel, not the session, finds it (the launch runs, nothing is decided there). */
static int run_bad_q(const specd_cudart *rt, void *dev, int kernel) {
    static const seq_setting bad[2] = {
        {SPECD_ACCEPT_COUPLED, 1.0f, 0, 1.0f, 0.0f, 0, 0.0f},
        {SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 1, 0.0f},
    };
    specd_spec *sh = new_spec(2), *sd = new_spec(2);
    specd_error err;
    for (int i = 0; i < 2; i++) {
        specd_seq_params p = seq_params(&bad[i], 1, "q=bad", i);
        if (specd_spec_seq_open(sh, i, PROMPT, 8, &p, &err) != SPECD_OK ||
            specd_spec_seq_open(sd, i, PROMPT, 8, &p, &err) != SPECD_OK) {
            printf("FAIL: seq_open %d: %s\n", i, err.message);
            return 1;
        }
    }
    static uint16_t rows[MAX_ROWS * STRIDE];
    const int32_t ids[2] = {0, 1};
    uint32_t h = 5;
    specd_batch bh, bd;
    if (specd_spec_batch_layout(sh, ids, 2, &bh, &err) != SPECD_OK ||
        specd_spec_batch_layout(sd, ids, 2, &bd, &err) != SPECD_OK || bh.n_rows != bd.n_rows) {
        printf("FAIL: bad q layout\n");
        return 1;
    }
    fill_rows(rows, &bh, 1, &h);
    rt->memcpy(dev, rows, (size_t)bh.n_rows * STRIDE * sizeof(uint16_t),
               SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    specd_logits lh = {.data = rows,
                       .row_stride = STRIDE,
                       .n_rows = bh.n_rows,
                       .dtype = SPECD_DTYPE_BF16,
                       .device = SPECD_DEVICE_HOST};
    specd_logits ld = {.data = dev,
                       .row_stride = STRIDE,
                       .n_rows = bd.n_rows,
                       .dtype = SPECD_DTYPE_BF16,
                       .device = SPECD_DEVICE_CUDA};
    specd_batch_result rh, rd;
    specd_error eh, ed;
    const uint64_t c0 = specd_device_verify_count(), l0 = specd_device_verify_launches();
    const specd_status sth = specd_spec_batch_verify(sh, &lh, &rh, &eh);
    const specd_status std_ = specd_spec_batch_verify(sd, &ld, &rd, &ed);
    const uint64_t dc = specd_device_verify_count() - c0;
    const uint64_t dl = specd_device_verify_launches() - l0;
    if (sth == SPECD_OK || sth != std_ || strcmp(eh.message, ed.message) != 0 ||
        rh.n_failed != 2 || rd.n_failed != 2 || rh.status[0] != rd.status[0] ||
        rh.status[1] != rd.status[1]) {
        printf("FAIL: bad q: host logits %d (%s, %d failed), device logits %d (%s, %d failed)\n",
               (int)sth, sth == SPECD_OK ? "" : eh.message, (int)rh.n_failed, (int)std_,
               std_ == SPECD_OK ? "" : ed.message, (int)rd.n_failed);
        return 1;
    }
    if (dc != 0 || (kernel && dl != 1)) {
        printf("FAIL: bad q: %llu steps decided on the device in %llu launches (want 0 in 1)\n",
               (unsigned long long)dc, (unsigned long long)dl);
        return 1;
    }
    printf("bad q under COUPLED and GREEDY: both paths fail alike (%s); the launch decided "
           "nothing\n", ed.message);
    specd_spec_destroy(sh);
    specd_spec_destroy(sd);
    return 0;
}

/* A bias naming a token twice: the engine refuses it when the sequence opens (no sum order to
 * reproduce on the device). */
static int run_duplicate_bias(void) {
    static const specd_logit_bias twice[] = {
        {.token = 7, .bias = 1.0f}, {.token = 3, .bias = 0.5f}, {.token = 7, .bias = -2.0f}};
    specd_spec *spec = new_spec(1);
    specd_seq_params p = seq_params(&SET[5], 0, NULL, 0);
    p.sampling.bias = twice;
    p.sampling.n_bias = 3;
    specd_error err;
    const specd_status st = specd_spec_seq_open(spec, 0, PROMPT, 8, &p, &err);
    specd_spec_destroy(spec);
    if (st != SPECD_E_INVALID_ARG || !strstr(err.message, "token 7 appears twice")) {
        printf("FAIL: a bias naming token 7 twice opened (status %d: %s)\n", (int)st,
               st == SPECD_OK ? "" : err.message);
        return 1;
    }
    printf("duplicate bias token refused at open: %s\n", err.message);
    return 0;
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
    TREE_OPS = tree_ops();
    void *dev = NULL;
    if (rt->malloc(&dev, MAX_ROWS * STRIDE * sizeof(uint16_t)) != SPECD_CUDA_SUCCESS) {
        printf("FAIL: cuda malloc\n");
        return 1;
    }
    /* chains (ngram: every rule, a bias, relaxed REJECTION), then trees (the test's drafter:
     * q rows under every rule, relaxed REJECTION with the bias), bad q rows, a duplicate bias */
    if (run(rt, dev, kernel, 0) || run(rt, dev, kernel, 1) || run_bad_q(rt, dev, kernel) ||
        run_duplicate_bias())
        return 1;
    rt->free(dev);
    printf("ok\n");
    return 0;
}
