/* The runtime's CUDA backend (model/runtime/forward_cuda.c) end to end, on the small architecture
 * models (tests/data/arch_{llama,qwen2,qwen3}.gguf) and the real default model
 * ($SPECD_TEST_MODEL, else $SPECD_MODEL; skipped when neither names a file):
 *  1. against the CPU runtime on the golden prompts and a few greedy decode steps: max |delta|,
 *     the normalised error sum((gpu - cpu)^2) / sum(cpu^2) as ggml's test-backend-ops measures
 *     it, and argmax agreement (which the real model must keep on nearly every row);
 *  2. batch invariance on the device, bit for bit: each row of a tree-masked verify step of
 *     1..64 rows (explicit positions, LoRA gates on some rows, float input vectors on others)
 *     beside another sequence's causal rows, against the same rows extended one at a time;
 *     logits and hidden states;
 *  3. the cache: committed rows of a verify step, and kv_truncate, then re-extending, give the
 *     bits of a fresh prefill; kv_keep with row moves gives the CPU's logits (normalised error);
 *     a tree row (holes in its mask) has the bits of its path decoded plainly;
 *  4. CUDA graphs: the same prefill, decode steps, tree verify steps (LoRA gates, float-vector
 *     rows, two sequences) on a context with graphs and one with SPECD_CUDA_GRAPHS=0 give the
 *     same bits, with graphs replayed; logits left on the device (specd_extend_out.device_logits)
 *     equal the host copy's bits; under the emulation (SPECD_EMU=1) also a graph that fails
 *     mid-step (the KV cache and the context stay usable) and a capture that fails (direct
 *     launches, same bits).
 * Skipped (exit 77) without a CUDA device. SPECD_TEST_LAYERS cuts the models to their first
 * layers and SPECD_TEST_ROWS caps the verify steps (the CPU emulation, tests/gpu/emu/run, runs
 * it so). Needs SPECD_SOURCE_DIR (ctest sets it). */
#include "specd/runtime.h"

#include "golden_prompts.h"
#include "kernels/cuda/cudart.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifndef SPECD_TEST_SKIP
#define SPECD_TEST_SKIP 77
#endif

#define NMSE_MAX 5e-3

enum { N_CTX = 256, N_BATCH = 64, MAX_PROMPT = 512, PREFIX = 12 };

static int32_t max_rows = 64, n_layers_cut;
static const char *src_dir = ".";

static void die(const char *what, const specd_error *err) {
    printf("FAIL: %s: %s\n", what, err ? err->message : "");
    exit(1);
}

static void *xalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) die("out of memory", NULL);
    return p;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(float scale) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((float)(rng >> 40) / 16777216.0f * 2.0f - 1.0f) * scale;
}

typedef struct stats {
    double err, ref, max_abs;
    int rows, agree;
} stats;

static int argmax(const float *x, int32_t n) {
    int b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int)i;
    return b;
}

static void accumulate(stats *s, const float *gpu, const float *cpu, int rows, int32_t n) {
    for (int r = 0; r < rows; r++) {
        const float *g = gpu + (size_t)r * (size_t)n, *c = cpu + (size_t)r * (size_t)n;
        for (int32_t i = 0; i < n; i++) {
            const double d = (double)g[i] - (double)c[i];
            s->err += d * d;
            s->ref += (double)c[i] * (double)c[i];
            if (fabs(d) > s->max_abs || d != d) s->max_abs = d != d ? INFINITY : fabs(d);
        }
        s->agree += argmax(g, n) == argmax(c, n);
        s->rows++;
    }
}

static double nmse(const stats *s) {
    return s->ref > 0 ? s->err / s->ref : s->err;
}

static specd_context *make(const specd_model *m, int32_t device, int32_t n_seq) {
    specd_context_params p = specd_context_default_params();
    p.n_seq = n_seq;
    p.n_ctx = N_CTX;
    p.n_batch = N_BATCH;
    p.n_threads = 2;
    p.n_layers = n_layers_cut;
    p.device = device;
    p.device_index = 0;
    p.numerics = SPECD_NUMERICS_LLAMA; /* the CPU side in the order the CUDA kernels keep */
    specd_context *c = NULL;
    specd_error err;
    specd_error_clear(&err);
    const specd_status st = specd_context_create(m, &p, &c, &err);
    if (st == SPECD_OK) return c;
    if (device == SPECD_DEVICE_CUDA && st == SPECD_E_UNSUPPORTED &&
        specd_cuda_device_count() == 0) {
        printf("skipped: %s\n", err.message);
        exit(SPECD_TEST_SKIP);
    }
    die("context", &err);
    return NULL;
}

static void extend(specd_context *c, const specd_seq_batch *s, int32_t n,
                   const specd_extend_out *o) {
    specd_error err;
    if (specd_context_extend(c, s, n, o, &err) != SPECD_OK) die("extend", &err);
}

static void prefill(specd_context *c, int32_t seq, const int32_t *t, int32_t n) {
    specd_error err;
    if (specd_context_kv_truncate(c, seq, 0, &err) != SPECD_OK) die("kv_truncate", &err);
    specd_seq_batch s = {.seq = seq, .n_tokens = n, .tokens = t};
    extend(c, &s, 1, NULL);
}

