/* The forward pass of an extend, once for every backend (recipe.h). Op order follows llama.cpp's
 * llm_build_llama / qwen2 / qwen3 graphs; every element goes through the same ops in the same
 * order on every backend, which is what makes a device's rows the CPU's bit for bit. The phases
 * (sync) are where the CPU's threads meet: between them each thread runs the ops on its own rows
 * and needs no barrier. */
#include "model/runtime/recipe.h"

#define DO(call)                                                                                   \
    do {                                                                                           \
        const int rc_ = (call);                                                                    \
        if (rc_) return rc_;                                                                       \
    } while (0)

int64_t rt_buf_width(const specd_context *c, rt_buf b) {
    const specd_model_info *in = &c->model->info;
    switch (b) {
    case RT_BUF_Q:
    case RT_BUF_ATT: return (int64_t)in->n_head * in->head_dim;
    case RT_BUF_K:
    case RT_BUF_V: return (int64_t)c->kv_dim;
    case RT_BUF_G:
    case RT_BUF_U: return in->n_ff;
    case RT_BUF_LOGITS: return in->n_vocab;
    default: return in->n_embd;
    }
}

const float *rt_model_vec(const specd_model *m, int32_t l, rt_vec v) {
    if (v == RT_OUTPUT_NORM) return m->output_norm;
    const rt_layer *L = &m->layers[l];
    switch (v) {
    case RT_ATTN_NORM: return L->attn_norm;
    case RT_FFN_NORM: return L->ffn_norm;
    case RT_Q_NORM: return L->q_norm;
    case RT_K_NORM: return L->k_norm;
    case RT_BQ: return L->bq;
    case RT_BK: return L->bk;
    default: return L->bv;
    }
}

int64_t rt_vec_len(const specd_model_info *in, rt_vec v) {
    switch (v) {
    case RT_Q_NORM:
    case RT_K_NORM: return in->head_dim;
    case RT_BQ: return (int64_t)in->n_head * in->head_dim;
    case RT_BK:
    case RT_BV: return (int64_t)in->n_head_kv * in->head_dim;
    default: return in->n_embd;
    }
}

/* Whether a LoRA pair adapts this projection for some row of the step (the gates then choose
 * the rows). The adapter is read only when a gate asks for it: validation made sure one is set
 * then, and a step without gates must not touch an adapter its caller may have let go. */
static int adapted(const rt_step *st, int32_t l, int proj) {
    const specd_lora *lo = st->c->lora;
    return st->any_gate && lo && lo->pairs[(size_t)l * RT_N_PROJ + (size_t)proj].a;
}

static int lora(const rt_ops *B, rt_run *r, const rt_step *st, rt_span s, int32_t l, int proj,
                rt_buf src, rt_buf dst) {
    return adapted(st, l, proj) ? B->lora(r, s, l, proj, src, dst) : 0;
}

/* After Q, K and V's projections: LoRA, bias, QK norm, RoPE, and K and V into the cache. The
 * three chains are independent, so a decode's single row still splits across the CPU's
 * threads. */
static int qkv_rows(const rt_ops *B, rt_run *r, const rt_step *st, int32_t l) {
    const specd_context *c = st->c;
    const specd_model *m = c->model;
    const specd_model_info *in = &m->info;
    const rt_span q = B->share(r, st->n_tok, 3, 0), k = B->share(r, st->n_tok, 3, 1),
                  v = B->share(r, st->n_tok, 3, 2);
    DO(lora(B, r, st, q, l, RT_Q, RT_BUF_XN, RT_BUF_Q));
    if (rt_model_vec(m, l, RT_BQ)) DO(B->add_vec(r, q, RT_BUF_Q, l, RT_BQ));
    if (rt_model_vec(m, l, RT_Q_NORM))
        DO(B->rmsnorm(r, q, RT_BUF_Q, RT_BUF_Q, l, RT_Q_NORM, in->n_head));
    DO(B->rope(r, q, RT_BUF_Q, in->n_head));
    DO(lora(B, r, st, k, l, RT_K, RT_BUF_XN, RT_BUF_K));
    if (rt_model_vec(m, l, RT_BK)) DO(B->add_vec(r, k, RT_BUF_K, l, RT_BK));
    if (rt_model_vec(m, l, RT_K_NORM))
        DO(B->rmsnorm(r, k, RT_BUF_K, RT_BUF_K, l, RT_K_NORM, in->n_head_kv));
    DO(B->rope(r, k, RT_BUF_K, in->n_head_kv));
    DO(B->store_kv(r, k, l, RT_BUF_K));
    DO(lora(B, r, st, v, l, RT_V, RT_BUF_XN, RT_BUF_V));
    if (rt_model_vec(m, l, RT_BV)) DO(B->add_vec(r, v, RT_BUF_V, l, RT_BV));
    DO(B->store_kv(r, v, l, RT_BUF_V));
    return 0;
}

