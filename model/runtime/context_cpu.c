/* The CPU backend's memory (cpu_backend.h): the F16 KV cache (in huge pages), the scratch for
 * n_batch tokens and the thread pool, sized once at creation so that an extend allocates nothing;
 * the LoRA scratch grows with the largest adapter set. */
#include "model/runtime/cpu_backend.h"

#include "common/alloc.h"
#include "common/pages.h"
#include "common/status_internal.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"

#include <string.h>

/* an activation row for m: llama.cpp's vec_dot type or, in fast numerics, a fast row */
static size_t xq_row(const rt_matrix *m, int fast) {
    const size_t f = fast ? specd_fast_row_bytes(m->type, m->n_in) : 0;
    return f > m->xq_row_bytes ? f : m->xq_row_bytes;
}

static size_t max_xq_row(const specd_model *m, int fast) {
    size_t mx = xq_row(&m->output, fast);
    for (int32_t l = 0; l < m->info.n_layer; l++)
        for (int p = 0; p < RT_N_PROJ; p++)
            if (xq_row(&m->layers[l].w[p], fast) > mx) mx = xq_row(&m->layers[l].w[p], fast);
    return (mx + 63) & ~(size_t)63;
}

static specd_status cpu_create(specd_context *c, specd_error *err) {
    const specd_context_params p = c->p;
    const specd_model *model = c->model;
    const specd_model_info *in = &model->info;
    specd_cpu_path path;
    char path_err[160];
    if (!specd_cpu_path_get(&path, path_err, sizeof path_err))
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: %s", path_err);
    c->simd = (int)path;
    c->fast = p.numerics == SPECD_NUMERICS_FAST;
    c->ops = c->fast ? &rt_cpu_ops_fast : &rt_cpu_ops_llama;
    int ok = 1;
    size_t total = c->total_bytes;
    size_t kv_elems = 0;
    if (!specd_mul_ok((size_t)p.n_seq * (size_t)in->n_layer * 2, (size_t)p.n_ctx, &kv_elems) ||
        !specd_mul_ok(kv_elems, c->kv_dim, &kv_elems))
        ok = 0;
    /* every step reads the whole live cache, each V^T row in a page of its own: huge pages */
    if (ok && specd_mul_ok(kv_elems, sizeof(uint16_t), &c->kv_bytes) &&
        (c->kv = specd_pages_alloc(c->kv_bytes)) != NULL)
        total += c->kv_bytes;
    else
        ok = 0;
    const size_t B = (size_t)p.n_batch, E = (size_t)in->n_embd;
    const size_t NQ = (size_t)in->n_head * (size_t)in->head_dim, F = (size_t)in->n_ff;
    const size_t half_rot = (size_t)in->n_rot / 2;
    c->rope_cos = rt_grab(B * half_rot + 1, sizeof(float), &total, &ok);
    c->rope_sin = rt_grab(B * half_rot + 1, sizeof(float), &total, &ok);
    c->x = rt_grab(B * E, sizeof(float), &total, &ok);
    c->xn = rt_grab(B * E, sizeof(float), &total, &ok);
    c->tmp = rt_grab(B * E, sizeof(float), &total, &ok);
    c->q = rt_grab(B * NQ, sizeof(float), &total, &ok);
    c->att = rt_grab(B * NQ, sizeof(float), &total, &ok);
    c->k = rt_grab(B * c->kv_dim, sizeof(float), &total, &ok);
    c->v = rt_grab(B * c->kv_dim, sizeof(float), &total, &ok);
    c->g = rt_grab(B * F, sizeof(float), &total, &ok);
    c->u = rt_grab(B * F, sizeof(float), &total, &ok);
    c->xq_stride = max_xq_row(model, c->fast);
    c->xq = rt_grab(B, c->xq_stride, &total, &ok);
    c->scores = rt_grab((size_t)p.n_threads * (size_t)p.n_ctx, sizeof(float), &total, &ok);
    c->probs_stride = ((size_t)p.n_ctx + 31) & ~(size_t)31; /* attention pads to 32 */
    c->probs = rt_grab((size_t)p.n_threads * c->probs_stride, sizeof(float), &total, &ok);
    c->att_work_stride = specd_attention_rows_work(ATT_TILE, p.n_ctx, model->info.head_dim);
    c->att_work = rt_grab((size_t)p.n_threads * c->att_work_stride, sizeof(float), &total, &ok);
    c->total_bytes = total;
    if (!ok)
        return specd_fail(err, SPECD_E_NOMEM,
                          "context: cannot allocate KV cache and scratch (n_seq %d, n_ctx %d, "
                          "n_batch %d)",
                          p.n_seq, p.n_ctx, p.n_batch);
    c->prof = rt_prof_create(p.n_threads);
    return specd_threadpool_create(p.n_threads, &c->pool, err);
}

