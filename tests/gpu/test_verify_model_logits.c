/* The acceptance engine on the device (kernels/cuda/verify.cu) against the CPU engine
 * (specd_accept_chain_keyed, specd_accept_tree) on real logits of the default model: the same
 * decisions bit for bit (status, accepted count, every emitted token, a tree's path).
 *
 * The CPU runtime runs three chat prompts and a greedy continuation of each; every block is a
 * verify step's rows from one extend of the runtime ([last token, drafts...]): chains of 4..8
 * drafts from four drafters (the model's own greedy continuation, which greedy accepts; the same
 * with one draft replaced by the row's second choice, which it rejects; drafts sampled from the
 * model's softmax at T = 1 and at T = 1.5 with top-k 200, their q rows kept), and a tree (the
 * greedy branch plus second and third choices as siblings, its rows from one extend with a
 * visibility mask). Every rule runs on them: GREEDY, COUPLED at T 0.7 / 1 with top-k, top-p 0.9 /
 * 0.95, min-p, REJECTION with the drafter's q rows and without (a deterministic drafter), a logit
 * bias banning a token the model favours (-inf) and raising others; in f32 and bf16 (rounded as
 * test_verify_on_device does), in three layouts: dense rows, a padded stride (NaN past n_vocab,
 * never read), and a padded vocabulary (64 extra columns at the dtype's lowest value, PyTorch's
 * mask, plus a grammar-like -inf mask over real tokens). All sequences of a layout go in one
 * launch. Then a fault the comparison must see: the CPU engine with another seed has to disagree
 * with the device on some COUPLED / REJECTION sequences.
 *
 * Each setting runs on every block of its shape (SPECD_VERIFY_MODEL_BLOCKS=n: on n of them), in
 * SPECD_VERIFY_MODEL_SEEDS rounds (default 4; the CPU emulation, tests/gpu/emu/run, runs 1) of
 * fresh seeds, stream words and layouts. Prints the counts by setting, rule and dtype.
 * Skips (77) without the kernel library, a device or the model (SPECD_TEST_MODEL). */
#include "gpu_harness.h"
#include "verify_compare.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <time.h>

#include "fixture_model.h"
#include "kernels/cpu/fp16.h"
#include "specd/accept.h"
#include "specd/runtime.h"
#include "specd/sampling.h"
#include "specd/tokenizer.h"

enum { MAXK = SPECD_CUDA_VERIFY_MAX_K, SLOTS = SPECD_CUDA_VERIFY_MAX_SLOTS };
/* Greedy tokens after each prompt; blocks per prompt; rows per block at most. */
enum { GEN = 24, MAX_PROMPT = 256, CHAIN_BLOCKS = 4, BLOCKS_PER_PROMPT = CHAIN_BLOCKS + 1 };
enum { N_PROMPTS = 3, N_BLOCKS = N_PROMPTS * BLOCKS_PER_PROMPT, BLOCK_ROWS = 9 };
enum { MAX_ROWS = N_BLOCKS * BLOCK_ROWS };
/* The layouts' geometry: extra columns of the padded vocabulary, the padded stride's gap, the
 * gap between q rows on the device. */
enum { PAD_VOCAB = 64, STRIDE_GAP = 40, QPAD = 24 };
enum { L_DENSE = 0, L_STRIDE = 1, L_PADDED = 2, N_LAYOUTS = 3 };
static const char *const LAYOUT_NAME[N_LAYOUTS] = {"dense", "padded stride", "padded vocab"};

static const char *const PROMPTS[N_PROMPTS] = {
    "Explain in two sentences why the sky is blue.",
    "Write a short poem about a cat who learns to program.",
    "What are three good habits for studying well?",
};

enum { Q_NONE = 0, Q_ROWS = 1 };

typedef struct setting {
    const char *name;
    int rule;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
    int bias;
    int q;
    int tree;
} setting;

