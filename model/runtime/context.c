#include "model/runtime/runtime_internal.h"

#include "model/runtime/cuda_backend.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/cpu_dispatch.h"
#include "kernels/cpu/matmul_fast.h"
#include "kernels/cpu/ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

rt_prof *rt_prof_create(int n_threads) {
    const char *e = getenv("SPECD_PROFILE");
    if (!e || !*e || strcmp(e, "0") == 0) return NULL;
    rt_prof *p = specd_alloc_array(1, sizeof *p);
    if (!p) return NULL;
    p->th = specd_alloc_array((size_t)n_threads, sizeof *p->th);
    if (!p->th) {
        specd_free(p);
        return NULL;
    }
    p->n_threads = n_threads;
    p->cpu_time = strcmp(e, "cpu") == 0;
    return p;
}

/* One table per extend size seen: per op, each thread's milliseconds per extend, and thread 0's
 * share of the extend's wall time ("other": validation, commit, the dispatch itself). */
void rt_prof_destroy(rt_prof *p) {
    if (!p) return;
    static const char *names[PR_N] = {"embed", "norm",    "quant", "mm_qkv", "rope_kv",
                                      "attn",  "mm_o",    "mm_gu", "swiglu", "mm_down",
                                      "head",  "barrier", "wake"};
    for (int b = 0; b < PR_BUCKETS; b++) {
        if (!p->calls[b]) continue;
        const double n = (double)p->calls[b], wall = (double)p->wall_ns[b] / n * 1e-6;
        fprintf(stderr,
                "specd profile: extends of %llu tokens: %llu calls, %.3f ms each (wall)%s\n",
                (unsigned long long)(p->tokens[b] / p->calls[b]), (unsigned long long)p->calls[b],
                wall, p->cpu_time ? ", ops in thread CPU time" : "");
        fprintf(stderr, "  %-8s", "op");
        for (int t = 0; t < p->n_threads; t++)
            fprintf(stderr, "   t%d ms", t);
        fprintf(stderr, "  t0 %%wall\n");
        double t0_sum = 0.0;
        for (int o = 0; o < PR_N; o++) {
            fprintf(stderr, "  %-8s", names[o]);
            for (int t = 0; t < p->n_threads; t++)
                fprintf(stderr, " %8.3f", (double)p->th[t].ns[b][o] / n * 1e-6);
            const double t0 = (double)p->th[0].ns[b][o] / n * 1e-6;
            t0_sum += t0;
            fprintf(stderr, "  %7.1f\n", wall > 0 ? 100.0 * t0 / wall : 0.0);
        }
        fprintf(stderr, "  %-8s %8.3f%*s  %7.1f\n", "other", wall - t0_sum, 9 * (p->n_threads - 1),
                "", wall > 0 ? 100.0 * (wall - t0_sum) / wall : 0.0);
    }
    specd_free(p->th);
    specd_free(p);
}

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

/* Allocates n x size bytes, adding them to *total; NULL (and *ok = 0) on overflow or failure. */
static void *grab(size_t n, size_t size, size_t *total, int *ok) {
    size_t b;
    if (!*ok || !specd_mul_ok(n, size, &b)) {
        *ok = 0;
        return NULL;
    }
    void *p = specd_alloc_array(n, size);
    if (!p) {
        *ok = 0;
        return NULL;
    }
    *total += b;
    return p;
}

