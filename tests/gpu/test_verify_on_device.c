/* The acceptance engine on the device (kernels/cuda/verify.cu) against the CPU engine
 * (specd_accept_chain_keyed, specd_accept_tree): the same decisions bit for bit (status, accepted
 * count, every emitted token, a tree's path) on random logits with ties, -inf and -FLT_MAX masks,
 * NaN padding past n_vocab, f32 / f16 / bf16, GREEDY, COUPLED and REJECTION (q rows on the
 * device with zeros, or none; relaxed tau; bad q rows) with every transform (temperature, bias
 * with bans, top-k, top-p, min-p), chains with keyed rows in any order, with and without a bonus
 * row, trees, bad rows; each sequence alone and inside the batch (batch invariance); a wide round
 * (3,000 tokens) whose top-p cut spans several of the kernel's sorted chunks and runs of ties
 * longer than one; then G-tests of device samples against p: COUPLED's keyed sample, and the
 * first token REJECTION emits for a draft drawn from q (chain, and a tree of two siblings).
 * Prints the counts. Skips (77) without the kernel library or a device. */
#include "gpu_harness.h"
#include "verify_compare.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "accept/gof.h"
#include "kernels/cpu/fp16.h"
#include "specd/accept.h"
#include "specd/sampling.h"

enum { ROWS = 64 };       /* the CPU emulation (tests/gpu/emu/run) shrinks this */
enum { V_MAX = 3000, STRIDE_MAX = 3072, NR = 24, NSEQ = 12 };
/* The round's vocabulary and row stride (the wide round raises them). */
static int V = 1000, STRIDE = 1040;

enum { Q_NONE = 0, Q_ROWS = 1, Q_BAD = 2 }; /* REJECTION's q: none (one-hot), rows, a bad row */
enum { CHAIN = 0, TREE = 1 };

typedef struct setting {
    const char *name;
    int rule;
    float temperature;
    int32_t top_k;
    float min_p;
    int bias;
    float top_p;
    int q;
    int shape;
    float tau;
} setting;