static const setting SETTINGS[] = {
    {"greedy", SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 0, Q_NONE, 0},
    {"greedy bias", SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 1, Q_NONE, 0},
    {"coupled T=0.7", SPECD_ACCEPT_COUPLED, 0.7f, 0, 1.0f, 0.0f, 0, Q_NONE, 0},
    {"coupled T=1", SPECD_ACCEPT_COUPLED, 1.0f, 0, 1.0f, 0.0f, 0, Q_NONE, 0},
    {"coupled T=0.7 top-k 40", SPECD_ACCEPT_COUPLED, 0.7f, 40, 1.0f, 0.0f, 0, Q_NONE, 0},
    {"coupled T=1 top-p 0.9", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.9f, 0.0f, 0, Q_NONE, 0},
    {"coupled T=1 top-p 0.95 bias", SPECD_ACCEPT_COUPLED, 1.0f, 0, 0.95f, 0.0f, 1, Q_NONE, 0},
    {"coupled T=0.7 min-p 0.05", SPECD_ACCEPT_COUPLED, 0.7f, 0, 1.0f, 0.05f, 0, Q_NONE, 0},
    {"coupled T=1 top-k 50 top-p 0.95 min-p 0.02 bias", SPECD_ACCEPT_COUPLED, 1.0f, 50, 0.95f,
     0.02f, 1, Q_NONE, 0},
    {"rejection q T=1", SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0, Q_ROWS, 0},
    {"rejection q T=0.7 top-p 0.9", SPECD_ACCEPT_REJECTION, 0.7f, 0, 0.9f, 0.0f, 0, Q_ROWS, 0},
    {"rejection q T=1 top-k 40 min-p 0.05 bias", SPECD_ACCEPT_REJECTION, 1.0f, 40, 1.0f, 0.05f,
     1, Q_ROWS, 0},
    {"rejection no q T=1", SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0, Q_NONE, 0},
    {"rejection no q T=0.7 top-p 0.95", SPECD_ACCEPT_REJECTION, 0.7f, 0, 0.95f, 0.0f, 0, Q_NONE,
     0},
    {"tree greedy bias", SPECD_ACCEPT_GREEDY, 1.0f, 0, 1.0f, 0.0f, 1, Q_NONE, 1},
    {"tree coupled T=0.7 top-p 0.9", SPECD_ACCEPT_COUPLED, 0.7f, 0, 0.9f, 0.0f, 0, Q_NONE, 1},
    {"tree rejection q T=1", SPECD_ACCEPT_REJECTION, 1.0f, 0, 1.0f, 0.0f, 0, Q_ROWS, 1},
    {"tree rejection no q T=0.7 min-p 0.05", SPECD_ACCEPT_REJECTION, 0.7f, 0, 1.0f, 0.05f, 0,
     Q_NONE, 1},
};
enum { N_SETTINGS = sizeof SETTINGS / sizeof SETTINGS[0] };

/* The chain drafters, by block index within a prompt (the last block is the tree). */
enum { D_GREEDY = 0, D_PERTURBED = 1, D_SAMPLED = 2, D_SAMPLED_HOT = 3, D_TREE = 4 };
static const char *const DRAFTER_NAME[BLOCKS_PER_PROMPT] = {
    "greedy drafts", "one draft perturbed", "sampled T=1", "sampled T=1.5 top-k 200", "tree"};

/* One verify step's rows (rows [row0, row0 + k + 1) of the model's rows) and its drafts. */
typedef struct block {
    int drafter;
    int tree;
    int32_t k, row0;
    uint32_t n_history; /* tokens before the first draft: slot 0's key position */
    int32_t draft[MAXK], parent[MAXK];
    float *q;           /* k rows of V: the distribution each draft / node was proposed from */
} block;

typedef struct model_rows {
    specd_model *m;
    specd_context *ctx;
    specd_tokenizer *tok;
    int32_t V;
    float *rows; /* MAX_ROWS x V: the blocks' logits */
    int32_t n_rows;
    block blocks[N_BLOCKS];
} model_rows;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what, const specd_error *err) {
    printf("FAIL: %s: %s\n", what, err ? err->message : "");
    exit(1);
}

/* The first (up to) three tokens of a row by logit, lowest index first among ties. */
static void top3(const float *row, int32_t V, int32_t out[3]) {
    out[0] = out[1] = out[2] = -1;
    for (int32_t x = 0; x < V; x++) {
        for (int j = 0; j < 3; j++) {
            if (out[j] < 0 || row[x] > row[out[j]]) {
                for (int i = 2; i > j; i--) out[i] = out[i - 1];
                out[j] = x;
                break;
            }
        }
    }
}

static void truncate_to(model_rows *mr, int32_t n) {
    specd_error err;
    if (specd_context_kv_truncate(mr->ctx, 0, n, &err) != SPECD_OK) die("kv truncate", &err);
}

/* Extends sequence 0 by n tokens (positions pos, or the next ones; visibility visible, or
 * causal) and writes all n rows' logits to logits (or none with NULL). */
