/* A context as every backend shares it: the parameters checked, the bookkeeping of sequences
 * and steps, the public calls validated; what holds the weights, the cache and the forward pass
 * is the backend's (backend.h), picked here from the parameters' device. */
#include "model/runtime/backend.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <stdlib.h>
#include <string.h>

/* Allocates n x size bytes, adding them to *total; NULL (and *ok = 0) on overflow or failure. */
void *rt_grab(size_t n, size_t size, size_t *total, int *ok) {
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
    specd_context *c = specd_alloc_array(1, sizeof *c);
    if (!c) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
    c->model = model;
    c->p = p;
    c->backend = rt_backend_for(p.device);
    c->n_threads = p.n_threads;
    c->kv_dim = (size_t)in->n_head_kv * (size_t)in->head_dim;
    int ok = 1;
    size_t total = sizeof *c;
    const size_t B = (size_t)p.n_batch;
    c->kv_len = rt_grab((size_t)p.n_seq, sizeof(int32_t), &total, &ok);
    c->tok = rt_grab(B, sizeof(rt_token), &total, &ok);
    c->mark = rt_grab(B > (size_t)p.n_seq ? B : (size_t)p.n_seq, 1, &total, &ok);
    c->out_rows = rt_grab(B, sizeof(int32_t), &total, &ok);
    c->total_bytes = total;
    if (!ok) {
        specd_context_destroy(c);
        return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
    }
    const specd_status st = c->backend->create(c, err);
    if (st != SPECD_OK) {
        specd_context_destroy(c);
        return st;
    }
    *out = c;
    return SPECD_OK;
}

void specd_context_destroy(specd_context *c) {
    if (!c) return;
    if (c->backend) c->backend->destroy(c);
    rt_prof_destroy(c->prof);
    specd_free(c->kv_len);
    specd_free(c->tok);
    specd_free(c->mark);
    specd_free(c->out_rows);
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
    }
    SPECD_TRY(c->backend->set_lora(c, lora, err));
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
    return c->backend->kv_compact(c, seq, from, n_rows, rows, err);
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
    if (c) {
        c->backend->device_memory(c, weights, kv, scratch);
        return;
    }
    if (weights) *weights = 0;
    if (kv) *kv = 0;
    if (scratch) *scratch = 0;
}

int32_t specd_context_device_launches(const specd_context *c) {
    return c ? c->backend->device_launches(c) : 0;
}

void specd_context_device_graph_stats(const specd_context *c, specd_device_graph_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (c) c->backend->graph_stats(c, out);
}