static const setting SETTINGS[] = {
    {"greedy", SPECD_ACCEPT_GREEDY, 1.0f, 0, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"greedy+bias", SPECD_ACCEPT_GREEDY, 1.0f, 0, 0.0f, 1, 1.0f, 0, CHAIN, 0.0f},
    {"coupled T=1", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled T=0", SPECD_ACCEPT_COUPLED, 0.0f, 0, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled T=0.7", SPECD_ACCEPT_COUPLED, 0.7f, 0, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled T=1.3 bias", SPECD_ACCEPT_COUPLED, 1.3f, 0, 0.0f, 1, 1.0f, 0, CHAIN, 0.0f},
    {"coupled top-k 1", SPECD_ACCEPT_COUPLED, 1.0f, 1, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled top-k 7", SPECD_ACCEPT_COUPLED, 0.9f, 7, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled top-k 200", SPECD_ACCEPT_COUPLED, 1.0f, 200, 0.0f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled min-p 0.05", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.05f, 0, 1.0f, 0, CHAIN, 0.0f},
    {"coupled T=0.8 top-k 20 min-p 0.1 bias", SPECD_ACCEPT_COUPLED, 0.8f, 20, 0.1f, 1, 1.0f, 0,
     CHAIN, 0.0f},
    {"coupled top-p 0.9", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.0f, 0, 0.9f, 0, CHAIN, 0.0f},
    {"coupled T=0.7 top-p 0.5 top-k 50 bias", SPECD_ACCEPT_COUPLED, 0.7f, 50, 0.0f, 1, 0.5f, 0,
     CHAIN, 0.0f},
    {"coupled top-p 0.999 min-p 0.01", SPECD_ACCEPT_COUPLED, 1.2f, 0, 0.01f, 0, 0.999f, 0, CHAIN,
     0.0f},
    {"rejection q", SPECD_ACCEPT_REJECTION, 1.0f, 0, 0.0f, 0, 1.0f, Q_ROWS, CHAIN, 0.0f},
    {"rejection no q", SPECD_ACCEPT_REJECTION, 0.8f, 0, 0.0f, 0, 1.0f, Q_NONE, CHAIN, 0.0f},
    {"rejection q T=0.6 top-k 30 top-p 0.8 bias", SPECD_ACCEPT_REJECTION, 0.6f, 30, 0.0f, 1,
     0.8f, Q_ROWS, CHAIN, 0.0f},
    {"rejection q min-p 0.02 tau 0.5", SPECD_ACCEPT_REJECTION, 1.0f, 0, 0.02f, 0, 1.0f, Q_ROWS,
     CHAIN, 0.5f},
    {"rejection q T=0", SPECD_ACCEPT_REJECTION, 0.0f, 0, 0.0f, 0, 1.0f, Q_ROWS, CHAIN, 0.0f},
    {"rejection bad q", SPECD_ACCEPT_REJECTION, 1.0f, 0, 0.0f, 0, 1.0f, Q_BAD, CHAIN, 0.0f},
    {"tree greedy", SPECD_ACCEPT_GREEDY, 1.0f, 0, 0.0f, 1, 1.0f, 0, TREE, 0.0f},
    {"tree coupled top-p 0.9", SPECD_ACCEPT_COUPLED, 0.9f, 0, 0.0f, 0, 0.9f, 0, TREE, 0.0f},
    {"tree rejection q", SPECD_ACCEPT_REJECTION, 1.0f, 0, 0.0f, 0, 1.0f, Q_ROWS, TREE, 0.0f},
    {"tree rejection no q top-k 40", SPECD_ACCEPT_REJECTION, 0.9f, 40, 0.0f, 0, 1.0f, Q_NONE,
     TREE, 0.0f},
    {"tree rejection q top-p 0.7 min-p 0.01", SPECD_ACCEPT_REJECTION, 1.1f, 0, 0.01f, 1, 0.7f,
     Q_ROWS, TREE, 0.0f},
};
enum { N_SETTINGS = sizeof SETTINGS / sizeof SETTINGS[0] };
/* The wide round: top-p over 3,000 tokens of few distinct values (several sorted chunks, and runs
 * of equal z longer than a chunk). */
static const setting WIDE[] = {
    {"wide coupled top-p 0.95", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.0f, 0, 0.95f, 0, CHAIN, 0.0f},
    {"wide coupled top-p 0.6", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.0f, 0, 0.6f, 0, CHAIN, 0.0f},
    {"wide rejection q top-p 0.9", SPECD_ACCEPT_REJECTION, 1.0f, 0, 0.0f, 0, 0.9f, Q_ROWS, CHAIN,
     0.0f},
    {"wide coupled top-k 2500 top-p 0.99", SPECD_ACCEPT_COUPLED, 1.0f, 2500, 0.0f, 0, 0.99f, 0,
     CHAIN, 0.0f},
};
enum { N_WIDE = sizeof WIDE / sizeof WIDE[0] };

static uint32_t rnd(uint32_t n) { return (uint32_t)(gpu_rng_next() % n); }

/* Logits with ties (multiples of 1/4), some -inf and -FLT_MAX masks, NaN padding. */
static void make_rows(float *f, int spread) {
    for (int r = 0; r < NR; r++) {
        for (int x = 0; x < STRIDE; x++) {
            float v = x < V ? (float)((int)rnd(8u * (uint32_t)spread) - 4 * spread) * 0.25f : NAN;
            if (spread == 1 && x < V && rnd(5) < 3) v = -0.25f; /* a run of ties past CAP */
            if (x < V && rnd(50) == 0) v = -INFINITY;
            if (x < V && rnd(80) == 0) v = -FLT_MAX;
            f[(size_t)r * STRIDE + x] = v;
        }
        f[(size_t)r * STRIDE + rnd(V)] = (float)spread; /* a top tie or two */
        f[(size_t)r * STRIDE + rnd(V)] = (float)spread;
    }
}

/* Rows as the device will read them in dtype, and back to floats (what the CPU is given). */
static void encode(const float *f, int dtype, void *dev_rows, float *dense) {
    for (int r = 0; r < NR; r++)
        for (int x = 0; x < STRIDE; x++) {
            float v = f[(size_t)r * STRIDE + x];
            size_t i = (size_t)r * STRIDE + x;
            if (dtype == SPECD_CUDA_LOGITS_F32) {
                ((float *)dev_rows)[i] = v;
            } else if (dtype == SPECD_CUDA_LOGITS_F16) {
                uint16_t h = v == -FLT_MAX ? 0xfc00u : specd_fp32_to_fp16(v); /* -inf in f16 */
                ((uint16_t *)dev_rows)[i] = h;
                v = specd_fp16_to_fp32(h);
            } else {
                uint16_t h = v != v ? 0x7fc0u : specd_fp32_to_bf16(v);
                ((uint16_t *)dev_rows)[i] = h;
                v = specd_bf16_to_fp32(h);
            }
            if (x < V) dense[(size_t)r * V + x] = v;
        }
}

typedef struct seq_case {
    const setting *st;
    specd_logit_bias bias[6];
    int n_bias;
    float *dense_bias; /* device, V floats, or NULL */
    float *q_host;     /* k rows of V (REJECTION with q), or NULL */
    float *q_dev;      /* the same rows on the device, QPAD floats apart */
    specd_cuda_verify_seq d;
} seq_case;

enum { QPAD = 24 }; /* q rows on the device are V + QPAD floats apart */

static specd_sampling_params sampling_of(const seq_case *c) {
    return verify_sampling_of(&c->d, c->bias, c->n_bias);
}

/* The CPU engine's decision for one sequence, in the device's output form. */
static specd_cuda_verify_out cpu_verify(const seq_case *c, const float *dense) {
    const specd_cuda_verify_seq *d = &c->d;
    if (d->tree || d->k > 0)
        return verify_cpu_decide(d, sampling_of(c), dense, NR, V, c->q_host, d->seed);
    /* a plain step: the engine's keyed sample of the bonus row */
    specd_cuda_verify_out o;
    memset(&o, 0, sizeof o);
    specd_sampling_params sp = sampling_of(c);
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, V, &s, &err) != SPECD_OK) exit(1);
    specd_sample_key key = {.seed = d->seed, .sequence = d->sequence, .position = d->pos[0]};
    const specd_status st =
        specd_sampler_sample(s, dense + (size_t)d->row[0] * V, V, key, &o.tokens[0], &err);
    specd_sampler_destroy(s);
    if (st != SPECD_OK) {
        memset(&o, 0, sizeof o);
        o.status = -1; /* some failure: the device must report one too */
        return o;
    }
    o.n_emitted = 1;
    return o;
}