static void extend(model_rows *mr, const int32_t *tokens, int32_t n, const int32_t *pos,
                   const uint8_t *visible, float *logits) {
    specd_seq_batch b = {.seq = 0, .n_tokens = n, .tokens = tokens, .pos = pos,
                         .visible = visible};
    specd_extend_out o = {.n_rows = n, .rows = NULL, .logits = logits};
    specd_error err;
    if (specd_context_extend(mr->ctx, &b, 1, logits ? &o : NULL, &err) != SPECD_OK)
        die("extend", &err);
}

static void decode(model_rows *mr, int32_t token, float *logits) {
    specd_error err;
    if (specd_context_decode(mr->ctx, 0, token, logits, &err) != SPECD_OK) die("decode", &err);
}

/* A sampler with temperature t and top-k (the drafters' and q's transform). */
static specd_sampler *sampler_at(float t, int32_t top_k, int32_t V) {
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = t;
    sp.top_k = top_k;
    specd_sampler *s = NULL;
    specd_error err;
    if (specd_sampler_create(&sp, V, &s, &err) != SPECD_OK) die("sampler", &err);
    return s;
}

static void probs_of(specd_sampler *s, const float *row, int32_t V, float *q) {
    specd_error err;
    if (specd_sampler_probs(s, row, V, q, &err) != SPECD_OK) die("sampler probs", &err);
}

/* The prompt as chat tokens, then GEN greedy tokens: s (n_prompt + GEN tokens). */
static int32_t greedy_text(model_rows *mr, const char *prompt, int32_t *s) {
    specd_chat_message msg = {.role = "user", .content = prompt};
    size_t n = 0;
    specd_error err;
    if (specd_tokenizer_encode_chat(mr->tok, &msg, 1, 1, 0, s, MAX_PROMPT, &n, &err) != SPECD_OK)
        die("chat tokens", &err);
    float *last = host_alloc((size_t)mr->V * sizeof(float));
    truncate_to(mr, 0);
    const int32_t row = (int32_t)n - 1;
    specd_seq_batch b = {.seq = 0, .n_tokens = (int32_t)n, .tokens = s};
    specd_extend_out o = {.n_rows = 1, .rows = &row, .logits = last};
    if (specd_context_extend(mr->ctx, &b, 1, &o, &err) != SPECD_OK) die("prompt", &err);
    for (int g = 0; g < GEN; g++) {
        int32_t t3[3];
        top3(last, mr->V, t3);
        s[n + (size_t)g] = t3[0];
        if (g + 1 < GEN) decode(mr, t3[0], last);
    }
    free(last);
    return (int32_t)n;
}

static float *new_rows(model_rows *mr, int32_t n) {
    if (mr->n_rows + n > MAX_ROWS) {
        printf("FAIL: more than %d rows\n", MAX_ROWS);
        exit(1);
    }
    float *r = mr->rows + (size_t)mr->n_rows * (size_t)mr->V;
    mr->n_rows += n;
    return r;
}

/* A chain block at t (the cache keeps s[0..t), the step extends s[t] and the k drafts). */
static void chain_block(model_rows *mr, block *b, const int32_t *s, int32_t t, int32_t k,
                        int drafter, uint64_t seed) {
    const int32_t V = mr->V;
    memset(b, 0, sizeof *b);
    b->drafter = drafter;
    b->k = k;
    b->n_history = (uint32_t)t + 1;
    b->q = host_alloc((size_t)k * (size_t)V * sizeof(float));
    int32_t tokens[SLOTS];
    tokens[0] = s[t];
    float *tmp = host_alloc((size_t)SLOTS * (size_t)V * sizeof(float));
    truncate_to(mr, t);
    if (drafter == D_GREEDY || drafter == D_PERTURBED) {
        for (int j = 0; j < k; j++) b->draft[j] = s[t + 1 + j];
        if (drafter == D_PERTURBED) { /* draft j becomes its row's second choice */
            memcpy(tokens + 1, b->draft, (size_t)k * sizeof(int32_t));
            extend(mr, tokens, k + 1, NULL, NULL, tmp);
            truncate_to(mr, t);
            const int j = 1 + (int)(seed % (uint64_t)(k - 1));
            int32_t t3[3];
            top3(tmp + (size_t)j * V, V, t3);
            b->draft[j] = t3[1];
        }
    } else { /* drafts drawn from the model's own softmax, one decode at a time */
        specd_sampler *sm = drafter == D_SAMPLED ? sampler_at(1.0f, 0, V)
                                                 : sampler_at(1.5f, 200, V);
        decode(mr, s[t], tmp);
        for (int j = 0; j < k; j++) {
            probs_of(sm, tmp, V, b->q + (size_t)j * V);
            specd_sample_key key = {
                .seed = seed, .sequence = 7, .position = (uint32_t)t + 1 + (uint32_t)j};
            specd_error err;
            if (specd_sampler_sample_draft(sm, tmp, V, key, &b->draft[j], &err) != SPECD_OK)
                die("draft sample", &err);
            if (j + 1 < k) decode(mr, b->draft[j], tmp);
        }
        specd_sampler_destroy(sm);
        truncate_to(mr, t);
    }
    memcpy(tokens + 1, b->draft, (size_t)k * sizeof(int32_t));
    b->row0 = mr->n_rows;
    float *rows = new_rows(mr, k + 1);
    extend(mr, tokens, k + 1, NULL, NULL, rows);
    if (drafter == D_GREEDY || drafter == D_PERTURBED) { /* q: the model's softmax at T = 1 */
        specd_sampler *sm = sampler_at(1.0f, 0, V);
        for (int j = 0; j < k; j++) probs_of(sm, rows + (size_t)j * V, V, b->q + (size_t)j * V);
        specd_sampler_destroy(sm);
    }
    free(tmp);
}