/* dst = W src for the step's rows: src prepared by each caller's rows, then multiplied. */
static int project(const rt_ops *B, rt_run *r, const rt_step *st, rt_span rows, int32_t l, int proj,
                   rt_buf src, rt_buf dst, int prof_op) {
    DO(B->prepare(r, rows, l, proj, src));
    B->sync(r, PR_QUANT);
    DO(B->matmul(r, st->n_tok, l, proj, src, dst));
    B->sync(r, prof_op);
    return 0;
}

static int layer(const rt_ops *B, rt_run *r, const rt_step *st, int32_t l, int last) {
    const int32_t n = st->n_tok;
    const rt_span rows = B->share(r, n, 1, 0);
    DO(B->rmsnorm(r, rows, RT_BUF_X, RT_BUF_XN, l, RT_ATTN_NORM, 1));
    B->mark(r, PR_NORM);
    /* Q, K and V share one preparation: their types share a vec_dot type (checked at load) */
    DO(B->prepare(r, rows, l, RT_Q, RT_BUF_XN));
    B->sync(r, PR_QUANT);
    DO(B->matmul(r, n, l, RT_Q, RT_BUF_XN, RT_BUF_Q));
    DO(B->matmul(r, n, l, RT_K, RT_BUF_XN, RT_BUF_K));
    DO(B->matmul(r, n, l, RT_V, RT_BUF_XN, RT_BUF_V));
    B->sync(r, PR_MM_QKV);
    DO(qkv_rows(B, r, st, l));
    B->sync(r, PR_ROPE_KV);
    DO(B->attention(r, l));
    B->sync(r, PR_ATTN);
    DO(project(B, r, st, rows, l, RT_O, RT_BUF_ATT, RT_BUF_TMP, PR_MM_O));
    DO(lora(B, r, st, rows, l, RT_O, RT_BUF_ATT, RT_BUF_TMP));
    DO(B->add(r, rows, RT_BUF_TMP, RT_BUF_X));
    DO(B->rmsnorm(r, rows, RT_BUF_X, RT_BUF_XN, l, RT_FFN_NORM, 1));
    B->mark(r, PR_NORM);
    DO(B->prepare(r, rows, l, RT_GATE, RT_BUF_XN));
    B->sync(r, PR_QUANT);
    DO(B->matmul(r, n, l, RT_GATE, RT_BUF_XN, RT_BUF_G));
    DO(B->matmul(r, n, l, RT_UP, RT_BUF_XN, RT_BUF_U));
    B->sync(r, PR_MM_GU);
    DO(lora(B, r, st, rows, l, RT_GATE, RT_BUF_XN, RT_BUF_G));
    DO(lora(B, r, st, rows, l, RT_UP, RT_BUF_XN, RT_BUF_U));
    DO(B->swiglu(r, rows));
    B->mark(r, PR_SWIGLU);
    DO(project(B, r, st, rows, l, RT_DOWN, RT_BUF_G, RT_BUF_TMP, PR_MM_DOWN));
    DO(lora(B, r, st, rows, l, RT_DOWN, RT_BUF_G, RT_BUF_TMP));
    DO(B->add(r, rows, RT_BUF_TMP, RT_BUF_X));
    /* the next layer's first phase reads and writes only these rows, with this caller, so it
     * needs no barrier; the output rows are split otherwise */
    if (last)
        B->sync(r, PR_NORM);
    else
        B->mark(r, PR_NORM);
    return 0;
}

int rt_forward_recipe(const rt_ops *B, rt_run *r, const rt_step *st) {
    const specd_context *c = st->c;
    DO(B->embed(r, B->share(r, st->n_tok, 1, 0)));
    B->mark(r, PR_EMBED);
    const int32_t n_layers = c->p.n_layers > 0 ? c->p.n_layers : c->model->info.n_layer;
    for (int32_t l = 0; l < n_layers; l++)
        DO(layer(B, r, st, l, l + 1 == n_layers));
    if (st->n_out == 0) return 0;
    /* output norm and head for the requested rows only (RT_BUF_TMP and RT_BUF_XN are free) */
    const rt_span o = B->share(r, st->n_out, 1, 0);
    DO(B->gather(r, o, RT_BUF_X, RT_BUF_TMP));
    DO(B->rmsnorm(r, o, RT_BUF_TMP, RT_BUF_XN, -1, RT_OUTPUT_NORM, 1));
    DO(B->hidden(r, o));
    B->mark(r, PR_NORM);
    if (!st->logits) return 0;
    DO(B->prepare(r, o, -1, RT_HEAD, RT_BUF_XN));
    B->sync(r, PR_QUANT);
    DO(B->matmul(r, st->n_out, -1, RT_HEAD, RT_BUF_XN, RT_BUF_LOGITS));
    B->mark(r, PR_HEAD);
    return 0;
}