specd_status specd_context_create(const specd_model *model, const specd_context_params *params,
                                  specd_context **out, specd_error *err) {
    if (!model || !out)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: model or out is NULL");
    specd_context_params p = params ? *params : specd_context_default_params();
    if (p.n_threads == 0) p.n_threads = specd_threadpool_online_cores();
    if (p.n_seq < 1 || p.n_seq > 4096)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: n_seq %d not in 1..4096", p.n_seq);
    if (p.n_ctx < 1 || p.n_ctx > (1 << 24))
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: n_ctx %d not in 1..2^24", p.n_ctx);
    if (p.n_batch < 1 || p.n_batch > (1 << 20))
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: n_batch %d not in 1..2^20",
                          p.n_batch);
    if (p.n_threads < 1 || p.n_threads > 1024)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: n_threads %d not in 0..1024",
                          p.n_threads);
    if (p.device == -1)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "context: SPECD_DEVICE '%s' is not one of cpu, cuda, cuda:N",
                          getenv("SPECD_DEVICE") ? getenv("SPECD_DEVICE") : "");
    if (p.numerics == -1)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "context: SPECD_NUMERICS '%s' is not one of fast, llama",
                          getenv("SPECD_NUMERICS") ? getenv("SPECD_NUMERICS") : "");
    if (p.numerics != SPECD_NUMERICS_FAST && p.numerics != SPECD_NUMERICS_LLAMA)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: numerics %d is not fast or llama",
                          p.numerics);
    if (p.device != SPECD_DEVICE_CPU && p.device != SPECD_DEVICE_CUDA)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: device %d is not cpu or cuda",
                          p.device);
    const specd_model_info *in = &model->info;
    if (p.n_layers < 0 || p.n_layers > in->n_layer)
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: n_layers %d not in 0..%d", p.n_layers,
                          in->n_layer);
    if (p.device == SPECD_DEVICE_CUDA) return rt_cuda_context_create(model, &p, out, err);
    specd_cpu_path path;
    char path_err[160];
    if (!specd_cpu_path_get(&path, path_err, sizeof path_err))
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: %s", path_err);
    specd_context *c = specd_alloc_array(1, sizeof *c);
    if (!c) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
    c->model = model;
    c->p = p;
    c->n_threads = p.n_threads;
    c->simd = (int)path;
    c->fast = p.numerics == SPECD_NUMERICS_FAST;
    c->kv_dim = (size_t)in->n_head_kv * (size_t)in->head_dim;
    int ok = 1;
    size_t total = sizeof *c;
    size_t kv_elems = 0;
    if (!specd_mul_ok((size_t)p.n_seq * (size_t)in->n_layer * 2, (size_t)p.n_ctx, &kv_elems) ||
        !specd_mul_ok(kv_elems, c->kv_dim, &kv_elems))
        ok = 0;
    c->kv = grab(kv_elems, sizeof(uint16_t), &total, &ok);
    c->kv_bytes = total - sizeof *c;
    c->kv_len = grab((size_t)p.n_seq, sizeof(int32_t), &total, &ok);
    const size_t B = (size_t)p.n_batch, E = (size_t)in->n_embd;
    const size_t NQ = (size_t)in->n_head * (size_t)in->head_dim, F = (size_t)in->n_ff;
    c->tok = grab(B, sizeof(rt_token), &total, &ok);
    const size_t half_rot = (size_t)in->n_rot / 2;
    c->rope_cos = grab(B * half_rot + 1, sizeof(float), &total, &ok);
    c->rope_sin = grab(B * half_rot + 1, sizeof(float), &total, &ok);
    c->x = grab(B * E, sizeof(float), &total, &ok);
    c->xn = grab(B * E, sizeof(float), &total, &ok);
    c->tmp = grab(B * E, sizeof(float), &total, &ok);
    c->q = grab(B * NQ, sizeof(float), &total, &ok);
    c->att = grab(B * NQ, sizeof(float), &total, &ok);
    c->k = grab(B * c->kv_dim, sizeof(float), &total, &ok);
    c->v = grab(B * c->kv_dim, sizeof(float), &total, &ok);
    c->g = grab(B * F, sizeof(float), &total, &ok);
    c->u = grab(B * F, sizeof(float), &total, &ok);
    c->xq_stride = max_xq_row(model, c->fast);
    c->xq = grab(B, c->xq_stride, &total, &ok);
    c->scores = grab((size_t)p.n_threads * (size_t)p.n_ctx, sizeof(float), &total, &ok);
    c->probs_stride = ((size_t)p.n_ctx + 31) & ~(size_t)31; /* attention pads to 32 */
    c->probs = grab((size_t)p.n_threads * c->probs_stride, sizeof(float), &total, &ok);
    c->att_work_stride = specd_attention_rows_work(ATT_TILE, p.n_ctx, model->info.head_dim);
    c->att_work = grab((size_t)p.n_threads * c->att_work_stride, sizeof(float), &total, &ok);
    c->mark = grab(B > (size_t)p.n_seq ? B : (size_t)p.n_seq, 1, &total, &ok);
    c->out_rows = grab(B, sizeof(int32_t), &total, &ok);
    c->total_bytes = total;
    if (!ok) {
        specd_context_destroy(c);
        return specd_fail(err, SPECD_E_NOMEM,
                          "context: cannot allocate KV cache and scratch (n_seq %d, n_ctx %d, "
                          "n_batch %d)",
                          p.n_seq, p.n_ctx, p.n_batch);
    }
    c->prof = rt_prof_create(p.n_threads);
    specd_status st = specd_threadpool_create(p.n_threads, &c->pool, err);
    if (st != SPECD_OK) {
        specd_context_destroy(c);
        return st;
    }
    *out = c;
    return SPECD_OK;
}

void specd_context_destroy(specd_context *c) {
    if (!c) return;
    if (c->cuda) rt_cuda_context_destroy(c);
    specd_threadpool_destroy(c->pool);
    rt_prof_destroy(c->prof);
    specd_free(c->kv);
    specd_free(c->kv_len);
    specd_free(c->tok);
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
    specd_free(c->mark);
    specd_free(c->out_rows);
    specd_free(c->lora_scratch);
    specd_free(c);
}

int32_t specd_context_n_threads(const specd_context *ctx) {
    return ctx->n_threads;
}

int32_t specd_context_numerics(const specd_context *ctx) {
    return ctx->p.numerics;
}

