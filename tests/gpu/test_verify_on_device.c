/* The acceptance engine on the device (kernels/cuda/verify.cu) against the CPU engine
 * (specd_accept_chain_keyed): the same decisions bit for bit (status, accepted count, every
 * emitted token) on random logits with ties, -inf and -FLT_MAX masks, NaN padding past n_vocab,
 * f32 / f16 / bf16, GREEDY and COUPLED with every transform the kernel supports (temperature,
 * bias with bans, top-k, min-p), keyed rows in any order, with and without a bonus row, bad rows;
 * each sequence alone and inside the batch (batch invariance); then a G-test of device samples
 * against p. Prints the counts. Skips (77) without the kernel library or a device. */
#include "gpu_harness.h"

#include <float.h>
#include <math.h>
#include <stdint.h>

#include "accept/gof.h"
#include "kernels/cpu/fp16.h"
#include "specd/accept.h"
#include "specd/sampling.h"

enum { ROWS = 64 };       /* the CPU emulation (tests/gpu/emu/run) shrinks this */
enum { V = 1000, STRIDE = 1040, NR = 24, NSEQ = 12 };

typedef struct setting {
    const char *name;
    int rule;
    float temperature;
    int32_t top_k;
    float min_p;
    int bias;
} setting;

static const setting SETTINGS[] = {
    {"greedy", SPECD_ACCEPT_GREEDY, 1.0f, 0, 0.0f, 0},
    {"greedy+bias", SPECD_ACCEPT_GREEDY, 1.0f, 0, 0.0f, 1},
    {"coupled T=1", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.0f, 0},
    {"coupled T=0", SPECD_ACCEPT_COUPLED, 0.0f, 0, 0.0f, 0},
    {"coupled T=0.7", SPECD_ACCEPT_COUPLED, 0.7f, 0, 0.0f, 0},
    {"coupled T=1.3 bias", SPECD_ACCEPT_COUPLED, 1.3f, 0, 0.0f, 1},
    {"coupled top-k 1", SPECD_ACCEPT_COUPLED, 1.0f, 1, 0.0f, 0},
    {"coupled top-k 7", SPECD_ACCEPT_COUPLED, 0.9f, 7, 0.0f, 0},
    {"coupled top-k 200", SPECD_ACCEPT_COUPLED, 1.0f, 200, 0.0f, 0},
    {"coupled min-p 0.05", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.05f, 0},
    {"coupled T=0.8 top-k 20 min-p 0.1 bias", SPECD_ACCEPT_COUPLED, 0.8f, 20, 0.1f, 1},
};
enum { N_SETTINGS = sizeof SETTINGS / sizeof SETTINGS[0] };

static uint32_t rnd(uint32_t n) { return (uint32_t)(gpu_rng_next() % n); }