/* A tree block at t: the greedy branch s[t+1..t+4] and, as siblings, second choices under the
 * root, node 0 and node 1, and the root's third choice. Its rows come from one extend under a
 * visibility mask (each node sees the cache, s[t] and its own path). */
static void tree_block(model_rows *mr, block *b, const int32_t *s, int32_t t) {
    enum { MAIN = 4 };
    const int32_t V = mr->V;
    memset(b, 0, sizeof *b);
    b->drafter = D_TREE;
    b->tree = 1;
    b->n_history = (uint32_t)t + 1;
    float *tmp = host_alloc((size_t)SLOTS * (size_t)V * sizeof(float));
    int32_t tokens[SLOTS];
    tokens[0] = s[t];
    for (int j = 0; j < MAIN; j++) tokens[1 + j] = s[t + 1 + j];
    truncate_to(mr, t);
    extend(mr, tokens, MAIN + 1, NULL, NULL, tmp); /* the greedy branch's rows */
    truncate_to(mr, t);
    int32_t k = 0;
    for (int j = 0; j < MAIN; j++, k++) {
        b->draft[k] = s[t + 1 + j];
        b->parent[k] = j - 1;
    }
    static const int32_t side_parent[4] = {-1, 0, -1, 1}, side_rank[4] = {1, 1, 2, 1};
    for (int j = 0; j < 4; j++, k++) {
        int32_t t3[3];
        top3(tmp + (size_t)(side_parent[j] + 1) * V, V, t3);
        b->parent[k] = side_parent[j];
        b->draft[k] = t3[side_rank[j]];
    }
    b->k = k;
    int32_t pos[SLOTS];
    const int32_t width = t + k + 1;
    uint8_t *vis = host_alloc((size_t)(k + 1) * (size_t)width);
    for (int r = 0; r <= k; r++) {
        uint8_t *row = vis + (size_t)r * (size_t)width;
        memset(row, 1, (size_t)t + 1); /* the cache and s[t] */
        pos[r] = r == 0 ? t : t + 1 + verify_depth_of(b->parent, r - 1);
        if (r > 0) tokens[r] = b->draft[r - 1];
        for (int32_t v = r - 1; v >= 0 && r > 0; v = b->parent[v]) row[t + 1 + v] = 1;
    }
    b->row0 = mr->n_rows;
    float *rows = new_rows(mr, k + 1);
    extend(mr, tokens, k + 1, pos, vis, rows);
    truncate_to(mr, t);
    /* q of node i: the model's softmax at T = 1 on its parent's row (slot parent + 1) */
    b->q = host_alloc((size_t)k * (size_t)V * sizeof(float));
    specd_sampler *sm = sampler_at(1.0f, 0, V);
    for (int i = 0; i < k; i++)
        probs_of(sm, rows + (size_t)(b->parent[i] + 1) * V, V, b->q + (size_t)i * V);
    specd_sampler_destroy(sm);
    free(vis);
    free(tmp);
}