/* Two device results say the same (what the kernel defines for their status). */
static int same_dev(const specd_cuda_verify_out *a, const specd_cuda_verify_out *b) {
    if (a->status != b->status) return 0;
    if (a->status != SPECD_CUDA_VERIFY_OK) return a->bad_row == b->bad_row;
    return a->n_accepted == b->n_accepted && a->n_emitted == b->n_emitted &&
           memcmp(a->tokens, b->tokens, (size_t)a->n_emitted * sizeof(int32_t)) == 0 &&
           memcmp(a->path, b->path, (size_t)a->n_accepted * sizeof(int32_t)) == 0;
}

/* A target token for a row as the CPU samples it, so drafts are often accepted. */
static int32_t cpu_target(const seq_case *c, const float *dense, int32_t row, uint32_t pos) {
    specd_sampling_params sp = sampling_of(c);
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, V, &s, &err) != SPECD_OK) exit(1);
    specd_sample_key key = {.seed = c->d.seed, .sequence = c->d.sequence, .position = pos};
    int32_t t = (int32_t)rnd((uint32_t)V);
    (void)specd_sampler_sample(s, dense + (size_t)row * V, V, key, &t, &err);
    specd_sampler_destroy(s);
    return t;
}

/* A probability row over V tokens (about a third of them 0) giving tok weight, summing to 1
 * within the engine's tolerance. */
static void make_q(float *q, int32_t tok) {
    double sum = 0.0;
    for (int x = 0; x < V; x++) {
        q[x] = rnd(3) == 0 ? 0.0f : (float)(rnd(1000) + 1);
        if (x == tok) q[x] = (float)(rnd(4000) + 500);
        sum += q[x];
    }
    for (int x = 0; x < V; x++) q[x] = (float)(q[x] / sum);
}

