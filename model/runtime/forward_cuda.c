/* The CUDA backend's extend (model/runtime/cuda_backend.h): the forward recipe (recipe.c) over
 * libspecd_cuda.so's kernels on one stream. The step's token ids, positions, gates, KV
 * destinations, output rows, visibility masks and input vectors are written into a pinned
 * staging buffer and go up in at most three copies; the requested logits and hidden rows come
 * back, then one synchronisation reports any failure. The kernels between the upload and the
 * copies back run as one CUDA graph per step shape when graphs are on
 * (model/runtime/cuda_graph.h): captured the first time a shape runs, replayed after. Nothing is
 * allocated per step except a new shape's graph. Every kernel reduces an element in an order
 * fixed by the model's sizes, never by the batch, so a row's bits do not depend on the rows
 * beside it. */
#include "model/runtime/cuda_backend.h"

#include "common/log_internal.h"
#include "common/status_internal.h"

#include <math.h>
#include <stdatomic.h>
#include <string.h>

typedef struct step {
    const rt_step *s;
    specd_context *c;
    rt_cuda *g;
    int32_t n;      /* tokens */
    unsigned flags; /* enum rt_graph_flags of the step */
    int have; /* what xq holds: -1 nothing, else enum rt_cuda_vec of the rows last quantized */
    int32_t launches; /* kernels enqueued so far */
    int bucket_kv;    /* attention reads each sequence's length rounded up (a graph's shape) */
    const char *op;   /* the failing operation */
    int rc;           /* and its status */
} step;

#define IN(g, off, type) ((type *)((char *)(g)->in_dev + (g)->off))
#define STAGED(g, off, type) ((type *)((char *)(g)->in_host + (g)->off))
/* Enqueues call, counting the kernels it launches (benchmarks print launches per layer);
 * on failure records which operation failed and returns from the caller. */
#define ENQUEUE(st, what, call, kernels)                                                           \
    do {                                                                                           \
        const int rc_ = (call);                                                                    \
        if (rc_) {                                                                                 \
            (st)->op = (what);                                                                     \
            (st)->rc = rc_;                                                                        \
            return rc_;                                                                            \
        }                                                                                          \
        (st)->launches += (kernels);                                                               \
    } while (0)
#define RUN(st, what, call) ENQUEUE(st, what, call, 1)
#define COPY(st, what, call) ENQUEUE(st, what, call, 0)

/* The recipe's ops (recipe.h) on the device: each enqueues its kernels for all the step's rows
 * on the context's stream, which orders them, so there are no phases to meet at. */
static step *dev(rt_run *r) {
    return (step *)r;
}

static float *buf(const rt_cuda *g, rt_buf b) {
    switch (b) {
    case RT_BUF_X: return g->x;
    case RT_BUF_XN: return g->xn;
    case RT_BUF_TMP: return g->tmp;
    case RT_BUF_Q: return g->q;
    case RT_BUF_K: return g->k_rows;
    case RT_BUF_V: return g->v_rows;
    case RT_BUF_ATT: return g->att;
    case RT_BUF_G: return g->g;
    case RT_BUF_U: return g->u;
    case RT_BUF_LOGITS: return g->logits;
    }
    return NULL;
}

static const float *vec(const rt_cuda *g, int32_t l, rt_vec v) {
    return v == RT_OUTPUT_NORM ? g->output_norm : g->layers[l].vec[v];
}

/* what a failure reports */
static const char *const vec_op[] = {
    [RT_ATTN_NORM] = "rmsnorm",  [RT_FFN_NORM] = "rmsnorm (ffn)",
    [RT_Q_NORM] = "rmsnorm (q)", [RT_K_NORM] = "rmsnorm (k)",
    [RT_BQ] = "add (q bias)",    [RT_BK] = "add (k bias)",
    [RT_BV] = "add (v bias)",    [RT_OUTPUT_NORM] = "rmsnorm (output)"};

static rt_span share(rt_run *r, int32_t n, int32_t ways, int32_t way) {
    (void)r;
    (void)ways;
    (void)way;
    return (rt_span){0, n};
}

static void phase(rt_run *r, int prof_op) {
    (void)r;
    (void)prof_op;
}

static int embed(rt_run *r, rt_span sp) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const specd_model_info *in = &st->c->model->info;
    const int32_t E = in->n_embd;
    RUN(st, "embed",
        g->k->embed(g->tok_embd.type, g->tok_embd.data, in->n_vocab, E,
                    IN(g, off_ids, const int32_t) + sp.r0,
                    st->flags & RT_GRAPH_EMBD ? IN(g, off_embd, const float) + (size_t)sp.r0 * E
                                              : NULL,
                    E, g->x + (size_t)sp.r0 * E, E, sp.r1 - sp.r0, g->stream));
    return 0;
}