static void make_blocks(model_rows *mr) {
    int32_t s[MAX_PROMPT + GEN];
    int nb = 0;
    for (int p = 0; p < N_PROMPTS; p++) {
        const int32_t n = greedy_text(mr, PROMPTS[p], s);
        /* t from the prompt's last token into the continuation; k 4..8 */
        for (int c = 0; c < CHAIN_BLOCKS; c++) {
            const int32_t k = 4 + (p * CHAIN_BLOCKS + c) % 5;
            const int32_t t = n - 1 + (c * 5 + p) % (GEN - k);
            const uint64_t seed = 0xd1a7ull + (uint64_t)nb * 131u;
            chain_block(mr, &mr->blocks[nb], s, t, k, c, seed);
            nb++;
        }
        tree_block(mr, &mr->blocks[nb++], s, n - 1 + 2 * p);
    }
}

/* ---- the comparison ------------------------------------------------------------------------ */

/* One sequence: a setting on a block, in one layout. */
typedef struct vcase {
    const setting *st;
    const block *b;
    int layout;
    specd_logit_bias bias[5];
    int n_bias;
    specd_cuda_verify_seq d; /* device pointers (bias, q) filled per launch */
} vcase;

static specd_sampling_params sampling_of(const vcase *c) {
    return verify_sampling_of(&c->d, c->bias, c->n_bias);
}

/* The bias of a case: bans the first choice of one of its rows, raises the second choice of
 * slot 0 and the third of the last slot, lowers another token, nudges one more. */
static void make_bias(vcase *c, const float *rows, int32_t V, uint32_t salt) {
    const block *b = c->b;
    int32_t a[3], z[3], w[3];
    top3(rows + (size_t)(b->row0 + (int32_t)(salt % (uint32_t)(b->k + 1))) * V, V, a);
    top3(rows + (size_t)b->row0 * V, V, z);
    top3(rows + (size_t)(b->row0 + b->k) * V, V, w);
    const int32_t tok[5] = {a[0], z[1], w[2], (int32_t)(salt * 2654435761u % (uint32_t)V),
                            (int32_t)((salt + 17u) * 40503u % (uint32_t)V)};
    const float val[5] = {-INFINITY, 3.0f, 1.5f, -2.0f, 0.5f};
    c->n_bias = 0;
    for (int i = 0; i < 5; i++) {
        int dup = 0;
        for (int j = 0; j < c->n_bias; j++) dup |= c->bias[j].token == tok[i];
        if (dup) continue;
        c->bias[c->n_bias].token = tok[i];
        c->bias[c->n_bias].bias = val[i];
        c->n_bias++;
    }
}

static void make_case(vcase *c, const setting *st, const block *b, int layout, const float *rows,
                      int32_t V, uint32_t salt) {
    memset(c, 0, sizeof *c);
    c->st = st;
    c->b = b;
    c->layout = layout;
    if (st->bias) make_bias(c, rows, V, salt);
    specd_cuda_verify_seq *d = &c->d;
    verify_set_rule(d, st->rule, st->temperature, st->top_k, st->top_p, st->min_p);
    d->seed = gpu_rng_next();
    d->sequence = (uint32_t)gpu_rng_next();
    d->tree = b->tree;
    d->k = b->k;
    for (int j = 0; j < b->k; j++) {
        d->draft[j] = b->draft[j];
        d->parent[j] = b->tree ? b->parent[j] : 0;
    }
    for (int s = 0; s <= b->k; s++) {
        d->row[s] = b->row0 + s;
        d->pos[s] =
            b->n_history + (uint32_t)(b->tree && s ? verify_depth_of(b->parent, s - 1) + 1 : s);
    }
}

/* The layout's geometry: n_vocab as the engines see it, the row stride. */
static void geometry(int layout, int32_t V, int32_t *nv, int64_t *stride) {
    *nv = layout == L_PADDED ? V + PAD_VOCAB : V;
    *stride = layout == L_STRIDE ? V + STRIDE_GAP : *nv;
}

/* The grammar-like mask of the padded layout: real tokens the host masks with -inf. */
static int grammar_masked(int32_t x) { return x % 97 == 5; }

/* The rows in the launch's dtype and layout (dev_rows), and as the CPU engine is given them
 * (dense, nv apart): the dtype's rounding, the padding masked. */