static void make_case(const gpu_ctx *g, seq_case *c, const setting *st, const float *dense,
                      int bad_rows_ok) {
    memset(c, 0, sizeof *c);
    c->st = st;
    specd_cuda_verify_seq *d = &c->d;
    verify_set_rule(d, st->rule, st->temperature, st->top_k, st->top_p, st->min_p);
    d->relaxed_tau = st->tau;
    d->seed = gpu_rng_next();
    d->sequence = (uint32_t)gpu_rng_next();
    d->tree = st->shape == TREE;
    d->k = d->tree ? 1 + (int32_t)rnd(8) : (int32_t)rnd(9); /* tree 1..8, chain 0..8 */
    if (st->q && d->k == 0) d->k = 1 + (int32_t)rnd(8);
    uint32_t base = (uint32_t)rnd(1u << 20);
    for (int j = 0; j < d->k; j++) d->parent[j] = d->tree ? (int32_t)rnd((uint32_t)j + 1) - 1 : 0;
    for (int j = 0; j <= d->k; j++) {
        /* rows in any order; bad rows (the block's last two) only where asked */
        d->row[j] = (int32_t)rnd(bad_rows_ok ? NR : NR - 2);
        d->pos[j] = d->tree ? base + (j ? (uint32_t)verify_depth_of(d->parent, j - 1) + 1 : 0)
                            : base + (uint32_t)j;
    }
    if (!d->tree && d->k > 0 && rnd(4) == 0) d->row[d->k] = -1; /* no bonus slot */
    if (st->bias) {
        c->n_bias = 6;
        float *db = host_alloc((size_t)V * sizeof(float));
        for (int i = 0; i < 6; i++) {
            int32_t tok;
            int dup;
            do {
                tok = (int32_t)rnd((uint32_t)V);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= c->bias[j].token == tok;
            } while (dup);
            c->bias[i].token = tok;
            c->bias[i].bias = i == 0 ? -INFINITY : (float)((int)rnd(17) - 8) * 0.5f;
            db[tok] = c->bias[i].bias;
        }
        c->dense_bias = gpu_put(g, db, (size_t)V * sizeof(float));
        free(db);
        d->bias = c->dense_bias;
    }
    for (int j = 0; j < d->k; j++) {
        /* the draft at node j is often the target's token at the slot it is tested on */
        const int32_t slot = d->tree ? d->parent[j] + 1 : j;
        d->draft[j] = rnd(4) != 0 && d->row[slot] < NR - 2
                          ? cpu_target(c, dense, d->row[slot], d->pos[slot])
                          : (int32_t)rnd((uint32_t)V);
    }
    if (st->q != Q_NONE) {
        const size_t qs = (size_t)V + QPAD;
        c->q_host = host_alloc((size_t)d->k * (size_t)V * sizeof(float));
        float *qd = host_alloc((size_t)d->k * qs * sizeof(float));
        for (int j = 0; j < d->k; j++) {
            make_q(c->q_host + (size_t)j * V, d->draft[j]);
            memcpy(qd + (size_t)j * qs, c->q_host + (size_t)j * V, (size_t)V * sizeof(float));
            for (size_t x = (size_t)V; x < qs; x++) qd[(size_t)j * qs + x] = NAN; /* padding */
        }
        if (st->q == Q_BAD) { /* one row breaks the engine's q check: a sum, an entry, or q = 0 */
            const int j = (int)rnd((uint32_t)d->k), how = (int)rnd(3);
            float *row = c->q_host + (size_t)j * V;
            if (how == 0) row[rnd((uint32_t)V)] += 0.01f;
            if (how == 1) row[rnd((uint32_t)V)] = -0.0001f;
            if (how == 2) row[d->draft[j]] = 0.0f;
            memcpy(qd + (size_t)j * qs, row, (size_t)V * sizeof(float));
        }
        c->q_dev = gpu_put(g, qd, (size_t)d->k * qs * sizeof(float));
        free(qd);
        d->draft_probs = c->q_dev;
        d->q_stride = (int64_t)qs;
    }
}

static void free_case(const gpu_ctx *g, seq_case *c) {
    if (c->dense_bias) gpu_free(g, c->dense_bias);
    if (c->q_dev) gpu_free(g, c->q_dev);
    free(c->q_host);
}

typedef struct dev_bufs {
    specd_cuda_verify_out *out;
    void *scratch;
    size_t scratch_bytes;
} dev_bufs;