specd_status specd_context_set_lora(specd_context *c, const specd_lora *lora, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "context: ctx is NULL");
    if (lora) {
        const specd_model_info *in = &c->model->info;
        if (lora->n_layer != in->n_layer)
            return specd_fail(err, SPECD_E_MISMATCH, "lora: %d layers, model has %d", lora->n_layer,
                              in->n_layer);
        for (int p = 0; p < RT_N_PROJ; p++)
            if (lora->n_in[p] != c->model->layers[0].w[p].n_in ||
                lora->n_out[p] != c->model->layers[0].w[p].n_out)
                return specd_fail(err, SPECD_E_MISMATCH, "lora: projection %d shape differs", p);
        if (c->cuda) {
            SPECD_TRY(rt_cuda_set_lora(c, lora, err));
        } else if (lora->rank > c->lora_rank_cap) {
            float *s = specd_alloc_array((size_t)c->n_threads * (size_t)lora->rank, sizeof(float));
            if (!s) return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
            specd_free(c->lora_scratch);
            c->lora_scratch = s;
            c->lora_rank_cap = lora->rank;
        }
    } else if (c->cuda) {
        SPECD_TRY(rt_cuda_set_lora(c, NULL, err));
    }
    c->lora = lora;
    return SPECD_OK;
}

int32_t specd_context_kv_len(const specd_context *c, int32_t seq) {
    if (!c || seq < 0 || seq >= c->p.n_seq) return -1;
    return c->kv_len[seq];
}

specd_status specd_context_kv_truncate(specd_context *c, int32_t seq, int32_t n, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "kv_truncate: ctx is NULL");
    if (seq < 0 || seq >= c->p.n_seq)
        return specd_fail(err, SPECD_E_INVALID_ARG, "kv_truncate: seq %d not in 0..%d", seq,
                          c->p.n_seq - 1);
    if (n < 0 || n > c->kv_len[seq])
        return specd_fail(err, SPECD_E_INVALID_ARG, "kv_truncate: n %d not in 0..%d (kv_len)", n,
                          c->kv_len[seq]);
    c->kv_len[seq] = n;
    return SPECD_OK;
}

void rt_kv_compact(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                   const int32_t *rows) {
    const size_t rb = c->kv_dim * sizeof(uint16_t), n_ctx = (size_t)c->p.n_ctx;
    int32_t first_move = 0;
    while (first_move < n_rows && rows[first_move] == from + first_move)
        first_move++;
    if (first_move == n_rows) {
        c->kv_len[seq] = from + n_rows;
        return;
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
}

specd_status specd_context_kv_keep(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                                   const int32_t *rows, specd_error *err) {
    if (!c) return specd_fail(err, SPECD_E_INVALID_ARG, "kv_keep: ctx is NULL");
    if (seq < 0 || seq >= c->p.n_seq)
        return specd_fail(err, SPECD_E_INVALID_ARG, "kv_keep: seq %d not in 0..%d", seq,
                          c->p.n_seq - 1);
    const int32_t len = c->kv_len[seq];
    if (from < 0 || from > len)
        return specd_fail(err, SPECD_E_INVALID_ARG, "kv_keep: from %d not in 0..%d", from, len);
    if (n_rows < 0 || n_rows > len - from || (n_rows > 0 && !rows))
        return specd_fail(err, SPECD_E_INVALID_ARG, "kv_keep: %d rows after %d of %d", n_rows, from,
                          len);
    for (int32_t j = 0; j < n_rows; j++) {
        if (rows[j] < from || rows[j] >= len || (j > 0 && rows[j] <= rows[j - 1]))
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "kv_keep: rows[%d] = %d not ascending in %d..%d", j, rows[j], from,
                              len - 1);
    }
    if (c->cuda) return rt_cuda_kv_compact(c, seq, from, n_rows, rows, err);
    rt_kv_compact(c, seq, from, n_rows, rows);
    return SPECD_OK;
}

size_t specd_context_kv_bytes(const specd_context *c) {
    return c ? c->kv_bytes : 0;
}
size_t specd_context_memory_bytes(const specd_context *c) {
    if (!c) return 0;
    return c->total_bytes + (size_t)c->n_threads * (size_t)c->lora_rank_cap * sizeof(float);
}

int32_t specd_context_device(const specd_context *c) {
    return c ? c->p.device : SPECD_DEVICE_CPU;
}

void specd_context_device_memory(const specd_context *c, size_t *weights, size_t *kv,
                                 size_t *scratch) {
    rt_cuda_device_memory(c, weights, kv, scratch);
}

int32_t specd_context_device_launches(const specd_context *c) {
    return c && c->cuda ? c->cuda->last_launches : 0;
}

void specd_context_device_graph_stats(const specd_context *c, specd_device_graph_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    const rt_cuda *g = c ? c->cuda : NULL;
    if (!g) return;
    out->enabled = g->graphs_on;
    out->cached = g->graphs.n;
    out->capacity = g->graphs.cap;
    out->captures = g->graph_captures;
    out->replays = g->graph_replays;
    out->evictions = g->graphs.evictions;
    out->fallbacks = g->graph_fallbacks;
    out->last_graphed = g->last_graphed;
    out->last_host_launches = g->last_host_launches;
}