/* Logits with ties (multiples of 1/4), some -inf and -FLT_MAX masks, NaN padding. */
static void make_rows(float *f, int spread) {
    for (int r = 0; r < NR; r++) {
        for (int x = 0; x < STRIDE; x++) {
            float v = x < V ? (float)((int)rnd(8u * (uint32_t)spread) - 4 * spread) * 0.25f : NAN;
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
    specd_cuda_verify_seq d;
} seq_case;

static specd_accept *cpu_engine(const seq_case *c) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = (specd_accept_rule)c->st->rule;
    p.sampling.temperature = c->st->temperature;
    p.sampling.top_k = c->st->top_k;
    p.sampling.min_p = c->st->min_p;
    p.sampling.bias = c->n_bias ? c->bias : NULL;
    p.sampling.n_bias = (size_t)c->n_bias;
    p.max_k = SPECD_CUDA_VERIFY_MAX_K;
    p.max_vocab = V;
    specd_accept *a = NULL;
    specd_error err;
    if (specd_accept_create(&p, &a, &err) != SPECD_OK) {
        printf("FAIL: accept_create: %s\n", err.message);
        exit(1);
    }
    return a;
}

/* The CPU engine's decision for one sequence, in the device's output form. */
static specd_cuda_verify_out cpu_verify(const seq_case *c, const float *dense) {
    specd_accept *a = cpu_engine(c);
    specd_cuda_verify_out o;
    memset(&o, 0, sizeof o);
    const specd_cuda_verify_seq *d = &c->d;
    specd_chain_input in = {.k = d->k, .draft = d->draft, .target_logits = dense, .n_vocab = V,
                            .key = {d->seed, d->sequence, 0}};
    specd_chain_keys keys = {.n_rows = NR, .key_row = d->row, .bonus_row = d->row[d->k],
                             .positions = d->pos};
    int32_t tokens[SPECD_CUDA_VERIFY_MAX_SLOTS];
    specd_chain_result res = {.tokens = tokens};
    specd_error err;
    int32_t dummy_draft = 0;
    if (d->k == 0) in.draft = &dummy_draft;
    specd_status st;
    if (d->k == 0) { /* a plain step: the engine's keyed sample of the bonus row */
        specd_sampling_params sp = specd_sampling_default_params();
        sp.temperature = c->st->rule == SPECD_ACCEPT_GREEDY ? 0.0f : c->st->temperature;
        sp.top_k = c->st->top_k;
        sp.min_p = c->st->min_p;
        sp.bias = c->n_bias ? c->bias : NULL;
        sp.n_bias = (size_t)c->n_bias;
        specd_sampler *s = NULL;
        if (specd_sampler_create(&sp, V, &s, &err) != SPECD_OK) exit(1);
        specd_sample_key key = {d->seed, d->sequence, d->pos[0]};
        st = specd_sampler_sample(s, dense + (size_t)d->row[0] * V, V, key, &tokens[0], &err);
        specd_sampler_destroy(s);
        res.n_accepted = 0;
        res.n_emitted = 1;
    } else {
        st = specd_accept_chain_keyed(a, &in, &keys, &res, &err);
    }
    specd_accept_destroy(a);
    if (st != SPECD_OK) {
        o.status = -1; /* some failure: the device must report one too */
        return o;
    }
    o.n_accepted = res.n_accepted;
    o.n_emitted = res.n_emitted;
    memcpy(o.tokens, tokens, (size_t)res.n_emitted * sizeof(int32_t));
    return o;
}

static int same_out(const specd_cuda_verify_out *dev, const specd_cuda_verify_out *cpu) {
    if (cpu->status != 0) return dev->status != SPECD_CUDA_VERIFY_OK;
    if (dev->status != SPECD_CUDA_VERIFY_OK || dev->n_accepted != cpu->n_accepted ||
        dev->n_emitted != cpu->n_emitted)
        return 0;
    return memcmp(dev->tokens, cpu->tokens, (size_t)cpu->n_emitted * sizeof(int32_t)) == 0;
}

/* Two device results say the same (what the kernel defines for their status). */
static int same_dev(const specd_cuda_verify_out *a, const specd_cuda_verify_out *b) {
    if (a->status != b->status) return 0;
    if (a->status != SPECD_CUDA_VERIFY_OK) return a->bad_row == b->bad_row;
    return a->n_accepted == b->n_accepted && a->n_emitted == b->n_emitted &&
           memcmp(a->tokens, b->tokens, (size_t)a->n_emitted * sizeof(int32_t)) == 0;
}

/* A target token for slot j as the CPU samples it, so drafts are often accepted. */
static int32_t cpu_target(const seq_case *c, const float *dense, int32_t row, uint32_t pos) {
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = c->st->rule == SPECD_ACCEPT_GREEDY ? 0.0f : c->st->temperature;
    sp.top_k = c->st->top_k;
    sp.min_p = c->st->min_p;
    sp.bias = c->n_bias ? c->bias : NULL;
    sp.n_bias = (size_t)c->n_bias;
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, V, &s, &err) != SPECD_OK) exit(1);
    specd_sample_key key = {c->d.seed, c->d.sequence, pos};
    int32_t t = (int32_t)rnd(V);
    (void)specd_sampler_sample(s, dense + (size_t)row * V, V, key, &t, &err);
    specd_sampler_destroy(s);
    return t;
}