static int rmsnorm(rt_run *r, rt_span sp, rt_buf src, rt_buf dst, int32_t l, rt_vec v,
                   int32_t n_heads) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int64_t ld = rt_buf_width(st->c, src), hd = ld / n_heads;
    RUN(st, vec_op[v],
        g->k->rmsnorm(buf(g, src) + sp.r0 * ld, hd, vec(g, l, v), buf(g, dst) + sp.r0 * ld, hd,
                      (sp.r1 - sp.r0) * n_heads, (int32_t)hd, st->c->model->info.rms_eps,
                      g->stream));
    return 0;
}

static int add_vec(rt_run *r, rt_span sp, rt_buf dst, int32_t l, rt_vec v) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int64_t ld = rt_buf_width(st->c, dst);
    float *y = buf(g, dst) + sp.r0 * ld;
    RUN(st, vec_op[v],
        g->k->add(y, ld, vec(g, l, v), 0, y, ld, sp.r1 - sp.r0, (int32_t)ld, g->stream));
    return 0;
}

static int add(rt_run *r, rt_span sp, rt_buf a, rt_buf dst) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int64_t ld = rt_buf_width(st->c, dst);
    float *y = buf(g, dst) + sp.r0 * ld;
    RUN(st, "add (residual)",
        g->k->add(buf(g, a) + sp.r0 * ld, ld, y, ld, y, ld, sp.r1 - sp.r0, (int32_t)ld, g->stream));
    return 0;
}

static int rope(rt_run *r, rt_span sp, rt_buf x, int32_t n_heads) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const specd_model_info *in = &st->c->model->info;
    const int64_t ld = rt_buf_width(st->c, x);
    RUN(st, x == RT_BUF_Q ? "rope (q)" : "rope (k)",
        g->k->rope(buf(g, x) + sp.r0 * ld, ld, sp.r1 - sp.r0, IN(g, off_pos, const int32_t) + sp.r0,
                   n_heads, in->head_dim, in->n_rot, in->rope_freq_base,
                   in->arch != SPECD_ARCH_LLAMA, g->stream));
    return 0;
}

/* K planes [layer] then V planes [layer], each [seq][n_ctx][kv_dim] (rows at kv_dst). */
static int store_kv(rt_run *r, rt_span sp, int32_t l, rt_buf b) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int32_t NKV = (int32_t)st->c->kv_dim;
    const size_t plane = (size_t)(b == RT_BUF_V ? g->n_layers + l : l) * g->kv_plane;
    RUN(st, b == RT_BUF_K ? "store_f16 (k)" : "store_f16 (v)",
        g->k->store_f16(buf(g, b) + (int64_t)sp.r0 * NKV, NKV, sp.r1 - sp.r0, NKV,
                        IN(g, off_kv_dst, const int32_t) + sp.r0, g->kv + plane, NKV, g->stream));
    return 0;
}

/* The matmul quantizes its input itself, once for the matrices that share it: a new input
 * starts here. */
static int prepare(rt_run *r, rt_span sp, int32_t l, int proj, rt_buf src) {
    (void)sp;
    (void)l;
    (void)proj;
    (void)src;
    dev(r)->have = -1;
    return 0;
}

/* y = W x for n rows, quantizing x first unless xq already holds it for this kind. */
static int matmul(rt_run *r, int32_t n, int32_t l, int proj, rt_buf src, rt_buf dst) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const specd_cuda_kernels *k = g->k;
    void *s = g->stream;
    const rt_cuda_matrix *w = proj == RT_HEAD ? &g->output : &g->layers[l].w[proj];
    const float *x = buf(g, src);
    float *y = buf(g, dst);
    const int64_t ld_x = rt_buf_width(st->c, src), ld_y = rt_buf_width(st->c, dst);
    if (w->vec == RT_VEC_F) {
        RUN(st, "matmul_f",
            k->matmul_f(w->type, w->data, w->n_in, w->n_out, x, ld_x, n, y, ld_y, s));
        return 0;
    }
    if (st->have != w->vec) {
        if (w->vec == RT_VEC_Q8)
            RUN(st, "quantize_q8", k->quantize_q8(x, ld_x, n, w->n_in, g->xq, s));
        else
            RUN(st, "quantize_q8_k", k->quantize_q8_k(x, ld_x, n, w->n_in, g->xq, s));
        st->have = w->vec;
    }
    if (w->vec == RT_VEC_Q8)
        RUN(st, "matmul_q", k->matmul_q(w->type, w->data, w->n_in, w->n_out, g->xq, n, y, ld_y, s));
    else
        RUN(st, "matmul_k", k->matmul_k(w->type, w->data, w->n_in, w->n_out, g->xq, n, y, ld_y, s));
    return 0;
}