static void run_device(const gpu_ctx *g, const void *rows, int dtype, const seq_case *cs, int n,
                       dev_bufs *b, specd_cuda_verify_out *host_out) {
    specd_cuda_verify_seq seqs[NSEQ];
    for (int i = 0; i < n; i++) seqs[i] = cs[i].d;
    specd_cuda_verify_args a = {.logits = rows, .dtype = dtype, .row_stride = STRIDE,
                                .n_rows = NR, .n_vocab = V, .mask_at = -FLT_MAX, .n_seqs = n,
                                .seqs = seqs, .out = b->out, .scratch = b->scratch,
                                .scratch_bytes = b->scratch_bytes};
    gpu_check(g, "verify", g->k->verify(&a, NULL));
    gpu_get(g, host_out, b->out, (size_t)n * sizeof *host_out);
}

enum { GV = 24 };

/* A G-test row: few values, one -inf, and p under the setting's transform. */
static float *g_row(const setting *st, float *row, float *probs) {
    for (int x = 0; x < GV; x++) row[x] = (float)((int)rnd(9) - 4) * 0.5f;
    row[3] = -INFINITY;
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = st->temperature;
    sp.top_k = st->top_k;
    sp.top_p = st->top_p;
    sp.min_p = st->min_p;
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, GV, &s, &err) != SPECD_OK ||
        specd_sampler_probs(s, row, GV, probs, &err) != SPECD_OK) {
        printf("FAIL: sampler: %s\n", err.message);
        exit(1);
    }
    specd_sampler_destroy(s);
    return probs;
}

/* Draws sequences on the device and G-tests their first emitted token against p. */
static int g_test_run(const gpu_ctx *g, const char *name, specd_cuda_verify_seq *seqs, int draws,
                      const float *row, int n_rows, const float *probs) {
    float *drow = gpu_put(g, row, (size_t)n_rows * GV * sizeof(float));
    size_t sb = specd_cuda_verify_scratch_bytes(draws);
    void *scratch = gpu_alloc(g, sb);
    specd_cuda_verify_out *out = gpu_alloc(g, (size_t)draws * sizeof *out);
    specd_cuda_verify_args a = {.logits = drow, .dtype = SPECD_CUDA_LOGITS_F32, .row_stride = GV,
                                .n_rows = n_rows, .n_vocab = GV, .mask_at = -FLT_MAX,
                                .n_seqs = draws, .seqs = seqs, .out = out, .scratch = scratch,
                                .scratch_bytes = sb};
    gpu_check(g, "verify (G-test)", g->k->verify(&a, NULL));
    specd_cuda_verify_out *ho = host_alloc((size_t)draws * sizeof *ho);
    gpu_get(g, ho, out, (size_t)draws * sizeof *ho);
    uint64_t counts[GV] = {0};
    double p[GV];
    for (int x = 0; x < GV; x++) p[x] = probs[x];
    int ok = 1;
    for (int i = 0; i < draws; i++) {
        if (ho[i].status != 0 || ho[i].n_emitted < 1 || ho[i].tokens[0] < 0 ||
            ho[i].tokens[0] >= GV) {
            ok = 0;
            break;
        }
        counts[ho[i].tokens[0]]++;
    }
    double pv = ok ? gof_pvalue(counts, p, GV, (uint64_t)draws) : 0.0;
    printf("G-test %-44s %d draws: p-value %.4f%s\n", name, draws, pv, pv >= 1e-3 ? "" : "  FAIL");
    gpu_free(g, drow);
    gpu_free(g, scratch);
    gpu_free(g, out);
    free(ho);
    return pv >= 1e-3;
}

static void g_seq(specd_cuda_verify_seq *d, const setting *st, int i) {
    memset(d, 0, sizeof *d);
    verify_set_rule(d, st->rule, st->temperature, st->top_k, st->top_p, st->min_p);
    d->seed = 0x5eedull;
    d->sequence = (uint32_t)i; /* independent streams */
}

/* COUPLED: the keyed sample of a plain step against p (specd_sampler_probs). */
static int g_test(const gpu_ctx *g, const setting *st, int draws) {
    float row[GV], probs[GV];
    g_row(st, row, probs);
    specd_cuda_verify_seq *seqs = host_alloc((size_t)draws * sizeof *seqs);
    for (int i = 0; i < draws; i++) {
        g_seq(&seqs[i], st, i);
        seqs[i].row[0] = 0;
        seqs[i].pos[0] = 17;
    }
    int ok = g_test_run(g, st->name, seqs, draws, row, 1, probs);
    free(seqs);
    return ok;
}