static void cpu_destroy(specd_context *c) {
    specd_threadpool_destroy(c->pool);
    specd_pages_free(c->kv, c->kv_bytes);
    specd_free(c->rope_cos);
    specd_free(c->rope_sin);
    specd_free(c->x);
    specd_free(c->xn);
    specd_free(c->tmp);
    specd_free(c->q);
    specd_free(c->att);
    specd_free(c->k);
    specd_free(c->v);
    specd_free(c->g);
    specd_free(c->u);
    specd_free(c->xq);
    specd_free(c->scores);
    specd_free(c->probs);
    specd_free(c->att_work);
    specd_free(c->lora_scratch);
}

/* Each thread's LoRA scratch holds A x of the largest rank set so far. */
static specd_status cpu_set_lora(specd_context *c, const specd_lora *lora, specd_error *err) {
    if (!lora || lora->rank <= c->lora_rank_cap) return SPECD_OK;
    float *s = specd_alloc_array((size_t)c->n_threads * (size_t)lora->rank, sizeof(float));
    if (!s) return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
    specd_free(c->lora_scratch);
    c->lora_scratch = s;
    c->lora_rank_cap = lora->rank;
    return SPECD_OK;
}

static specd_status cpu_kv_compact(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                                   const int32_t *rows, specd_error *err) {
    (void)err; /* host memory moves cannot fail */
    const size_t rb = c->kv_dim * sizeof(uint16_t), n_ctx = (size_t)c->p.n_ctx;
    int32_t first_move = 0;
    while (first_move < n_rows && rows[first_move] == from + first_move)
        first_move++;
    if (first_move == n_rows) {
        c->kv_len[seq] = from + n_rows;
        return SPECD_OK;
    }
    for (int32_t l = 0; l < c->model->info.n_layer; l++) {
        uint16_t *kc = rt_kv_k(c, seq, l), *vt = rt_kv_vt(c, seq, l);
        for (int32_t j = first_move; j < n_rows; j++) {
            const size_t dst = (size_t)(from + j), src = (size_t)rows[j];
            memcpy(kc + dst * c->kv_dim, kc + src * c->kv_dim, rb);
        }
        for (size_t i = 0; i < c->kv_dim; i++) {
            uint16_t *col = vt + i * n_ctx;
            for (int32_t j = first_move; j < n_rows; j++)
                col[from + j] = col[rows[j]];
        }
    }
    c->kv_len[seq] = from + n_rows;
    return SPECD_OK;
}

static void cpu_device_memory(const specd_context *c, size_t *weights, size_t *kv,
                              size_t *scratch) {
    (void)c;
    if (weights) *weights = 0;
    if (kv) *kv = 0;
    if (scratch) *scratch = 0;
}

static int32_t cpu_device_launches(const specd_context *c) {
    (void)c;
    return 0;
}

static void cpu_graph_stats(const specd_context *c, specd_device_graph_stats *out) {
    (void)c;
    (void)out; /* no graphs: all zero */
}

const rt_backend rt_backend_cpu = {.name = "CPU",
                                   .device_logits = 0,
                                   .create = cpu_create,
                                   .destroy = cpu_destroy,
                                   .set_lora = cpu_set_lora,
                                   .extend = rt_cpu_extend,
                                   .kv_compact = cpu_kv_compact,
                                   .device_memory = cpu_device_memory,
                                   .device_launches = cpu_device_launches,
                                   .graph_stats = cpu_graph_stats};