/* y += gate * scale * B (A x) for the rows with a non-zero gate (the kernel skips the others). */
static int lora(rt_run *r, rt_span sp, int32_t l, int proj, rt_buf src, rt_buf dst) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    if (!st->s->any_gate || !g->lora_pairs) return 0;
    const rt_cuda_lora_pair *pr = &g->lora_pairs[(size_t)l * RT_N_PROJ + (size_t)proj];
    if (!pr->a) return 0;
    const specd_lora *lo = st->c->lora;
    const int64_t ld_x = rt_buf_width(st->c, src), ld_y = rt_buf_width(st->c, dst);
    ENQUEUE(st, "lora",
            g->k->lora(pr->a, pr->b, (int32_t)lo->n_in[proj], (int32_t)lo->n_out[proj],
                       g->lora_rank, g->lora_scale, buf(g, src) + sp.r0 * ld_x, ld_x,
                       IN(g, off_gate, const float) + sp.r0, sp.r1 - sp.r0,
                       buf(g, dst) + sp.r0 * ld_y, ld_y, g->lora_work, g->lora_work_floats,
                       g->stream),
            2); /* down and up */
    return 0;
}

static int attention(rt_run *r, int32_t l) {
    step *st = dev(r);
    specd_context *c = st->c;
    rt_cuda *g = st->g;
    const specd_model_info *in = &c->model->info;
    const int64_t hd = in->head_dim, NQ = (int64_t)in->n_head * hd;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int32_t t0 = 0, t1; t0 < st->n; t0 = t1) {
        int32_t n_kv = c->tok[t0].n_pos;
        for (t1 = t0 + 1; t1 < st->n && c->tok[t1].seq == c->tok[t0].seq; t1++)
            if (c->tok[t1].n_pos > n_kv) n_kv = c->tok[t1].n_pos;
        if (st->bucket_kv) n_kv = rt_graph_kv_bucket(n_kv, SPECD_CUDA_ATTN_SPLIT, c->p.n_ctx);
        const size_t base = ((size_t)l * (size_t)c->p.n_seq + (size_t)c->tok[t0].seq) *
                            (size_t)c->p.n_ctx * c->kv_dim;
        const specd_cuda_attention_args a = {
            .q = g->q + (int64_t)t0 * NQ,
            .ld_q = NQ,
            .k = g->kv + base,
            .k_pos_stride = (int64_t)c->kv_dim,
            .k_head_stride = hd,
            .v = g->kv + (size_t)g->n_layers * g->kv_plane + base,
            .v_pos_stride = (int64_t)c->kv_dim,
            .v_head_stride = hd,
            .v_dim_stride = 1,
            .visible = IN(g, off_mask, const uint32_t) + (size_t)t0 * (size_t)g->mask_words,
            .mask_words = g->mask_words,
            .n_rows = t1 - t0,
            .n_heads = in->n_head,
            .n_kv_heads = in->n_head_kv,
            .head_dim = in->head_dim,
            .n_kv = n_kv,
            .scale = scale,
            .out = g->att + (int64_t)t0 * NQ,
            .ld_out = NQ,
            .work = g->att_work,
            .work_floats = g->att_work_floats,
        };
        ENQUEUE(st, "attention", g->k->attention(&a, g->stream), 2); /* split and merge */
    }
    return 0;
}

static int swiglu(rt_run *r, rt_span sp) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int64_t F = st->c->model->info.n_ff;
    float *gr = g->g + sp.r0 * F;
    RUN(st, "swiglu",
        g->k->swiglu(gr, F, g->u + sp.r0 * F, F, gr, F, sp.r1 - sp.r0, (int32_t)F, g->stream));
    return 0;
}

static int gather(rt_run *r, rt_span sp, rt_buf src, rt_buf dst) {
    step *st = dev(r);
    rt_cuda *g = st->g;
    const int64_t ld = rt_buf_width(st->c, src);
    RUN(st, "gather",
        g->k->gather(buf(g, src), ld, IN(g, off_out, const int32_t) + sp.r0, sp.r1 - sp.r0,
                     (int32_t)ld, buf(g, dst) + sp.r0 * ld, ld, g->stream));
    return 0;
}