/* REJECTION: drafts drawn from q by the host (independent of the verifier's streams), verified
 * against p; the first emitted token (the accepted draft or the correction) must follow p. Chain:
 * one draft, then the bonus row. Tree: two siblings under the root, each drawn from its own q. */
static int g_test_rejection(const gpu_ctx *g, const setting *st, int tree, int with_q,
                            int draws) {
    float row[2 * GV], probs[GV], q[2 * GV];
    g_row(st, row, probs);
    memcpy(row + GV, row, sizeof(float) * GV); /* the bonus / leaf rows */
    const int nq = tree ? 2 : 1;
    for (int j = 0; j < nq; j++) { /* q far from p: most of the mass where p has little */
        double sum = 0.0;
        for (int x = 0; x < GV; x++) sum += q[j * GV + x] = (float)(1 + (x * (j + 3)) % 7);
        for (int x = 0; x < GV; x++) q[j * GV + x] = (float)(q[j * GV + x] / sum);
    }
    float *dq = with_q ? gpu_put(g, q, (size_t)nq * GV * sizeof(float)) : NULL;
    specd_cuda_verify_seq *seqs = host_alloc((size_t)draws * sizeof *seqs);
    for (int i = 0; i < draws; i++) {
        specd_cuda_verify_seq *d = &seqs[i];
        g_seq(d, st, i);
        d->k = nq;
        d->tree = tree;
        d->draft_probs = dq;
        d->q_stride = GV;
        for (int j = 0; j < nq; j++) {
            if (with_q) { /* x ~ q_j by the host's own generator */
                double u = (double)(gpu_rng_next() >> 11) * 0x1p-53, c = 0.0;
                int x = 0;
                for (; x < GV - 1; x++) {
                    c += q[j * GV + x];
                    if (u < c) break;
                }
                d->draft[j] = x;
            } else { /* a deterministic drafter: a fixed token */
                d->draft[j] = 5 + j;
            }
            d->parent[j] = -1;
        }
        for (int s = 0; s <= nq; s++) {
            d->row[s] = s == 0 ? 0 : 1;
            d->pos[s] = 17 + (s ? 1u : 0u);
        }
    }
    char name[96];
    snprintf(name, sizeof name, "%s %s%s", st->name, tree ? "tree" : "chain",
             with_q ? "" : " (no q)");
    int ok = g_test_run(g, name, seqs, draws, row, 2, probs);
    if (dq) gpu_free(g, dq);
    free(seqs);
    return ok;
}

/* One round: rows, NSEQ sequences of the given settings, the CPU's and the device's decisions
 * (batch and alone). Returns the failures; adds to the counters. */