static void encode(const float *rows, int32_t n_rows, int32_t V, int layout, int bf16,
                   void *dev_rows, float *dense) {
    int32_t nv;
    int64_t stride;
    geometry(layout, V, &nv, &stride);
    const float lowest_f32 = -FLT_MAX;
    for (int32_t r = 0; r < n_rows; r++)
        for (int64_t x = 0; x < stride; x++) {
            float v;
            if (x < V)
                v = layout == L_PADDED && grammar_masked((int32_t)x) ? -INFINITY
                                                                     : rows[(size_t)r * V + x];
            else if (x < nv)
                v = lowest_f32; /* PyTorch's mask of the padding: the dtype's lowest */
            else
                v = NAN; /* past n_vocab: never read */
            const size_t i = (size_t)r * (size_t)stride + (size_t)x;
            if (!bf16) {
                ((float *)dev_rows)[i] = v;
            } else {
                uint16_t h = v != v ? 0x7fc0u : x >= V && x < nv ? 0xff7fu : specd_fp32_to_bf16(v);
                ((uint16_t *)dev_rows)[i] = h;
                v = specd_bf16_to_fp32(h);
                if (x >= V && x < nv) v = -INFINITY; /* at or below mask_at: masked */
            }
            if (x < nv) dense[(size_t)r * nv + x] = v;
        }
}

typedef struct tally {
    int total[N_SETTINGS][2], ok[N_SETTINGS][2];
    int rule_total[3][2], rule_ok[3][2];
    int drafts[3][BLOCKS_PER_PROMPT], accepted[3][BLOCKS_PER_PROMPT], emitted, cpu_errors;
    int faults, fault_seen; /* the perturbed-seed check: sequences tried, decisions changed */
    double device_s, cpu_s; /* wall time in the launches (upload to results back), in the engine */
} tally;