/* The hidden rows go back with the logits after the kernels (copy_back): the caller's buffer
 * changes from step to step, and a step graph holds only device work. */
static int hidden(rt_run *r, rt_span sp) {
    (void)r;
    (void)sp;
    return 0;
}

static const rt_ops cuda_ops = {.name = "cuda",
                                .share = share,
                                .mark = phase,
                                .sync = phase,
                                .embed = embed,
                                .rmsnorm = rmsnorm,
                                .add_vec = add_vec,
                                .add = add,
                                .rope = rope,
                                .store_kv = store_kv,
                                .prepare = prepare,
                                .matmul = matmul,
                                .lora = lora,
                                .attention = attention,
                                .swiglu = swiglu,
                                .gather = gather,
                                .hidden = hidden};

/* Row r's visibility bits: its own row packed, or positions 0..l0 + i (causal). */
static void stage_mask(const rt_cuda *g, const rt_token *t, uint32_t *words) {
    memset(words, 0, (size_t)g->mask_words * sizeof(uint32_t));
    if (t->visible) {
        const int32_t n_pos = t->l0 + t->n_new;
        (void)specd_cuda_pack_visibility(t->visible, (size_t)n_pos, 1, n_pos, words, g->mask_words);
        return;
    }
    const int32_t n_pos = t->l0 + t->i + 1;
    for (int32_t w = 0; w < n_pos / 32; w++)
        words[w] = 0xffffffffu;
    if (n_pos % 32) words[n_pos / 32] = (1u << (n_pos % 32)) - 1u;
}

/* Fills the staging buffer and enqueues its copies; returns whether a row is a float vector. */
static int stage(step *st, int32_t n_out, const int32_t *out_rows, int *any_embd) {
    specd_context *c = st->c;
    rt_cuda *g = st->g;
    const int32_t E = c->model->info.n_embd;
    int32_t *ids = STAGED(g, off_ids, int32_t), *pos = STAGED(g, off_pos, int32_t);
    float *gate = STAGED(g, off_gate, float);
    int32_t *dst = STAGED(g, off_kv_dst, int32_t), *outr = STAGED(g, off_out, int32_t);
    float *embd = STAGED(g, off_embd, float);
    *any_embd = 0;
    for (int32_t r = 0; r < st->n; r++) {
        const rt_token *t = &c->tok[r];
        ids[r] = t->embd ? -1 : t->token;
        pos[r] = t->pos;
        gate[r] = t->gate;
        dst[r] = t->seq * c->p.n_ctx + t->l0 + t->i;
        stage_mask(g, t, STAGED(g, off_mask, uint32_t) + (size_t)r * (size_t)g->mask_words);
        if (t->embd) {
            memcpy(embd + (size_t)r * (size_t)E, t->embd, (size_t)E * sizeof(float));
            *any_embd = 1;
        }
    }
    for (int32_t j = 0; j < n_out; j++)
        outr[j] = out_rows[j];
    const specd_cudart *rt = g->rt;
    COPY(st, "cudaMemcpyAsync (inputs)",
         rt->memcpy_async(g->in_dev, g->in_host, g->ints_bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE,
                          g->stream));
    COPY(st, "cudaMemcpyAsync (masks)",
         rt->memcpy_async((char *)g->in_dev + g->off_mask, (char *)g->in_host + g->off_mask,
                          (size_t)st->n * (size_t)g->mask_words * sizeof(uint32_t),
                          SPECD_CUDA_MEMCPY_HOST_TO_DEVICE, g->stream));
    if (*any_embd)
        COPY(st, "cudaMemcpyAsync (input vectors)",
             rt->memcpy_async((char *)g->in_dev + g->off_embd, (char *)g->in_host + g->off_embd,
                              (size_t)st->n * (size_t)E * sizeof(float),
                              SPECD_CUDA_MEMCPY_HOST_TO_DEVICE, g->stream));
    return 0;
}

/* The step's kernels, from the embedding to the output head: what a step graph holds. */
static int kernels(step *st) {
    return rt_forward_recipe(&cuda_ops, (rt_run *)st, st->s) ? -1 : 0;
}