/* Part 1: CUDA against CPU on the golden prompts, then greedy steps. */
static int against_cpu(specd_context *gc, specd_context *cc, const int32_t *ids,
                       const int64_t *lens, int n_prompts, int32_t V, int32_t E, int real) {
    stats s = {0}, h = {0};
    float *lg = xalloc((size_t)N_BATCH * V * 4), *lc = xalloc((size_t)N_BATCH * V * 4);
    float *hg = xalloc((size_t)N_BATCH * E * 4), *hc = xalloc((size_t)N_BATCH * E * 4);
    for (int p = 0; p < n_prompts; p++) {
        int32_t n = (int32_t)(lens[p] < 48 ? lens[p] : 48), toks[48];
        for (int32_t i = 0; i < n; i++)
            toks[i] = ids[(size_t)p * MAX_PROMPT + (size_t)i] % V;
        specd_context *cs[2] = {gc, cc};
        float *ls[2] = {lg, lc}, *hs[2] = {hg, hc};
        for (int b = 0; b < 2; b++) {
            specd_error err;
            if (specd_context_kv_truncate(cs[b], 0, 0, &err) != SPECD_OK) die("kv_truncate", &err);
            specd_seq_batch sb = {.seq = 0, .n_tokens = n, .tokens = toks};
            specd_extend_out o = {.n_rows = n, .logits = ls[b], .hidden = hs[b]};
            extend(cs[b], &sb, 1, &o);
        }
        accumulate(&s, lg, lc, n, V);
        accumulate(&h, hg, hc, n, E);
        for (int step = 0; step < 4; step++) {
            int32_t next = argmax(lc + (size_t)(step == 0 ? n - 1 : 0) * V, V);
            specd_error err;
            if (specd_context_decode(gc, 0, next, lg, &err) != SPECD_OK) die("decode", &err);
            if (specd_context_decode(cc, 0, next, lc, &err) != SPECD_OK) die("decode", &err);
            accumulate(&s, lg, lc, 1, V);
        }
    }
    /* The kernels match their CPU twins bit for bit except attention, whose CPU twin rounds the
     * probabilities to F16 (so they sum to 1 only within about 2^-12; the GPU's are exact): a
     * per-layer difference of about 1e-5 that a deep model carries to the logits as a normalised
     * error of 1e-4..1e-3 (measured under the emulation). A wrong mask, position or weight gives
     * 1e-2 and more. */
    const double thr = NMSE_MAX;
    const double agree = (double)s.agree / s.rows;
    const int ok = nmse(&s) <= thr && nmse(&h) <= thr && (!real || agree >= 0.9);
    printf("  vs CPU: %d rows: logits max |delta| %.3e nmse %.3e, hidden max |delta| %.3e nmse "
           "%.3e (threshold %.0e), argmax agreement %d/%d%s%s\n",
           s.rows, s.max_abs, nmse(&s), h.max_abs, nmse(&h), thr, s.agree, s.rows,
           real ? " (at least 90%)" : "", ok ? "" : "  FAIL");
    free(lg), free(lc), free(hg), free(hc);
    return ok;
}

/* A rank-4 PEFT adapter on layer 0's q_proj, v_proj and down_proj, written under dir. */
static specd_lora *make_lora(const specd_model *m, char *dir) {
    const specd_model_info *in = specd_model_get_info(m);
    const int64_t E = in->n_embd, F = in->n_ff, NQ = (int64_t)in->n_head * in->head_dim;
    const int64_t NKV = (int64_t)in->n_head_kv * in->head_dim;
    strcpy(dir, "/tmp/specd_cuda_loraXXXXXX");
    if (!mkdtemp(dir)) die("mkdtemp", NULL);
    char p[128];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    FILE *f = fopen(p, "wb");
    if (!f) die("adapter_config.json", NULL);
    fputs("{\"peft_type\": \"LORA\", \"r\": 4, \"lora_alpha\": 8, \"target_modules\": "
          "[\"q_proj\", \"v_proj\", \"down_proj\"], \"fan_in_fan_out\": false}",
          f);
    fclose(f);
    static const char *const names[6] = {
        "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight",
        "base_model.model.model.layers.0.self_attn.v_proj.lora_A.weight",
        "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight",
        "base_model.model.model.layers.0.mlp.down_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight"};
    const int64_t rows[6] = {4, NQ, 4, NKV, 4, E}, cols[6] = {E, 4, E, 4, F, 4};
    char hdr[4096];
    size_t pos = 0, off = 0;
    pos += (size_t)snprintf(hdr, sizeof hdr, "{\"__metadata__\": {\"format\": \"pt\"}");
    for (int i = 0; i < 6; i++) {
        const size_t bytes = (size_t)(rows[i] * cols[i]) * 4;
        pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos,
                                ", \"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], "
                                "\"data_offsets\": [%zu, %zu]}",
                                names[i], (long long)rows[i], (long long)cols[i], off, off + bytes);
        off += bytes;
    }
    pos += (size_t)snprintf(hdr + pos, sizeof hdr - pos, "}");
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    f = fopen(p, "wb");
    if (!f) die("adapter_model.safetensors", NULL);
    const uint64_t hl = pos;
    fwrite(&hl, 8, 1, f);
    fwrite(hdr, 1, pos, f);
    for (int i = 0; i < 6; i++)
        for (int64_t k = 0; k < rows[i] * cols[i]; k++) {
            const float v = frand(0.2f);
            fwrite(&v, 4, 1, f);
        }
    fclose(f);
    specd_lora *lo = NULL;
    specd_error err;
    if (specd_lora_create(m, dir, &lo, &err) != SPECD_OK) die("specd_lora_create", &err);
    return lo;
}