static int run_round(const gpu_ctx *g, int dtype, int spread, int bad, const setting *set,
                     int n_set, int first, float *f, float *dense, void *hrows, void *drows,
                     dev_bufs *b, int *total, int *accepted, int *emitted, int *errors,
                     int *per_rule) {
    static const char *dtype_name[3] = {"f32", "f16", "bf16"};
    make_rows(f, spread);
    if (bad) { /* the block's last two rows are bad: NaN, and everything masked */
        f[(size_t)(NR - 2) * STRIDE + rnd((uint32_t)V)] = NAN;
        for (int x = 0; x < V; x++) f[(size_t)(NR - 1) * STRIDE + x] = -INFINITY;
    }
    encode(f, dtype, hrows, dense);
    g->rt->memcpy(drows, hrows, (size_t)NR * STRIDE * (dtype ? 2 : 4),
                  SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
    seq_case cs[NSEQ];
    specd_cuda_verify_out cpu[NSEQ], dev[NSEQ], alone;
    for (int i = 0; i < NSEQ; i++) make_case(g, &cs[i], &set[(first + i) % n_set], dense, bad);
    for (int i = 0; i < NSEQ; i++) cpu[i] = cpu_verify(&cs[i], dense);
    run_device(g, drows, dtype, cs, NSEQ, b, dev);
    int fails = 0;
    for (int i = 0; i < NSEQ; i++) {
        int ok = verify_same_out(&dev[i], &cpu[i]);
        /* the same sequence alone: batch invariance, bitwise */
        run_device(g, drows, dtype, &cs[i], 1, b, &alone);
        ok &= same_dev(&alone, &dev[i]);
        if (!ok) {
            printf("FAIL %s V %d %s seq %d k %d: cpu status %d acc %d emit %d tok0 %d | "
                   "dev status %d acc %d emit %d tok0 %d\n",
                   dtype_name[dtype], V, cs[i].st->name, i, cs[i].d.k, cpu[i].status,
                   cpu[i].n_accepted, cpu[i].n_emitted, cpu[i].tokens[0], dev[i].status,
                   dev[i].n_accepted, dev[i].n_emitted, dev[i].tokens[0]);
            fails++;
        }
        (*total)++;
        per_rule[cs[i].st->rule]++;
        if (cpu[i].status == 0) {
            *accepted += cpu[i].n_accepted;
            *emitted += cpu[i].n_emitted;
        } else {
            (*errors)++;
        }
        free_case(g, &cs[i]);
    }
    return fails;
}

int main(void) {
    gpu_ctx g = gpu_open_or_skip();
    if (g.k->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof(void *) || !g.k->verify) {
        printf("FAIL: the kernel library has no verify entry\n");
        return 1;
    }
    float *f = host_alloc((size_t)NR * STRIDE_MAX * sizeof(float));
    float *dense = host_alloc((size_t)NR * V_MAX * sizeof(float));
    void *hrows = host_alloc((size_t)NR * STRIDE_MAX * sizeof(float));
    void *drows = gpu_alloc(&g, (size_t)NR * STRIDE_MAX * sizeof(float));
    dev_bufs b = {gpu_alloc(&g, NSEQ * sizeof(specd_cuda_verify_out)), NULL,
                  specd_cuda_verify_scratch_bytes(NSEQ)};
    b.scratch = gpu_alloc(&g, b.scratch_bytes);
    const char *dtype_name[3] = {"f32", "f16", "bf16"};
    int fails = 0, total = 0, accepted = 0, emitted = 0, errors = 0, per_rule[3] = {0, 0, 0};
    /* every setting at least twice per dtype */
    const int rounds = ROWS >= 64 ? 8 : (2 * N_SETTINGS + NSEQ - 1) / NSEQ;
    for (int dtype = 0; dtype < 3; dtype++) {
        int dt_fail = 0, dt_total = total;
        V = 1000;
        STRIDE = 1040;
        for (int round = 0; round < rounds; round++)
            dt_fail += run_round(&g, dtype, 2 + round % 3 * 3, round % 2, SETTINGS, N_SETTINGS,
                                 round * NSEQ, f, dense, hrows, drows, &b, &total, &accepted,
                                 &emitted, &errors, per_rule);
        V = V_MAX;
        STRIDE = STRIDE_MAX;
        for (int round = 0; round < (ROWS >= 64 ? 2 : 1); round++)
            dt_fail += run_round(&g, dtype, 1 + round, 0, WIDE, N_WIDE, round * NSEQ, f, dense,
                                 hrows, drows, &b, &total, &accepted, &emitted, &errors,
                                 per_rule);
        dt_total = total - dt_total;
        printf("%-5s: %d/%d sequences with the CPU engine's decisions bit for bit%s\n",
               dtype_name[dtype], dt_total - dt_fail, dt_total, dt_fail ? "  FAIL" : "");
        fails += dt_fail;
    }
    printf("identity: %d/%d sequences (coupled %d, greedy %d, rejection %d; %d drafts accepted, "
           "%d tokens emitted, %d bad-row / bad-q sequences reported by both)\n",
           total - fails, total, per_rule[0], per_rule[1], per_rule[2], accepted, emitted, errors);
    const int draws = ROWS * 64;
    int gok = 1;
    gok &= g_test(&g, &SETTINGS[2], draws);
    gok &= g_test(&g, &SETTINGS[7], draws);
    gok &= g_test(&g, &SETTINGS[9], draws);
    gok &= g_test(&g, &SETTINGS[11], draws);
    gok &= g_test_rejection(&g, &SETTINGS[14], 0, 1, draws);
    gok &= g_test_rejection(&g, &SETTINGS[14], 0, 0, draws);
    gok &= g_test_rejection(&g, &SETTINGS[16], 1, 1, draws);
    gok &= g_test_rejection(&g, &SETTINGS[14], 1, 1, draws);
    gpu_free(&g, drows);
    gpu_free(&g, b.out);
    gpu_free(&g, b.scratch);
    free(f);
    free(dense);
    free(hrows);
    if (fails || !gok) {
        printf("FAIL\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