/* The requested rows back to the host (the output head left xn as it was). */
static int copy_back(step *st, int32_t n_out, float *logits, float *hidden) {
    rt_cuda *g = st->g;
    const specd_model_info *in = &st->c->model->info;
    if (n_out > 0 && hidden)
        COPY(st, "cudaMemcpyAsync (hidden)",
             g->rt->memcpy_async(hidden, g->xn, (size_t)n_out * (size_t)in->n_embd * sizeof(float),
                                 SPECD_CUDA_MEMCPY_DEVICE_TO_HOST, g->stream));
    if (n_out > 0 && logits)
        COPY(st, "cudaMemcpyAsync (logits)",
             g->rt->memcpy_async(logits, g->logits,
                                 (size_t)n_out * (size_t)in->n_vocab * sizeof(float),
                                 SPECD_CUDA_MEMCPY_DEVICE_TO_HOST, g->stream));
    return 0;
}

/* The step's graph key: its shape, and each sequence's rows and rounded attention length. */
static int graph_key(const step *st, rt_graph_key *k) {
    const specd_context *c = st->c;
    const rt_cuda *g = st->g;
    rt_graph_key_begin(k, g->graph_key, g->graph_key_cap, st->n, st->s->n_out, g->n_layers,
                       st->flags);
    for (int32_t t0 = 0, t1; t0 < st->n; t0 = t1) {
        int32_t n_kv = c->tok[t0].n_pos;
        for (t1 = t0 + 1; t1 < st->n && c->tok[t1].seq == c->tok[t0].seq; t1++)
            if (c->tok[t1].n_pos > n_kv) n_kv = c->tok[t1].n_pos;
        if (rt_graph_key_add_seq(k, c->tok[t0].seq, t1 - t0,
                                 rt_graph_kv_bucket(n_kv, SPECD_CUDA_ATTN_SPLIT, c->p.n_ctx)))
            return -1;
    }
    return 0;
}

/* Gives up on graphs for this context after a capture failed (the step then launches its
 * kernels directly); the first time in the process, says so. */
static void graphs_fail(rt_cuda *g, const char *what, int rc) {
    static atomic_int warned;
    g->graphs_on = 0;
    g->graph_fallbacks++;
    rt_graph_cache_clear(&g->graphs);
    (void)g->rt->get_last_error(); /* a failed capture may leave its error behind */
    if (atomic_exchange(&warned, 1) == 0)
        specd_log(SPECD_LOG_WARN,
                  "cuda: %s failed (CUDA error %d, %s): steps launch their kernels directly "
                  "(CUDA graphs off for this context; SPECD_CUDA_GRAPHS=0 turns them off)",
                  what, rc, g->rt->get_error_string(rc));
}

/* Captures the step's kernels into a new graph and caches it; NULL when the capture failed
 * (graphs are then off, nothing was launched). */
static rt_graph_entry *capture(step *st, const rt_graph_key *k) {
    rt_cuda *g = st->g;
    const specd_cudart *rt = g->rt;
    int rc = rt->stream_begin_capture(g->stream, SPECD_CUDA_CAPTURE_THREAD_LOCAL);
    if (rc) {
        graphs_fail(g, "cudaStreamBeginCapture", rc);
        return NULL;
    }
    const int32_t before = st->launches;
    const int failed = kernels(st);
    void *graph = NULL, *exec = NULL;
    rc = rt->stream_end_capture(g->stream, &graph);
    if (failed || rc || !graph) {
        if (graph) (void)rt->graph_destroy(graph);
        graphs_fail(g, failed ? st->op : "cudaStreamEndCapture", failed ? st->rc : rc ? rc : -1);
        st->launches = before;
        st->op = NULL;
        st->rc = 0;
        return NULL;
    }
    rc = rt->graph_instantiate_with_flags(&exec, graph, 0);
    (void)rt->graph_destroy(graph);
    if (rc) {
        graphs_fail(g, "cudaGraphInstantiateWithFlags", rc);
        st->launches = before;
        return NULL;
    }
    g->graph_captures++;
    rt_graph_entry *e = rt_graph_cache_put(&g->graphs, k, exec, st->launches - before);
    st->launches = before;
    return e;
}

/* The step's kernels as a graph: 1 when they were enqueued so, 0 to launch them directly (no
 * graph for this step), -1 when the graph's launch failed (st->op, st->rc). */