static void make_case(const gpu_ctx *g, seq_case *c, const setting *st, const float *dense,
                      int bad_rows_ok) {
    memset(c, 0, sizeof *c);
    c->st = st;
    specd_cuda_verify_seq *d = &c->d;
    d->rule = st->rule;
    d->temperature = st->temperature;
    d->top_k = st->top_k;
    d->top_p = 1.0f;
    d->min_p = st->min_p;
    d->seed = gpu_rng_next();
    d->sequence = (uint32_t)gpu_rng_next();
    d->k = (int32_t)rnd(9); /* 0..8 */
    uint32_t base = (uint32_t)rnd(1u << 20);
    for (int j = 0; j <= d->k; j++) {
        /* rows in any order; bad rows (the block's last two) only where asked */
        d->row[j] = (int32_t)rnd(bad_rows_ok ? NR : NR - 2);
        d->pos[j] = base + (uint32_t)j;
    }
    if (d->k > 0 && rnd(4) == 0) d->row[d->k] = -1; /* no bonus slot */
    if (st->bias) {
        c->n_bias = 6;
        float *db = host_alloc(V * sizeof(float));
        for (int i = 0; i < 6; i++) {
            int32_t tok;
            int dup;
            do {
                tok = (int32_t)rnd(V);
                dup = 0;
                for (int j = 0; j < i; j++) dup |= c->bias[j].token == tok;
            } while (dup);
            c->bias[i].token = tok;
            c->bias[i].bias = i == 0 ? -INFINITY : (float)((int)rnd(17) - 8) * 0.5f;
            db[tok] = c->bias[i].bias;
        }
        c->dense_bias = gpu_put(g, db, V * sizeof(float));
        free(db);
        d->bias = c->dense_bias;
    }
    for (int j = 0; j < d->k; j++)
        d->draft[j] = rnd(4) != 0 && d->row[j] < NR - 2 ? cpu_target(c, dense, d->row[j], d->pos[j])
                                                         : (int32_t)rnd(V);
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

/* The sampled token's distribution on the device against p (specd_sampler_probs). */
static int g_test(const gpu_ctx *g, const setting *st, int draws) {
    enum { GV = 24 };
    float row[GV];
    for (int x = 0; x < GV; x++) row[x] = (float)((int)rnd(9) - 4) * 0.5f;
    row[3] = -INFINITY;
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = st->temperature;
    sp.top_k = st->top_k;
    sp.min_p = st->min_p;
    specd_sampler *s = NULL;
    specd_error err;
    float probs[GV];
    if (specd_sampler_create(&sp, GV, &s, &err) != SPECD_OK ||
        specd_sampler_probs(s, row, GV, probs, &err) != SPECD_OK) {
        printf("FAIL: sampler: %s\n", err.message);
        exit(1);
    }
    specd_sampler_destroy(s);
    float *drow = gpu_put(g, row, sizeof row);
    specd_cuda_verify_seq *seqs = host_alloc((size_t)draws * sizeof *seqs);
    for (int i = 0; i < draws; i++) {
        specd_cuda_verify_seq *d = &seqs[i];
        d->rule = SPECD_CUDA_VERIFY_COUPLED;
        d->temperature = st->temperature;
        d->top_k = st->top_k;
        d->top_p = 1.0f;
        d->min_p = st->min_p;
        d->seed = 0x5eedull;
        d->sequence = (uint32_t)i; /* independent streams */
        d->k = 0;
        d->row[0] = 0;
        d->pos[0] = 17;
    }
    size_t sb = specd_cuda_verify_scratch_bytes(draws);
    void *scratch = gpu_alloc(g, sb);
    specd_cuda_verify_out *out = gpu_alloc(g, (size_t)draws * sizeof *out);
    specd_cuda_verify_args a = {.logits = drow, .dtype = SPECD_CUDA_LOGITS_F32, .row_stride = GV,
                                .n_rows = 1, .n_vocab = GV, .mask_at = -FLT_MAX,
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
        if (ho[i].status != 0 || ho[i].n_emitted != 1 || ho[i].tokens[0] < 0 ||
            ho[i].tokens[0] >= GV) {
            ok = 0;
            break;
        }
        counts[ho[i].tokens[0]]++;
    }
    double pv = ok ? gof_pvalue(counts, p, GV, (uint64_t)draws) : 0.0;
    printf("G-test %-40s %d draws: p-value %.4f%s\n", st->name, draws, pv,
           pv >= 1e-3 ? "" : "  FAIL");
    gpu_free(g, drow);
    gpu_free(g, scratch);
    gpu_free(g, out);
    free(seqs);
    free(ho);
    return pv >= 1e-3;
}

int main(void) {
    gpu_ctx g = gpu_open_or_skip();
    if (g.k->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof(void *) || !g.k->verify) {
        printf("FAIL: the kernel library has no verify entry\n");
        return 1;
    }
    float *f = host_alloc((size_t)NR * STRIDE * sizeof(float));
    float *dense = host_alloc((size_t)NR * V * sizeof(float));
    void *hrows = host_alloc((size_t)NR * STRIDE * sizeof(float));
    void *drows = gpu_alloc(&g, (size_t)NR * STRIDE * sizeof(float));
    dev_bufs b = {gpu_alloc(&g, NSEQ * sizeof(specd_cuda_verify_out)), NULL,
                  specd_cuda_verify_scratch_bytes(NSEQ)};
    b.scratch = gpu_alloc(&g, b.scratch_bytes);
    const char *dtype_name[3] = {"f32", "f16", "bf16"};
    int fails = 0, total = 0, accepted = 0, emitted = 0, errors = 0;
    const int rounds = ROWS >= 64 ? 6 : 2;
    for (int dtype = 0; dtype < 3; dtype++) {
        int dt_fail = 0, dt_total = 0;
        for (int round = 0; round < rounds; round++) {
            make_rows(f, 2 + round % 3 * 3);
            if (round % 2) { /* the block's last two rows are bad: NaN, and everything masked */
                f[(size_t)(NR - 2) * STRIDE + rnd(V)] = NAN;
                for (int x = 0; x < V; x++) f[(size_t)(NR - 1) * STRIDE + x] = -INFINITY;
            }
            encode(f, dtype, hrows, dense);
            g.rt->memcpy(drows, hrows, (size_t)NR * STRIDE * (dtype ? 2 : 4),
                         SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
            seq_case cs[NSEQ];
            specd_cuda_verify_out cpu[NSEQ], dev[NSEQ], alone;
            for (int i = 0; i < NSEQ; i++)
                make_case(&g, &cs[i], &SETTINGS[(round * NSEQ + i) % N_SETTINGS], dense,
                          round % 2);
            for (int i = 0; i < NSEQ; i++) cpu[i] = cpu_verify(&cs[i], dense);
            run_device(&g, drows, dtype, cs, NSEQ, &b, dev);
            for (int i = 0; i < NSEQ; i++) {
                int ok = same_out(&dev[i], &cpu[i]);
                /* the same sequence alone: batch invariance, bitwise */
                run_device(&g, drows, dtype, &cs[i], 1, &b, &alone);
                ok &= same_dev(&alone, &dev[i]);
                if (!ok) {
                    printf("FAIL %s %s seq %d k %d: cpu status %d acc %d emit %d tok0 %d | "
                           "dev status %d acc %d emit %d tok0 %d\n",
                           dtype_name[dtype], cs[i].st->name, i, cs[i].d.k, cpu[i].status,
                           cpu[i].n_accepted, cpu[i].n_emitted, cpu[i].tokens[0], dev[i].status,
                           dev[i].n_accepted, dev[i].n_emitted, dev[i].tokens[0]);
                    dt_fail++;
                }
                dt_total++;
                if (cpu[i].status == 0) {
                    accepted += cpu[i].n_accepted;
                    emitted += cpu[i].n_emitted;
                } else {
                    errors++;
                }
                if (cs[i].dense_bias) gpu_free(&g, cs[i].dense_bias);
            }
        }
        printf("%-5s: %d/%d sequences with the CPU engine's decisions bit for bit%s\n",
               dtype_name[dtype], dt_total - dt_fail, dt_total, dt_fail ? "  FAIL" : "");
        fails += dt_fail;
        total += dt_total;
    }
    printf("identity: %d/%d sequences (%d drafts accepted, %d tokens emitted, %d bad-row "
           "sequences reported by both)\n",
           total - fails, total, accepted, emitted, errors);
    const int draws = ROWS * 64;
    int gok = 1;
    gok &= g_test(&g, &SETTINGS[2], draws);
    gok &= g_test(&g, &SETTINGS[7], draws);
    gok &= g_test(&g, &SETTINGS[9], draws);
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