/* One launch: every case of a layout in one dtype, each against the CPU engine. */
static void run_launch(const gpu_ctx *g, const model_rows *mr, vcase *cs, int n, int layout,
                       int bf16, tally *ty) {
    const int32_t V = mr->V;
    int32_t nv;
    int64_t stride;
    geometry(layout, V, &nv, &stride);
    const size_t es = bf16 ? 2 : 4;
    void *hrows = host_alloc((size_t)mr->n_rows * (size_t)stride * es);
    float *dense = host_alloc((size_t)mr->n_rows * (size_t)nv * sizeof(float));
    encode(mr->rows, mr->n_rows, V, layout, bf16, hrows, dense);
    const double t0 = now_s();
    void *drows = gpu_put(g, hrows, (size_t)mr->n_rows * (size_t)stride * es);
    free(hrows);
    /* per case: a dense bias row, and q rows (QPAD apart on the device, NaN between) */
    const size_t qs = (size_t)nv + QPAD;
    float *hbias = host_alloc((size_t)n * (size_t)nv * sizeof(float));
    size_t *q_at = host_alloc((size_t)n * sizeof(size_t)), n_q = 0; /* first q row of a case */
    for (int i = 0; i < n; i++) {
        q_at[i] = n_q;
        if (cs[i].st->q == Q_ROWS) n_q += (size_t)cs[i].b->k;
    }
    float *hq = host_alloc(n_q * qs * sizeof(float));
    float **qcpu = host_alloc((size_t)n * sizeof(float *));
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < cs[i].n_bias; j++)
            hbias[(size_t)i * nv + (size_t)cs[i].bias[j].token] = cs[i].bias[j].bias;
        if (cs[i].st->q != Q_ROWS) continue;
        qcpu[i] = host_alloc((size_t)cs[i].b->k * (size_t)nv * sizeof(float));
        for (int j = 0; j < cs[i].b->k; j++) {
            float *dq = hq + (q_at[i] + (size_t)j) * qs;
            memcpy(dq, cs[i].b->q + (size_t)j * V, (size_t)V * sizeof(float));
            for (size_t x = (size_t)nv; x < qs; x++) dq[x] = NAN;
            memcpy(qcpu[i] + (size_t)j * nv, dq, (size_t)nv * sizeof(float)); /* zeros past V */
        }
    }
    float *dbias = gpu_put(g, hbias, (size_t)n * (size_t)nv * sizeof(float));
    float *dq = gpu_put(g, hq, n_q * qs * sizeof(float));
    specd_cuda_verify_seq *seqs = host_alloc((size_t)n * sizeof *seqs);
    for (int i = 0; i < n; i++) {
        seqs[i] = cs[i].d;
        seqs[i].bias = cs[i].n_bias ? dbias + (size_t)i * nv : NULL;
        seqs[i].draft_probs = cs[i].st->q == Q_ROWS ? dq + q_at[i] * qs : NULL;
        seqs[i].q_stride = cs[i].st->q == Q_ROWS ? (int64_t)qs : 0;
    }
    const size_t sb = specd_cuda_verify_scratch_bytes(n);
    void *scratch = gpu_alloc(g, sb);
    specd_cuda_verify_out *dout = gpu_alloc(g, (size_t)n * sizeof *dout);
    specd_cuda_verify_args a = {.logits = drows, .dtype = bf16 ? SPECD_CUDA_LOGITS_BF16
                                                               : SPECD_CUDA_LOGITS_F32,
                                .row_stride = stride, .n_rows = mr->n_rows, .n_vocab = nv,
                                .mask_at = bf16 ? specd_bf16_to_fp32(0xff7fu) : -FLT_MAX,
                                .n_seqs = n, .seqs = seqs, .out = dout, .scratch = scratch,
                                .scratch_bytes = sb};
    gpu_check(g, "verify", g->k->verify(&a, NULL));
    specd_cuda_verify_out *dev = host_alloc((size_t)n * sizeof *dev);
    gpu_get(g, dev, dout, (size_t)n * sizeof *dev);
    const double t1 = now_s();
    ty->device_s += t1 - t0;
    for (int i = 0; i < n; i++) {
        const vcase *c = &cs[i];
        const int si = (int)(c->st - SETTINGS);
        const specd_cuda_verify_out cpu =
            verify_cpu_decide(&c->d, sampling_of(c), dense, mr->n_rows, nv, qcpu[i], c->d.seed);
        const int ok = verify_same_out(&dev[i], &cpu);
        if (!ok)
            printf("FAIL %s %s, %s, block of %s (k %d): cpu status %d acc %d emit %d tok0 %d | "
                   "dev status %d acc %d emit %d tok0 %d\n",
                   bf16 ? "bf16" : "f32", LAYOUT_NAME[layout], c->st->name,
                   DRAFTER_NAME[c->b->drafter], c->b->k, cpu.status, cpu.n_accepted,
                   cpu.n_emitted, cpu.tokens[0], dev[i].status, dev[i].n_accepted,
                   dev[i].n_emitted, dev[i].tokens[0]);
        ty->total[si][bf16]++;
        ty->ok[si][bf16] += ok;
        ty->rule_total[c->st->rule][bf16]++;
        ty->rule_ok[c->st->rule][bf16] += ok;
        if (cpu.status == 0) {
            ty->drafts[c->st->rule][c->b->drafter] += c->b->k;
            ty->accepted[c->st->rule][c->b->drafter] += cpu.n_accepted;
            ty->emitted += cpu.n_emitted;
        } else {
            ty->cpu_errors++;
        }
        /* the fault: another seed must change some sampled decisions */
        if (c->st->rule != SPECD_ACCEPT_GREEDY && dev[i].status == SPECD_CUDA_VERIFY_OK) {
            const specd_cuda_verify_out other = verify_cpu_decide(
                &c->d, sampling_of(c), dense, mr->n_rows, nv, qcpu[i], c->d.seed ^ 0x5bd1e995ull);
            ty->faults++;
            ty->fault_seen += !verify_same_out(&dev[i], &other);
        }
        free(qcpu[i]);
    }
    ty->cpu_s += now_s() - t1;
    gpu_free(g, drows);
    gpu_free(g, dbias);
    gpu_free(g, dq);
    gpu_free(g, scratch);
    gpu_free(g, dout);
    free(dev);
    free(seqs);
    free(qcpu);
    free(q_at);
    free(hq);
    free(hbias);
    free(dense);
}