static int run_graph(step *st) {
    rt_cuda *g = st->g;
    rt_graph_key k;
    if (!g->graphs_on || graph_key(st, &k)) return 0;
    st->bucket_kv = 1;
    rt_graph_entry *e = rt_graph_cache_find(&g->graphs, &k);
    if (!e) e = capture(st, &k);
    st->bucket_kv = 0;
    if (!e) return 0; /* out of memory caching it, or graphs just turned off */
    const int rc = g->rt->graph_launch(e->exec, g->stream);
    if (rc) {
        rt_graph_cache_remove(&g->graphs, e);
        st->op = "cudaGraphLaunch";
        st->rc = rc;
        return -1;
    }
    st->launches += e->kernels;
    g->graph_replays++;
    return 1;
}

static int forward(step *st, int *graphed) {
    const rt_step *s = st->s;
    int any_embd = 0;
    *graphed = 0;
    if (stage(st, s->n_out, s->out_rows, &any_embd)) return -1;
    /* forward.c asks for output rows only when something reads them */
    if (s->n_out > 0) st->flags |= RT_GRAPH_OUTPUT;
    if (s->logits) st->flags |= RT_GRAPH_LOGITS;
    if (st->s->any_gate && st->g->lora_pairs) st->flags |= RT_GRAPH_LORA;
    if (any_embd) st->flags |= RT_GRAPH_EMBD;
    const int r = run_graph(st);
    if (r < 0) return -1;
    *graphed = r;
    if (!r && kernels(st)) return -1;
    return copy_back(st, s->n_out, s->host_logits, s->hidden);
}

specd_status rt_cuda_extend(const rt_step *s, specd_error *err) {
    specd_context *c = s->c;
    rt_cuda *g = c->cuda;
    step st = {.s = s, .c = c, .g = g, .n = s->n_tok, .have = -1, .op = "cudaSetDevice"};
    int graphed = 0;
    int rc = g->rt->set_device(g->device);
    if (rc)
        st.rc = rc;
    else if (forward(&st, &graphed))
        rc = st.rc;
    if (rc) {
        /* drain what was enqueued: the staging buffer may not be rewritten under a copy */
        (void)g->rt->stream_synchronize(g->stream);
        return rt_cuda_fail(g, err, st.op, st.rc);
    }
    rc = g->rt->stream_synchronize(g->stream);
    if (rc) {
        /* a graph that failed while running is not trusted again: the shape is captured anew */
        if (graphed) rt_graph_cache_clear(&g->graphs);
        return rt_cuda_fail(g, err, "the step (a kernel failed while running)", rc);
    }
    g->last_launches = st.launches;
    g->last_host_launches = graphed ? 1 : st.launches;
    g->last_graphed = graphed;
    if (s->device_logits && s->n_out > 0) *s->device_logits = g->logits;
    return SPECD_OK;
}

specd_status rt_cuda_kv_compact(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                                const int32_t *rows, specd_error *err) {
    rt_cuda *g = c->cuda;
    int32_t first = 0;
    while (first < n_rows && rows[first] == from + first)
        first++;
    if (first < n_rows) {
        const int32_t n = n_rows - first;
        int32_t *src = STAGED(g, off_src, int32_t), *dst = STAGED(g, off_dst, int32_t);
        for (int32_t j = 0; j < n; j++) {
            src[j] = rows[first + j];
            dst[j] = from + first + j;
        }
        int rc = g->rt->set_device(g->device);
        const char *what = "cudaMemcpyAsync (row lists)";
        if (!rc)
            rc = g->rt->memcpy_async((char *)g->in_dev + g->off_src, src,
                                     (size_t)n * sizeof(int32_t), SPECD_CUDA_MEMCPY_HOST_TO_DEVICE,
                                     g->stream);
        if (!rc)
            rc = g->rt->memcpy_async((char *)g->in_dev + g->off_dst, dst,
                                     (size_t)n * sizeof(int32_t), SPECD_CUDA_MEMCPY_HOST_TO_DEVICE,
                                     g->stream);
        if (!rc) {
            what = "move_rows_f16";
            rc = g->k->move_rows_f16(g->kv + (size_t)seq * (size_t)c->p.n_ctx * c->kv_dim,
                                     (int64_t)g->kv_plane, 2 * g->n_layers, (int64_t)c->kv_dim,
                                     (int32_t)c->kv_dim, IN(g, off_src, const int32_t),
                                     IN(g, off_dst, const int32_t), n, g->stream);
        }
        if (!rc) {
            what = "the KV row moves";
            rc = g->rt->stream_synchronize(g->stream);
        }
        if (rc) {
            (void)g->rt->stream_synchronize(g->stream);
            return rt_cuda_fail(g, err, what, rc);
        }
    }
    c->kv_len[seq] = from + n_rows;
    return SPECD_OK;
}