static void remove_lora_dir(const char *dir) {
    char p[128];
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/adapter_model.safetensors", dir);
    unlink(p);
    rmdir(dir);
}

/* The tree of a verify step: row i's parent is (i - 1) / 2; depth gives its position. */
static int32_t parent(int32_t i) {
    return i == 0 ? -1 : (i - 1) / 2;
}
static int32_t depth(int32_t i) {
    int32_t d = 0;
    while ((i = parent(i)) >= 0)
        d++;
    return d;
}
static int sees(int32_t i, int32_t j) { /* tree row i sees tree row j */
    for (; i >= 0; i = parent(i))
        if (i == j) return 1;
    return 0;
}

typedef struct tree {
    int32_t tok[64], pos[64];
    float gate[64];
    uint8_t embd_row[64];
    float *embd;      /* 64 x E */
    uint8_t *visible; /* 64 x (PREFIX + k) for the k of the step being built */
} tree;

/* Part 2: batch invariance on the device. */
static int invariance(specd_context *gc, const specd_model *m, const int32_t *prefix,
                      const int32_t *chain_prefix, int have_lora) {
    const specd_model_info *in = specd_model_get_info(m);
    const int32_t V = in->n_vocab, E = in->n_embd;
    const int32_t K = max_rows;
    tree t;
    t.embd = xalloc((size_t)64 * E * 4);
    t.visible = xalloc((size_t)64 * (PREFIX + 64));
    for (int32_t i = 0; i < K; i++) {
        t.tok[i] = (int32_t)((uint32_t)(i * 7919 + 13) % (uint32_t)V);
        t.pos[i] = PREFIX + depth(i);
        t.gate[i] = have_lora ? (i % 3 == 1 ? 1.0f : i % 3 == 2 ? 0.5f : 0.0f) : 0.0f;
        t.embd_row[i] = i % 5 == 3;
        for (int32_t x = 0; x < E; x++)
            t.embd[(size_t)i * E + x] = frand(0.05f);
    }
    /* references: seq 3 has the tree rows one at a time; seq 2 the chain of seq 1 one at a time */
    float *ref_l = xalloc((size_t)K * V * 4), *ref_h = xalloc((size_t)K * E * 4);
    prefill(gc, 3, prefix, PREFIX);
    for (int32_t i = 0; i < K; i++) {
        uint8_t vis[PREFIX + 64];
        for (int32_t j = 0; j < PREFIX + i + 1; j++)
            vis[j] = j < PREFIX || sees(i, j - PREFIX);
        int32_t row = 0;
        specd_seq_batch s = {.seq = 3,
                             .n_tokens = 1,
                             .tokens = &t.tok[i],
                             .pos = &t.pos[i],
                             .visible = vis,
                             .lora_gate = &t.gate[i],
                             .embd = t.embd + (size_t)i * E,
                             .embd_rows = &t.embd_row[i]};
        specd_extend_out o = {.n_rows = 1,
                              .rows = &row,
                              .logits = ref_l + (size_t)i * V,
                              .hidden = ref_h + (size_t)i * E};
        extend(gc, &s, 1, &o);
    }
    enum { CHAIN = 5 };
    int32_t chain[CHAIN];
    float *chain_l = xalloc((size_t)CHAIN * V * 4), *chain_h = xalloc((size_t)CHAIN * E * 4);
    for (int i = 0; i < CHAIN; i++)
        chain[i] = (int32_t)((uint32_t)(i * 104729 + 7) % (uint32_t)V);
    prefill(gc, 2, chain_prefix, PREFIX);
    for (int i = 0; i < CHAIN; i++) {
        int32_t row = 0;
        specd_seq_batch s = {.seq = 2, .n_tokens = 1, .tokens = &chain[i]};
        specd_extend_out o = {.n_rows = 1,
                              .rows = &row,
                              .logits = chain_l + (size_t)i * V,
                              .hidden = chain_h + (size_t)i * E};
        extend(gc, &s, 1, &o);
    }
    prefill(gc, 1, chain_prefix, PREFIX);
    static const int32_t sizes[] = {1, 2, 3, 8, 17, 33, 64};
    float *lg = xalloc((size_t)N_BATCH * V * 4), *hg = xalloc((size_t)N_BATCH * E * 4);
    int rows = 0, equal = 0;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
        const int32_t k = sizes[z] < K ? sizes[z] : K;
        const int32_t c = k + (k % 5) + 1 <= N_BATCH ? k % 5 + 1 : N_BATCH - k;
        if (z > 0 && k == K && sizes[z - 1] >= K) break;
        prefill(gc, 0, prefix, PREFIX);
        specd_error err;
        if (specd_context_kv_truncate(gc, 1, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        for (int32_t i = 0; i < k; i++)
            for (int32_t j = 0; j < PREFIX + k; j++)
                t.visible[(size_t)i * (PREFIX + k) + j] = j < PREFIX || sees(i, j - PREFIX);
        specd_seq_batch tree_s = {.seq = 0,
                                  .n_tokens = k,
                                  .tokens = t.tok,
                                  .pos = t.pos,
                                  .visible = t.visible,
                                  .lora_gate = t.gate,
                                  .embd = t.embd,
                                  .embd_rows = t.embd_row};
        specd_seq_batch chain_s = {.seq = 1, .n_tokens = c, .tokens = chain};
        specd_seq_batch seqs[2];
        const int tree_first = z % 2 == 0;
        seqs[tree_first ? 0 : 1] = tree_s;
        seqs[tree_first ? 1 : 0] = chain_s;
        int32_t n = c > 0 ? 2 : 1, out_rows[N_BATCH], total = k + (c > 0 ? c : 0);
        if (c <= 0) seqs[0] = tree_s;
        for (int32_t j = 0; j < total; j++)
            out_rows[j] = total - 1 - j; /* reversed: the gather takes rows in any order */
        specd_extend_out o = {.n_rows = total, .rows = out_rows, .logits = lg, .hidden = hg};
        extend(gc, seqs, n, &o);
        for (int32_t j = 0; j < total; j++) {
            const int32_t r = out_rows[j];
            const int in_tree = n == 1 || tree_first ? r < k : r >= c;
            const int32_t i = n == 1       ? r
                              : tree_first ? (in_tree ? r : r - k)
                                           : (in_tree ? r - c : r);
            const float *wl = in_tree ? ref_l + (size_t)i * V : chain_l + (size_t)i * V;
            const float *wh = in_tree ? ref_h + (size_t)i * E : chain_h + (size_t)i * E;
            const int same = memcmp(lg + (size_t)j * V, wl, (size_t)V * 4) == 0 &&
                             memcmp(hg + (size_t)j * E, wh, (size_t)E * 4) == 0;
            if (!same && equal == rows)
                printf("  first differing row: step of %d tree rows + %d chain rows, %s row %d\n",
                       k, c, in_tree ? "tree" : "chain", i);
            rows++;
            equal += same;
        }
    }
    const int ok = rows > 0 && equal == rows;
    printf("  batch invariance: %d/%d rows bitwise (logits and hidden) in steps of 1..%d tree rows "
           "(masks, positions, %s, float-vector rows) beside a causal sequence%s\n",
           equal, rows, K, have_lora ? "LoRA gates" : "no LoRA", ok ? "" : "  FAIL");
    free(t.embd), free(t.visible), free(ref_l), free(ref_h), free(chain_l), free(chain_h);
    free(lg), free(hg);
    return ok;
}

/* Part 3: commit flags, kv_truncate and kv_keep. */
static int cache_ops(specd_context *gc, specd_context *cc, const specd_model *m,
                     const int32_t *prefix) {
    const specd_model_info *in = specd_model_get_info(m);
    const int32_t V = in->n_vocab;
    float *a = xalloc((size_t)V * 4), *b = xalloc((size_t)V * 4);
    specd_error err;
    int32_t chain[8];
    for (int i = 0; i < 8; i++)
        chain[i] = (int32_t)((uint32_t)(i * 31337 + 11) % (uint32_t)V);
    const int32_t next = 5 % V;
    int ok = 1;
    /* a verify step of 8 causal rows committing the first 5, then a decode ... */
    prefill(gc, 0, prefix, PREFIX);
    const uint8_t commit[8] = {1, 1, 1, 1, 1, 0, 0, 0};
    specd_seq_batch s = {.seq = 0, .n_tokens = 8, .tokens = chain, .commit = commit};
    extend(gc, &s, 1, NULL);
    if (specd_context_kv_len(gc, 0) != PREFIX + 5) {
        printf("  commit: kv_len %d, want %d  FAIL\n", specd_context_kv_len(gc, 0), PREFIX + 5);
        ok = 0;
    }
    if (specd_context_decode(gc, 0, next, a, &err) != SPECD_OK) die("decode", &err);
    /* ... equals a fresh prefill of the same rows */
    prefill(gc, 2, prefix, PREFIX);
    s = (specd_seq_batch){.seq = 2, .n_tokens = 5, .tokens = chain};
    extend(gc, &s, 1, NULL);
    if (specd_context_decode(gc, 2, next, b, &err) != SPECD_OK) die("decode", &err);
    const int commit_ok = memcmp(a, b, (size_t)V * 4) == 0;
    /* kv_truncate to 2 new rows, then re-extend: a fresh prefill's bits */
    if (specd_context_kv_truncate(gc, 0, PREFIX + 2, &err) != SPECD_OK) die("kv_truncate", &err);
    if (specd_context_decode(gc, 0, chain[2], a, &err) != SPECD_OK) die("decode", &err);
    prefill(gc, 2, prefix, PREFIX);
    s = (specd_seq_batch){.seq = 2, .n_tokens = 2, .tokens = chain};
    extend(gc, &s, 1, NULL);
    if (specd_context_decode(gc, 2, chain[2], b, &err) != SPECD_OK) die("decode", &err);
    const int trunc_ok = memcmp(a, b, (size_t)V * 4) == 0;
    /* kv_keep of a tree path {0, 2, 6} (rows move down), then a decode: the CPU's logits. The
     * tree row of node 6 sees the prefix and nodes 0 and 2 with holes between: it must have the
     * bits of the same path decoded plainly (attention cuts a row's keys by rank, not position) */
    float *lc = xalloc((size_t)V * 4), *tree6 = xalloc((size_t)V * 4);
    specd_context *cs[2] = {gc, cc};
    float *outs[2] = {a, lc};
    for (int x = 0; x < 2; x++) {
        prefill(cs[x], 0, prefix, PREFIX);
        uint8_t vis[7 * (PREFIX + 7)];
        int32_t pos[7];
        for (int32_t i = 0; i < 7; i++) {
            pos[i] = PREFIX + depth(i);
            for (int32_t j = 0; j < PREFIX + 7; j++)
                vis[i * (PREFIX + 7) + j] = j < PREFIX || sees(i, j - PREFIX);
        }
        s = (specd_seq_batch){.seq = 0, .n_tokens = 7, .tokens = chain, .pos = pos, .visible = vis};
        const int32_t row6 = 6;
        const specd_extend_out o6 = {.n_rows = 1, .rows = &row6, .logits = tree6};
        extend(cs[x], &s, 1, x == 0 ? &o6 : NULL);
        const int32_t keep[3] = {PREFIX, PREFIX + 2, PREFIX + 6};
        if (specd_context_kv_keep(cs[x], 0, PREFIX, 3, keep, &err) != SPECD_OK)
            die("kv_keep", &err);
        if (specd_context_decode(cs[x], 0, next, outs[x], &err) != SPECD_OK) die("decode", &err);
    }
    stats st = {0};
    accumulate(&st, a, lc, 1, V);
    const int keep_ok = nmse(&st) <= NMSE_MAX;
    /* the path 0, 2, 6 decoded plainly on the device */
    prefill(gc, 2, prefix, PREFIX);
    const int32_t path[2] = {chain[0], chain[2]};
    s = (specd_seq_batch){.seq = 2, .n_tokens = 2, .tokens = path};
    extend(gc, &s, 1, NULL);
    if (specd_context_decode(gc, 2, chain[6], b, &err) != SPECD_OK) die("decode", &err);
    const int tree_ok = memcmp(tree6, b, (size_t)V * 4) == 0;
    printf("  cache: commit flags then decode %s a fresh prefill's bits; kv_truncate then "
           "re-extend %s; kv_keep with moves then decode vs CPU: nmse %.3e, argmax %s; a tree "
           "row %s its path decoded plainly%s\n",
           commit_ok ? "give" : "DO NOT give", trunc_ok ? "the same" : "DIFFERS", nmse(&st),
           st.agree ? "equal" : "differs", tree_ok ? "has the bits of" : "DIFFERS from",
           commit_ok && trunc_ok && keep_ok && tree_ok ? "" : "  FAIL");
    free(a), free(b), free(lc), free(tree6);
    return ok && commit_ok && trunc_ok && keep_ok && tree_ok;
}

/* Part 4: CUDA graphs on and off, and logits left on the device. */
typedef struct pair {
    specd_context *on, *off;
    float *l_on, *l_off, *h_on, *h_off;
    int32_t V, E;
    int rows, equal;
} pair;

static specd_context *make_graphs(const specd_model *m, const char *graphs) {
    setenv("SPECD_CUDA_GRAPHS", graphs, 1);
    specd_context *c = make(m, SPECD_DEVICE_CUDA, 4);
    unsetenv("SPECD_CUDA_GRAPHS");
    return c;
}

/* The same extend on both contexts, every row's logits and hidden state compared bitwise. */
static void both(pair *p, const specd_seq_batch *s, int32_t n_seqs) {
    int32_t total = 0;
    for (int32_t k = 0; k < n_seqs; k++)
        total += s[k].n_tokens;
    specd_extend_out o = {.n_rows = total, .logits = p->l_on, .hidden = p->h_on};
    extend(p->on, s, n_seqs, &o);
    o = (specd_extend_out){.n_rows = total, .logits = p->l_off, .hidden = p->h_off};
    extend(p->off, s, n_seqs, &o);
    for (int32_t r = 0; r < total; r++) {
        const int same =
            memcmp(p->l_on + (size_t)r * p->V, p->l_off + (size_t)r * p->V, (size_t)p->V * 4) == 0 &&
            memcmp(p->h_on + (size_t)r * p->E, p->h_off + (size_t)r * p->E, (size_t)p->E * 4) == 0;
        if (!same && p->equal == p->rows)
            printf("  first differing row: row %d of a step of %d rows\n", r, total);
        p->rows++;
        p->equal += same;
    }
}

static void decode_both(pair *p, int32_t seq, int32_t tok) {
    specd_seq_batch s = {.seq = seq, .n_tokens = 1, .tokens = &tok};
    both(p, &s, 1);
}

/* Logits left on the device against the host copy of the other context's same step. */
static int device_logits(pair *p, const int32_t *toks, int32_t n) {
    const specd_cudart *rt = specd_cudart_get(NULL);
    specd_error err;
    int ok = 1;
    for (int x = 0; x < 2; x++) {
        specd_context *c = x ? p->off : p->on, *other = x ? p->on : p->off;
        if (specd_context_kv_truncate(c, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        if (specd_context_kv_truncate(other, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        const float *dev = NULL;
        int32_t rows[3] = {n - 1, 0, n / 2};
        specd_seq_batch s = {.seq = 0, .n_tokens = n, .tokens = toks};
        specd_extend_out o = {.n_rows = 3, .rows = rows, .device_logits = &dev};
        extend(c, &s, 1, &o);
        o = (specd_extend_out){.n_rows = 3, .rows = rows, .logits = p->l_off};
        extend(other, &s, 1, &o);
        if (!dev || rt->memcpy(p->l_on, dev, (size_t)3 * p->V * 4, SPECD_CUDA_MEMCPY_DEVICE_TO_HOST)) {
            printf("  device logits: no device pointer or its copy failed  FAIL\n");
            return 0;
        }
        ok &= memcmp(p->l_on, p->l_off, (size_t)3 * p->V * 4) == 0;
        /* no rows: NULL */
        dev = p->l_on;
        o = (specd_extend_out){.n_rows = 0, .rows = rows, .device_logits = &dev};
        if (specd_context_kv_truncate(c, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        extend(c, &s, 1, &o);
        ok &= dev == NULL;
    }
    return ok;
}

static int graphs(const specd_model *m, specd_context *cpu, const int32_t *prefix,
                  const int32_t *chain_prefix, specd_lora *lo) {
    const specd_model_info *in = specd_model_get_info(m);
    pair p = {.V = in->n_vocab, .E = in->n_embd};
    p.on = make_graphs(m, "1");
    p.off = make_graphs(m, "0");
    p.l_on = xalloc((size_t)N_BATCH * p.V * 4), p.l_off = xalloc((size_t)N_BATCH * p.V * 4);
    p.h_on = xalloc((size_t)N_BATCH * p.E * 4), p.h_off = xalloc((size_t)N_BATCH * p.E * 4);
    specd_device_graph_stats gs, gs_off;
    specd_context_device_graph_stats(p.off, &gs_off);
    specd_error err;
    /* prefill, then greedy decode steps (one shape: captured once, replayed after) */
    specd_seq_batch s = {.seq = 0, .n_tokens = PREFIX, .tokens = prefix};
    both(&p, &s, 1);
    int32_t tok = argmax(p.l_off + (size_t)(PREFIX - 1) * p.V, p.V);
    const int n_dec = 6;
    for (int i = 0; i < n_dec; i++) {
        decode_both(&p, 0, tok);
        tok = argmax(p.l_off, p.V);
    }
    specd_context_device_graph_stats(p.on, &gs);
    const int decode_replayed = gs.last_graphed && gs.last_host_launches == 1 &&
                                gs.replays >= n_dec && gs.captures <= 2;
    const int32_t kernels = specd_context_device_launches(p.on);
    const int32_t kernels_off = specd_context_device_launches(p.off);
    const int same_kernels = kernels == kernels_off;
    /* tree verify steps with LoRA gates and float-vector rows, beside a second sequence's rows */
    if (specd_context_set_lora(p.on, lo, &err) != SPECD_OK) die("set_lora", &err);
    if (specd_context_set_lora(p.off, lo, &err) != SPECD_OK) die("set_lora", &err);
    const int32_t K = max_rows < 8 ? max_rows : 8;
    int32_t toks[8], pos[8];
    float gate[8], *embd = xalloc((size_t)8 * p.E * 4);
    uint8_t embd_rows[8], vis[8 * 128]; /* k rows of l0 + k <= 128 */
    for (int32_t i = 0; i < K; i++) {
        toks[i] = (int32_t)((uint32_t)(i * 7919 + 13) % (uint32_t)p.V);
        gate[i] = i % 2 ? 1.0f : 0.0f;
        embd_rows[i] = i == 1;
        for (int32_t x = 0; x < p.E; x++)
            embd[(size_t)i * p.E + x] = frand(0.05f);
    }
    s = (specd_seq_batch){.seq = 1, .n_tokens = PREFIX, .tokens = chain_prefix};
    both(&p, &s, 1);
    /* rounds 0 and 1 have the same shapes (round 1 replays round 0's graphs over a longer
     * cache, other positions and masks); round 2 adds the second sequence's rows */
    specd_device_graph_stats r1;
    int verify_replayed = 0;
    for (int round = 0; round < 3; round++) {
        if (round == 1) specd_context_device_graph_stats(p.on, &r1);
        if (round == 2) {
            specd_context_device_graph_stats(p.on, &gs);
            verify_replayed = gs.captures == r1.captures && gs.replays > r1.replays;
        }
        for (int32_t k = 1; k <= K; k += k < 3 ? 1 : K - 3 > 0 ? K - 3 : 1) {
            const int32_t l0 = specd_context_kv_len(p.on, 0);
            for (int32_t i = 0; i < k; i++) {
                pos[i] = l0 + depth(i);
                for (int32_t j = 0; j < l0 + k; j++)
                    vis[(size_t)i * (l0 + k) + j] = j < l0 || sees(i, j - l0);
            }
            uint8_t commit[8] = {0};
            commit[0] = 1; /* the root is kept: the next round sees a longer cache */
            specd_seq_batch v[2] = {{.seq = 0,
                                     .n_tokens = k,
                                     .tokens = toks,
                                     .pos = pos,
                                     .visible = vis,
                                     .lora_gate = gate,
                                     .commit = commit,
                                     .embd = embd,
                                     .embd_rows = embd_rows},
                                    {.seq = 1, .n_tokens = 2, .tokens = toks, .commit = commit}};
            both(&p, v, round == 2 ? 2 : 1);
        }
    }
    if (specd_context_set_lora(p.on, NULL, &err) != SPECD_OK) die("set_lora", &err);
    if (specd_context_set_lora(p.off, NULL, &err) != SPECD_OK) die("set_lora", &err);
    decode_both(&p, 0, tok);
    specd_context_device_graph_stats(p.on, &gs);
    const int dev_ok = device_logits(&p, prefix, PREFIX);
    const float *dev = NULL;
    specd_extend_out o = {.n_rows = 1, .device_logits = &dev};
    s = (specd_seq_batch){.seq = 0, .n_tokens = 1, .tokens = &tok};
    const int cpu_refuses = specd_context_extend(cpu, &s, 1, &o, &err) == SPECD_E_INVALID_ARG;
    const int ok = p.rows > 0 && p.equal == p.rows && gs.enabled && !gs_off.enabled &&
                   decode_replayed && verify_replayed && same_kernels && dev_ok && cpu_refuses;
    printf("  graphs: %d/%d rows bitwise with graphs on and off (prefill, %d decode steps, 3 "
           "rounds of verify steps of 1..%d tree rows with LoRA gates and vectors, the last "
           "beside a second sequence); %lld captures, %lld graph steps; decode %s as a graph (%d "
           "kernels in 1 launch, %d launched one by one without graphs), verify steps %s; device "
           "logits %s the host copy's bits, the CPU %s them%s\n",
           p.equal, p.rows, n_dec, K, (long long)gs.captures, (long long)gs.replays,
           decode_replayed ? "replayed" : "NOT replayed", kernels, kernels_off,
           verify_replayed ? "replayed" : "NOT replayed", dev_ok ? "have" : "DO NOT have",
           cpu_refuses ? "refuses" : "DOES NOT refuse", ok ? "" : "  FAIL");
    int faults_ok = 1;
    if (getenv("SPECD_EMU") && gs.enabled) {
        /* a graph that fails mid-step: an error, the cache as it was, the context usable */
        if (specd_context_kv_truncate(p.on, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        if (specd_context_kv_truncate(p.off, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        decode_both(&p, 0, tok);
        setenv("SPECD_EMU_GRAPH_FAIL", "1", 1);
        const int32_t next = (tok + 1) % p.V;
        const int failed = specd_context_decode(p.on, 0, next, p.l_on, &err) != SPECD_OK;
        unsetenv("SPECD_EMU_GRAPH_FAIL");
        const int kept = specd_context_kv_len(p.on, 0) == PREFIX + 1;
        const int before = p.equal;
        decode_both(&p, 0, next);
        decode_both(&p, 0, tok);
        const int usable = p.equal == before + 2;
        /* a capture that fails: direct launches, a warning, the same bits */
        setenv("SPECD_EMU_CAPTURE_FAIL", "1", 1);
        specd_context *cf = make_graphs(m, "1");
        float *l = xalloc((size_t)p.V * 4);
        s = (specd_seq_batch){.seq = 0, .n_tokens = PREFIX, .tokens = prefix};
        extend(cf, &s, 1, NULL);
        if (specd_context_decode(cf, 0, tok, l, &err) != SPECD_OK) die("decode", &err);
        unsetenv("SPECD_EMU_CAPTURE_FAIL");
        specd_device_graph_stats fs;
        specd_context_device_graph_stats(cf, &fs);
        if (specd_context_kv_truncate(p.off, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
        if (specd_context_decode(p.off, 0, tok, p.l_off, &err) != SPECD_OK) die("decode", &err);
        const int fell_back = !fs.enabled && fs.fallbacks == 1 && fs.captures == 0 &&
                              memcmp(l, p.l_off, (size_t)p.V * 4) == 0;
        specd_context_destroy(cf);
        free(l);
        faults_ok = failed && kept && usable && fell_back;
        printf("  graph faults (emulated): a graph failing mid-step %s, KV length %s, the next "
               "steps %s; a failed capture %s%s\n",
               failed ? "is an error" : "IS NOT an error", kept ? "unchanged" : "CHANGED",
               usable ? "bitwise as without graphs" : "DIFFER",
               fell_back ? "falls back to direct launches (same bits)" : "DOES NOT fall back",
               faults_ok ? "" : "  FAIL");
    }
    specd_context_destroy(p.on);
    specd_context_destroy(p.off);
    free(p.l_on), free(p.l_off), free(p.h_on), free(p.h_off), free(embd);
    return ok && faults_ok;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* Figures only (no threshold): a decode step and a 64-row extend, with logits. */
static void timings(specd_context *gc, const specd_model *m, const int32_t *prefix) {
    const int32_t V = specd_model_get_info(m)->n_vocab;
    float *l = xalloc((size_t)N_BATCH * V * 4);
    specd_error err;
    prefill(gc, 0, prefix, PREFIX);
    const int n_dec = 16;
    double t0 = now_ms();
    for (int i = 0; i < n_dec; i++)
        if (specd_context_decode(gc, 0, prefix[i % PREFIX], l, &err) != SPECD_OK)
            die("decode", &err);
    const double dec = (now_ms() - t0) / n_dec;
    int32_t toks[N_BATCH];
    for (int i = 0; i < N_BATCH; i++)
        toks[i] = prefix[i % PREFIX];
    if (specd_context_kv_truncate(gc, 0, PREFIX, &err) != SPECD_OK) die("kv_truncate", &err);
    specd_seq_batch s = {.seq = 0, .n_tokens = N_BATCH, .tokens = toks};
    specd_extend_out o = {.n_rows = N_BATCH, .logits = l};
    t0 = now_ms();
    extend(gc, &s, 1, &o);
    printf("  timing: decode %.3f ms/token, extend of %d rows with their logits %.3f ms\n", dec,
           N_BATCH, now_ms() - t0);
    free(l);
}

/* A second CUDA context of the model while the first lives (it shares the first's weights on the
 * device), cut to half the layers: its last prompt row against a CPU context with the same cut. */
static int second_context(const specd_model *m, const int32_t *prefix) {
    const specd_model_info *in = specd_model_get_info(m);
    const int32_t save = n_layers_cut;
    n_layers_cut = (save ? save : in->n_layer) / 2;
    if (n_layers_cut < 1) n_layers_cut = 1;
    specd_context *g2 = make(m, SPECD_DEVICE_CUDA, 1), *c2 = make(m, SPECD_DEVICE_CPU, 1);
    float *lg = xalloc((size_t)in->n_vocab * 4), *lc = xalloc((size_t)in->n_vocab * 4);
    int32_t row = PREFIX - 1;
    specd_seq_batch s = {.seq = 0, .n_tokens = PREFIX, .tokens = prefix};
    specd_extend_out og = {.n_rows = 1, .rows = &row, .logits = lg};
    specd_extend_out oc = {.n_rows = 1, .rows = &row, .logits = lc};
    extend(g2, &s, 1, &og);
    extend(c2, &s, 1, &oc);
    stats st = {0};
    accumulate(&st, lg, lc, 1, in->n_vocab);
    const int ok = nmse(&st) <= NMSE_MAX;
    printf("  a second context (weights shared), %d layers: nmse %.3e vs CPU, argmax %s%s\n",
           n_layers_cut, nmse(&st), st.agree ? "equal" : "differs", ok ? "" : "  FAIL");
    specd_context_destroy(g2);
    specd_context_destroy(c2);
    free(lg), free(lc);
    n_layers_cut = save;
    return ok;
}

static int run_model(const char *path, int real, const int32_t *ids, const int64_t *lens,
                     int n_prompts) {
    specd_model *m = NULL;
    specd_error err;
    if (specd_model_create(path, &m, &err) != SPECD_OK) die(path, &err);
    const specd_model_info *in = specd_model_get_info(m);
    if (n_layers_cut > in->n_layer) n_layers_cut = 0;
    printf("%s (%d layers run of %d, vocab %d)\n", path, n_layers_cut ? n_layers_cut : in->n_layer,
           in->n_layer, in->n_vocab);
    specd_context *gc = make(m, SPECD_DEVICE_CUDA, 4), *cc = make(m, SPECD_DEVICE_CPU, 4);
    size_t w = 0, kv = 0, scratch = 0;
    specd_context_device_memory(gc, &w, &kv, &scratch);
    printf("  device memory: weights %zu, KV %zu, scratch %zu bytes; context %zu bytes (KV %zu)\n",
           w, kv, scratch, specd_context_memory_bytes(gc), specd_context_kv_bytes(gc));
    int ok = w > 0 && kv > 0 && scratch > 0 && specd_context_device(gc) == SPECD_DEVICE_CUDA;
    ok &= against_cpu(gc, cc, ids, lens, n_prompts, in->n_vocab, in->n_embd, real);
    int32_t prefix[PREFIX], chain_prefix[PREFIX];
    for (int i = 0; i < PREFIX; i++) {
        prefix[i] = ids[i] % in->n_vocab;
        chain_prefix[i] = ids[MAX_PROMPT + i] % in->n_vocab;
    }
    char dir[64];
    specd_lora *lo = make_lora(m, dir);
    if (specd_context_set_lora(gc, lo, &err) != SPECD_OK) die("set_lora", &err);
    specd_context_device_memory(gc, &w, NULL, NULL);
    ok &= invariance(gc, m, prefix, chain_prefix, 1);
    if (specd_context_set_lora(gc, NULL, &err) != SPECD_OK) die("set_lora", &err);
    ok &= graphs(m, cc, prefix, chain_prefix, lo);
    ok &= cache_ops(gc, cc, m, prefix);
    timings(gc, m, prefix);
    ok &= second_context(m, prefix);
    specd_context_destroy(gc);
    specd_context_destroy(cc);
    specd_lora_destroy(lo);
    remove_lora_dir(dir);
    specd_model_destroy(m);
    return ok;
}

int main(void) {
    const char *e = getenv("SPECD_SOURCE_DIR");
    if (e && *e) src_dir = e;
    e = getenv("SPECD_TEST_LAYERS");
    if (e && *e) n_layers_cut = atoi(e);
    e = getenv("SPECD_TEST_ROWS");
    if (e && *e) max_rows = atoi(e) < 1 ? 1 : atoi(e) > 64 ? 64 : atoi(e);
    e = getenv("SPECD_TEST_PROMPTS");
    int n_prompts = e && *e ? atoi(e) : 4;
    if (n_prompts < 2) n_prompts = 2;
    int32_t *ids = xalloc((size_t)n_prompts * MAX_PROMPT * 4);
    int64_t *lens = xalloc((size_t)n_prompts * 8);
    if (specd_golden_prompts_read(src_dir, n_prompts, MAX_PROMPT, ids, lens) != 0)
        die("golden prompts missing (SPECD_SOURCE_DIR)", NULL);
    for (int p = 0; p < 2; p++)
        if (lens[p] < PREFIX) die("a golden prompt shorter than the test's prefix", NULL);
    int ok = 1;
    const int32_t cut = n_layers_cut;
    static const char *const arch[3] = {"llama", "qwen2", "qwen3"};
    for (int a = 0; a < 3; a++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/arch_%s.gguf", src_dir, arch[a]);
        n_layers_cut = cut;
        ok &= run_model(path, 0, ids, lens, n_prompts);
    }
    const char *real = getenv("SPECD_TEST_MODEL");
    struct stat sb;
    if (!real || !*real || stat(real, &sb) != 0) real = getenv("SPECD_MODEL"); /* gpu-check's */
    if (real && *real && stat(real, &sb) == 0) {
        n_layers_cut = cut;
        ok &= run_model(real, 1, ids, lens, n_prompts);
    } else {
        printf("the real model: skipped (neither SPECD_TEST_MODEL nor SPECD_MODEL names a file)\n");
    }
    free(ids), free(lens);
    printf("%s\n", ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