int main(void) {
    gpu_ctx g = gpu_open_or_skip();
    if (g.k->struct_size < offsetof(specd_cuda_kernels, verify) + sizeof(void *) || !g.k->verify) {
        printf("FAIL: the kernel library has no verify entry\n");
        return 1;
    }
    const char *env = getenv("SPECD_VERIFY_MODEL_BLOCKS");
    const int per_setting = env && *env ? atoi(env) : 0; /* 0: every block */
    env = getenv("SPECD_VERIFY_MODEL_SEEDS");
    const int n_seeds = env && *env && atoi(env) > 0 ? atoi(env) : 4;
    model_rows mr;
    memset(&mr, 0, sizeof mr);
    mr.m = fixture_model_open();
    mr.ctx = fixture_context(mr.m, 1, 512, MAX_PROMPT);
    specd_error err;
    if (specd_tokenizer_create_from_gguf(specd_model_gguf(mr.m), &mr.tok, &err) != SPECD_OK)
        die("tokenizer", &err);
    mr.V = specd_model_get_info(mr.m)->n_vocab;
    mr.rows = host_alloc((size_t)MAX_ROWS * (size_t)mr.V * sizeof(float));
    const double t_model = now_s();
    make_blocks(&mr);
    printf("model rows: %d prompts, %d blocks (%d rows of %d tokens) from the CPU runtime in "
           "%.1f s\n",
           N_PROMPTS, N_BLOCKS, mr.n_rows, mr.V, now_s() - t_model);

    /* The cases: each setting on the blocks of its shape (every block, or per_setting of them,
     * a different one per setting), the layout turning with block and setting; n_seeds rounds
     * of them with fresh seeds and stream words. */
    vcase *cs = host_alloc((size_t)N_SETTINGS * N_BLOCKS * sizeof *cs);
    vcase *group = host_alloc((size_t)N_SETTINGS * N_BLOCKS * sizeof *group);
    tally ty;
    memset(&ty, 0, sizeof ty);
    for (int round = 0; round < n_seeds; round++) {
        int n = 0;
        for (int s = 0; s < N_SETTINGS; s++) {
            int used = 0;
            for (int i = 0; i < N_BLOCKS && (!per_setting || used < per_setting); i++) {
                const int bi = (i + s * 7 + round) % N_BLOCKS;
                const block *b = &mr.blocks[bi];
                if (b->tree != SETTINGS[s].tree) continue;
                make_case(&cs[n], &SETTINGS[s], b, (bi + s + round) % N_LAYOUTS, mr.rows, mr.V,
                          (uint32_t)(bi * 31 + s + round * 977));
                n++;
                used++;
            }
        }
        for (int bf16 = 0; bf16 < 2; bf16++)
            for (int layout = 0; layout < N_LAYOUTS; layout++) {
                int m = 0;
                for (int i = 0; i < n; i++)
                    if (cs[i].layout == layout) group[m++] = cs[i];
                if (m) run_launch(&g, &mr, group, m, layout, bf16, &ty);
            }
    }
    int fails = 0, total = 0;
    for (int s = 0; s < N_SETTINGS; s++) {
        printf("%-48s f32 %d/%d  bf16 %d/%d%s\n", SETTINGS[s].name, ty.ok[s][0], ty.total[s][0],
               ty.ok[s][1], ty.total[s][1],
               ty.ok[s][0] + ty.ok[s][1] < ty.total[s][0] + ty.total[s][1] ? "  FAIL" : "");
        fails += ty.total[s][0] + ty.total[s][1] - ty.ok[s][0] - ty.ok[s][1];
        total += ty.total[s][0] + ty.total[s][1];
    }
    static const char *const rule_name[3] = {"coupled", "greedy", "rejection"};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int r = 0; r < 3; r++)
            printf("%-4s %-9s: %d/%d sequences with the CPU engine's decisions bit for bit\n",
                   bf16 ? "bf16" : "f32", rule_name[r], ty.rule_ok[r][bf16],
                   ty.rule_total[r][bf16]);
    for (int d = 0; d < BLOCKS_PER_PROMPT; d++)
        printf("drafter %-24s: drafts accepted: greedy %d/%d, coupled %d/%d, rejection %d/%d\n",
               DRAFTER_NAME[d], ty.accepted[1][d], ty.drafts[1][d], ty.accepted[0][d],
               ty.drafts[0][d], ty.accepted[2][d], ty.drafts[2][d]);
    printf("identity: %d/%d sequences on real logits bit for bit (%d tokens emitted, %d "
           "sequences refused by both engines)\n",
           total - fails, total, ty.emitted, ty.cpu_errors);
    printf("time: device launches %.2f s (uploads included), CPU engine %.2f s (with the fault "
           "check)\n",
           ty.device_s, ty.cpu_s);
    const int fault_ok = ty.fault_seen > 0;
    printf("fault check: the CPU engine with another seed disagrees with the device on %d of %d "
           "coupled / rejection sequences%s\n",
           ty.fault_seen, ty.faults, fault_ok ? "" : "  FAIL (the comparison sees nothing)");
    for (int b = 0; b < N_BLOCKS; b++) free(mr.blocks[b].q);
    free(group);
    free(cs);
    free(mr.rows);
    specd_tokenizer_destroy(mr.tok);
    fixture_close(mr.m, mr.ctx);
    if (fails || !fault_ok || total == 0) {
        printf("FAIL\n");
        return 1;
    }
    printf("ok\n");
    return 0;
}
