/* The CUDA backend's context (model/runtime/cuda_backend.h): the device, the weights in their
 * GGUF block formats, the F16 KV cache, the scratch for n_batch tokens and the pinned staging
 * buffer, all sized and checked against the device's free memory before anything is allocated.
 * The weights (every layer, whatever a context's n_layers cut) are uploaded once per model and
 * device and shared by the contexts of that model there: a process-wide list of reference-counted
 * copies keyed by (model, device), under a mutex; the last context frees the copy. A context
 * never outlives its model, so a key is never reused while its copy lives. */
#include "model/runtime/cuda_backend.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/dtype.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

specd_status rt_cuda_fail(const rt_cuda *g, specd_error *err, const char *what, int rc) {
    if (rc == SPECD_CUDA_E_ARGUMENT)
        return specd_fail(err, SPECD_E_INTERNAL, "cuda: %s refused its arguments: %s", what,
                          g->k->last_refusal());
    return specd_fail(err, SPECD_E_IO, "cuda: %s failed: CUDA error %d (%s)", what, rc,
                      g->rt->get_error_string(rc));
}

static size_t align256(size_t n) {
    return (n + 255) & ~(size_t)255;
}

/* A bump allocator over one device allocation: sizes first (base NULL), then addresses. */
typedef struct carve {
    char *base;
    size_t used;
} carve;

static void *take(carve *cv, size_t bytes) {
    void *p = cv->base ? cv->base + cv->used : NULL;
    cv->used += align256(bytes);
    return p;
}

static int vec_of(uint32_t type) {
    switch (type) {
    case SPECD_DTYPE_F32:
    case SPECD_DTYPE_F16: return RT_VEC_F;
    case SPECD_DTYPE_Q4_0:
    case SPECD_DTYPE_Q4_1:
    case SPECD_DTYPE_Q8_0: return RT_VEC_Q8;
    case SPECD_DTYPE_Q4_K:
    case SPECD_DTYPE_Q6_K: return RT_VEC_Q8K;
    default: return -1;
    }
}

static int embed_type_ok(uint32_t type) {
    return type == SPECD_DTYPE_F32 || type == SPECD_DTYPE_F16 || type == SPECD_DTYPE_Q4_0 ||
           type == SPECD_DTYPE_Q4_1 || type == SPECD_DTYPE_Q8_0;
}

/* The weights: a pass with cv->base NULL sizes them; a second one copies each tensor up. A
 * token table the embed kernel cannot read (K-quants) goes up as F32 rows made by the CPU's own
 * to_float, so its bits are the CPU's. */
typedef struct upload {
    const rt_cuda *g;
    carve cv;
    int rc;           /* first copy failure */
    const char *what; /* its tensor */
} upload;

static const void *put(upload *u, const void *host, size_t bytes, const char *what) {
    void *d = take(&u->cv, bytes);
    if (d && u->rc == 0 && host) {
        const int rc = u->g->rt->memcpy(d, host, bytes, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
        if (rc) {
            u->rc = rc;
            u->what = what;
        }
    }
    return d;
}

static rt_cuda_matrix put_matrix(upload *u, const rt_matrix *m, const char *what) {
    const size_t bytes = specd_dtype_row_bytes(m->type, m->n_in) * (size_t)m->n_out;
    rt_cuda_matrix d = {.type = m->type,
                        .n_in = (int32_t)m->n_in,
                        .n_out = (int32_t)m->n_out,
                        .vec = vec_of(m->type)};
    d.data = put(u, m->data, bytes, what);
    return d;
}

/* the GGUF tensors, for a failed upload's message */
static const char *const vec_names[RT_N_LAYER_VEC] = {
    [RT_ATTN_NORM] = "attn_norm", [RT_FFN_NORM] = "ffn_norm", [RT_Q_NORM] = "attn_q_norm",
    [RT_K_NORM] = "attn_k_norm",  [RT_BQ] = "attn_q.bias",    [RT_BK] = "attn_k.bias",
    [RT_BV] = "attn_v.bias"};

static specd_status upload_weights(rt_cuda *g, const specd_model *m, upload *u, specd_error *err) {
    const specd_model_info *in = &m->info;
    const size_t E = (size_t)in->n_embd;
    if (embed_type_ok(m->tok_embd.type)) {
        g->tok_embd = put_matrix(u, &m->tok_embd, "token_embd");
    } else {
        g->tok_embd = (rt_cuda_matrix){
            .type = SPECD_DTYPE_F32, .n_in = in->n_embd, .n_out = in->n_vocab, .vec = RT_VEC_F};
        const size_t bytes = E * sizeof(float) * (size_t)in->n_vocab;
        float *host = NULL;
        if (u->cv.base) {
            host = specd_alloc_array((size_t)in->n_vocab * E, sizeof(float));
            if (!host) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
            const size_t row = specd_dtype_row_bytes(m->tok_embd.type, in->n_embd);
            for (int32_t t = 0; t < in->n_vocab; t++)
                m->tok_embd.traits->to_float((const char *)m->tok_embd.data + (size_t)t * row,
                                             host + (size_t)t * E, in->n_embd);
        }
        g->tok_embd.data = put(u, host, bytes, "token_embd (as F32)");
        specd_free(host);
    }
    g->output = m->output.data == m->tok_embd.data && embed_type_ok(m->tok_embd.type)
                    ? g->tok_embd
                    : put_matrix(u, &m->output, "output");
    g->output_norm = put(u, m->output_norm, E * sizeof(float), "output_norm");
    for (int32_t l = 0; l < in->n_layer; l++) {
        const rt_layer *L = &m->layers[l];
        rt_cuda_layer *D = &g->layers[l];
        for (int v = 0; v < RT_N_LAYER_VEC; v++) {
            const float *h = rt_model_vec(m, l, (rt_vec)v);
            D->vec[v] =
                h ? put(u, h, (size_t)rt_vec_len(in, (rt_vec)v) * sizeof(float), vec_names[v])
                  : NULL;
        }
        for (int p = 0; p < RT_N_PROJ; p++)
            D->w[p] = put_matrix(u, &L->w[p], "layer weight");
    }
    if (u->rc) return rt_cuda_fail(g, err, u->what, u->rc);
    return SPECD_OK;
}

/* One model's weights on one device, shared by its contexts there. */
typedef struct rt_cuda_weights {
    struct rt_cuda_weights *next;
    const specd_model *model;
    int device;
    int refs;
    const specd_cudart *rt;
    void *mem;
    size_t bytes;
    rt_cuda_layer *layers; /* n_layer */
    rt_cuda_matrix tok_embd, output;
    const float *output_norm;
} rt_cuda_weights;

static pthread_mutex_t weights_lock = PTHREAD_MUTEX_INITIALIZER;
static rt_cuda_weights *weights_list;

static rt_cuda_weights *weights_find(const specd_model *m, int device) {
    for (rt_cuda_weights *w = weights_list; w; w = w->next)
        if (w->model == m && w->device == device) return w;
    return NULL;
}

static void weights_view(rt_cuda *g, const rt_cuda_weights *w) {
    g->weights = w->mem;
    g->weights_bytes = w->bytes;
    g->layers = w->layers;
    g->tok_embd = w->tok_embd;
    g->output = w->output;
    g->output_norm = w->output_norm;
}

/* Drops a context's reference (under weights_lock); the last one frees the copy. */
static void weights_release(rt_cuda_weights *w) {
    if (--w->refs > 0) return;
    for (rt_cuda_weights **p = &weights_list; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    w->rt->free(w->mem);
    specd_free(w->layers);
    specd_free(w);
}

/* Every matrix must have a CUDA matmul; the message names the first that has none. */
static specd_status check_types(const specd_model *m, int32_t n_layers, specd_error *err) {
    const rt_matrix *out = &m->output;
    if (vec_of(out->type) < 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "context: the CUDA backend has no matmul for the output head's type %s",
                          out->traits->name);
    for (int32_t l = 0; l < n_layers; l++)
        for (int p = 0; p < RT_N_PROJ; p++)
            if (vec_of(m->layers[l].w[p].type) < 0)
                return specd_fail(err, SPECD_E_UNSUPPORTED,
                                  "context: the CUDA backend has no matmul for layer %d's weight "
                                  "type %s (it runs F32, F16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K)",
                                  l, m->layers[l].w[p].traits->name);
    return SPECD_OK;
}

static size_t xq_bytes_of(const rt_cuda_matrix *m) {
    return m->vec == RT_VEC_Q8    ? specd_cuda_q8_row_bytes(m->n_in)
           : m->vec == RT_VEC_Q8K ? specd_cuda_q8_k_row_bytes(m->n_in)
                                  : 0;
}

/* The largest quantized activation row any matrix asks for. */
static size_t xq_row_bytes(const rt_cuda *g) {
    size_t mx = xq_bytes_of(&g->output);
    for (int32_t l = 0; l < g->n_layers; l++)
        for (int p = 0; p < RT_N_PROJ; p++) {
            const size_t b = xq_bytes_of(&g->layers[l].w[p]);
            if (b > mx) mx = b;
        }
    return mx;
}

/* The scratch and the step's inputs (cv->base NULL: sizes only). */
static void carve_scratch(rt_cuda *g, const specd_model_info *in, const specd_context_params *p,
                          carve *cv) {
    const size_t B = (size_t)p->n_batch, E = (size_t)in->n_embd, F = (size_t)in->n_ff;
    const size_t hd = (size_t)in->head_dim, NQ = (size_t)in->n_head * hd;
    const size_t NKV = (size_t)in->n_head_kv * hd;
    g->x = take(cv, B * E * sizeof(float));
    g->xn = take(cv, B * E * sizeof(float));
    g->tmp = take(cv, B * E * sizeof(float));
    g->q = take(cv, B * NQ * sizeof(float));
    g->att = take(cv, B * NQ * sizeof(float));
    g->k_rows = take(cv, B * NKV * sizeof(float));
    g->v_rows = take(cv, B * NKV * sizeof(float));
    g->g = take(cv, B * F * sizeof(float));
    g->u = take(cv, B * F * sizeof(float));
    g->logits = take(cv, B * (size_t)in->n_vocab * sizeof(float));
    g->att_work_floats =
        specd_cuda_attention_work_floats(p->n_batch, in->n_head, in->head_dim, p->n_ctx);
    g->att_work = take(cv, g->att_work_floats * sizeof(float));
    g->xq = take(cv, B * xq_row_bytes(g));
    /* the inputs: offsets within in_dev / in_host */
    g->mask_words = specd_cuda_mask_words(p->n_ctx);
    size_t o = 0;
    g->off_ids = o, o += align256(B * 4);
    g->off_pos = o, o += align256(B * 4);
    g->off_gate = o, o += align256(B * 4);
    g->off_kv_dst = o, o += align256(B * 4);
    g->off_out = o, o += align256(B * 4);
    g->off_src = o, o += align256((size_t)p->n_ctx * 4);
    g->off_dst = o, o += align256((size_t)p->n_ctx * 4);
    g->ints_bytes = o;
    g->off_mask = o, o += align256(B * (size_t)g->mask_words * 4);
    g->off_embd = o, o += align256(B * E * sizeof(float));
    g->in_bytes = o;
    g->in_dev = take(cv, o);
}

/* Why no device can be used, as one sentence. */
static specd_status open_device(rt_cuda *g, int32_t index, specd_error *err) {
    int n = 0, drv = 0, rtv = 0;
    const int rc = g->rt->get_device_count(&n);
    (void)g->rt->driver_get_version(&drv);
    (void)g->rt->runtime_get_version(&rtv);
    if (rc != SPECD_CUDA_SUCCESS) (void)g->rt->get_last_error();
    /* only the runtime's own verdict: a driver of an older minor version may still serve (CUDA's
     * minor version compatibility), so the versions are reported, not compared */
    if (rc == SPECD_CUDA_ERROR_INSUFFICIENT_DRIVER) {
        if (drv == 0)
            return specd_fail(err, SPECD_E_UNSUPPORTED,
                              "context: no CUDA driver is installed (no device to run on)");
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "context: the CUDA driver (CUDA %d.%d) is older than the runtime "
                          "(CUDA %d.%d) needs: update the driver",
                          drv / 1000, drv % 1000 / 10, rtv / 1000, rtv % 1000 / 10);
    }
    if (rc != SPECD_CUDA_SUCCESS || n == 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "context: no CUDA device (%s)",
                          rc ? g->rt->get_error_string(rc) : "the runtime found none");
    if (index < 0 || index >= n)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "context: CUDA device %d asked for, this machine has %d", index, n);
    const int sr = g->rt->set_device(index);
    if (sr) return rt_cuda_fail(g, err, "cudaSetDevice", sr);
    g->device = index;
    return SPECD_OK;
}

static specd_status alloc_device(rt_cuda *g, void **p, size_t bytes, const char *what,
                                 specd_error *err) {
    const int rc = g->rt->malloc(p, bytes ? bytes : 1);
    if (rc) {
        *p = NULL;
        (void)g->rt->get_last_error();
        return specd_fail(err, SPECD_E_NOMEM, "context: cudaMalloc of %zu bytes for the %s: %s",
                          bytes, what, g->rt->get_error_string(rc));
    }
    return SPECD_OK;
}

/* Under weights_lock: an existing copy of the weights is shared (and counts as no new bytes). */
static specd_status setup_locked(specd_context *c, rt_cuda *g, specd_error *err) {
    const specd_model *m = c->model;
    const specd_model_info *in = &m->info;
    const specd_context_params *p = &c->p;
    rt_cuda_weights *shared = weights_find(m, g->device);
    size_t weights_new = 0;
    upload u = {.g = g};
    if (shared) { /* referenced at once: a failure below releases it, never frees it */
        weights_view(g, shared);
        shared->refs++;
        g->shared = shared;
    } else {
        g->layers = specd_alloc_array((size_t)in->n_layer, sizeof *g->layers);
        if (!g->layers) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
        SPECD_TRY(upload_weights(g, m, &u, err)); /* sizes only */
        weights_new = g->weights_bytes = u.cv.used;
    }
    size_t kv_rows = (size_t)p->n_seq * (size_t)p->n_ctx; /* < 2^31: checked */
    g->kv_plane = kv_rows * c->kv_dim;
    size_t kv = 0;
    if (!specd_mul_ok(g->kv_plane, (size_t)g->n_layers * 2 * sizeof(uint16_t), &kv))
        return specd_fail(err, SPECD_E_INVALID_ARG, "context: the KV cache size overflows");
    g->kv_bytes = kv;
    carve sc = {0};
    carve_scratch(g, in, p, &sc);
    g->scratch_bytes = sc.used;
    size_t free_b = 0, total_b = 0;
    const int mr = g->rt->mem_get_info(&free_b, &total_b);
    if (mr) return rt_cuda_fail(g, err, "cudaMemGetInfo", mr);
    const size_t want = weights_new + g->kv_bytes + g->scratch_bytes;
    if (want > free_b)
        return specd_fail(err, SPECD_E_NOMEM,
                          "context: CUDA device %d has %zu bytes free (of %zu), this context "
                          "needs %zu: weights %zu%s, KV cache %zu (n_seq %d x n_ctx %d), scratch "
                          "%zu (n_batch %d)",
                          g->device, free_b, total_b, want, g->weights_bytes,
                          shared ? " (shared, already there)" : "", g->kv_bytes, p->n_seq, p->n_ctx,
                          g->scratch_bytes, p->n_batch);

    if (!shared) SPECD_TRY(alloc_device(g, &g->weights, g->weights_bytes, "weights", err));
    SPECD_TRY(alloc_device(g, (void **)&g->kv, g->kv_bytes, "KV cache", err));
    SPECD_TRY(alloc_device(g, &g->scratch, g->scratch_bytes, "scratch", err));
    int rc = g->rt->malloc_host(&g->in_host, g->in_bytes);
    if (rc) {
        g->in_host = NULL;
        return specd_fail(err, SPECD_E_NOMEM, "context: cudaMallocHost of %zu bytes: %s",
                          g->in_bytes, g->rt->get_error_string(rc));
    }
    memset(g->in_host, 0, g->in_bytes);
    /* with graphs, a non-blocking stream: a capture on a blocking one is invalidated (and the
     * other call fails) when another thread uses the legacy default stream meanwhile; every call
     * synchronises its own stream before returning, so nothing relies on the implicit join */
    rc = g->graphs_on ? g->rt->stream_create_with_flags(&g->stream, SPECD_CUDA_STREAM_NON_BLOCKING)
                      : g->rt->stream_create(&g->stream);
    if (rc) {
        g->stream = NULL;
        return rt_cuda_fail(g, err, "cudaStreamCreate", rc);
    }
    if (!shared) {
        u = (upload){.g = g, .cv = {.base = g->weights}};
        SPECD_TRY(upload_weights(g, m, &u, err));
        shared = specd_alloc_array(1, sizeof *shared);
        if (!shared) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
        *shared = (rt_cuda_weights){.next = weights_list,
                                    .model = m,
                                    .device = g->device,
                                    .rt = g->rt,
                                    .mem = g->weights,
                                    .bytes = g->weights_bytes,
                                    .layers = g->layers,
                                    .tok_embd = g->tok_embd,
                                    .output = g->output,
                                    .output_norm = g->output_norm};
        weights_list = shared;
        shared->refs = 1;
        g->shared = shared;
    }
    sc = (carve){.base = g->scratch};
    carve_scratch(g, in, p, &sc);
    return SPECD_OK;
}

static void destroy_exec(void *exec, void *user) {
    const rt_cuda *g = user;
    (void)g->rt->graph_exec_destroy(exec);
}

/* The step graphs: on unless SPECD_CUDA_GRAPHS says off or the runtime has no graphs. */
static specd_status setup_graphs(rt_cuda *g, const specd_context_params *p, specd_error *err) {
    g->graphs_on = rt_graph_enabled_by(getenv("SPECD_CUDA_GRAPHS")) && g->rt->graph_launch;
    if (!g->graphs_on) return SPECD_OK;
    const size_t cap = rt_graph_key_capacity(p->n_batch);
    g->graph_key = specd_alloc_array(cap, sizeof(int32_t));
    if (!g->graph_key ||
        rt_graph_cache_init(&g->graphs, RT_GRAPH_CACHE_CAPACITY, destroy_exec, g) != 0)
        return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
    g->graph_key_cap = (int32_t)cap;
    return SPECD_OK;
}

static specd_status setup(specd_context *c, rt_cuda *g, specd_error *err) {
    const specd_model *m = c->model;
    const specd_context_params *p = &c->p;
    g->n_layers = p->n_layers > 0 ? p->n_layers : m->info.n_layer;
    SPECD_TRY(check_types(m, m->info.n_layer, err));
    if (p->n_batch > 65535)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "context: n_batch %d exceeds the CUDA backend's 65535", p->n_batch);
    size_t kv_rows = 0;
    if (!specd_mul_ok((size_t)p->n_seq, (size_t)p->n_ctx, &kv_rows) || kv_rows > INT32_MAX)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "context: n_seq x n_ctx = %zu KV rows exceed the CUDA backend's 2^31",
                          kv_rows);
    SPECD_TRY(setup_graphs(g, p, err));
    SPECD_TRY(open_device(g, p->device_index, err));
    pthread_mutex_lock(&weights_lock);
    const specd_status st = setup_locked(c, g, err);
    pthread_mutex_unlock(&weights_lock);
    return st;
}

static specd_status cuda_create(specd_context *c, specd_error *err) {
    specd_error why;
    const specd_cuda_kernels *k = specd_cuda_kernels_get(&why);
    if (!k)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "context: no CUDA backend: %s", why.message);
    const specd_cudart *rt = specd_cudart_get(&why);
    if (!rt)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "context: no CUDA backend: %s", why.message);
    rt_cuda *g = specd_alloc_array(1, sizeof *g);
    if (!g) return specd_fail(err, SPECD_E_NOMEM, "context: out of memory");
    g->k = k;
    g->rt = rt;
    c->cuda = g;
    SPECD_TRY(setup(c, g, err));
    c->kv_bytes = g->kv_bytes;
    c->total_bytes += sizeof *g + g->in_bytes + g->kv_bytes + g->scratch_bytes;
    return SPECD_OK;
}

static void free_lora(rt_cuda *g) {
    if (g->lora_mem) g->rt->free(g->lora_mem);
    g->lora_mem = NULL;
    g->lora_bytes = 0;
    specd_free(g->lora_pairs);
    g->lora_pairs = NULL;
    g->lora_work = NULL;
    g->lora_rank = 0;
}

static void cuda_destroy(specd_context *c) {
    rt_cuda *g = c->cuda;
    if (!g) return;
    if (g->stream) {
        (void)g->rt->stream_synchronize(g->stream);
        (void)g->rt->stream_destroy(g->stream);
    }
    rt_graph_cache_free(&g->graphs);
    specd_free(g->graph_key);
    free_lora(g);
    if (g->shared) {
        pthread_mutex_lock(&weights_lock);
        weights_release(g->shared);
        pthread_mutex_unlock(&weights_lock);
    } else { /* a creation that failed before its weights were shared */
        if (g->weights) g->rt->free(g->weights);
        specd_free(g->layers);
    }
    if (g->kv) g->rt->free(g->kv);
    if (g->scratch) g->rt->free(g->scratch);
    if (g->in_host) g->rt->free_host(g->in_host);
    specd_free(g);
    c->cuda = NULL;
}

static specd_status cuda_set_lora(specd_context *c, const specd_lora *lo, specd_error *err) {
    rt_cuda *g = c->cuda;
    rt_graph_cache_clear(&g->graphs); /* the graphs hold the old adapter's addresses */
    free_lora(g);
    if (!lo) return SPECD_OK;
    const int32_t nl = g->n_layers;
    g->lora_pairs = specd_alloc_array((size_t)nl * RT_N_PROJ, sizeof *g->lora_pairs);
    if (!g->lora_pairs) return specd_fail(err, SPECD_E_NOMEM, "lora: out of memory");
    size_t bytes = 0;
    for (int32_t l = 0; l < nl; l++)
        for (int p = 0; p < RT_N_PROJ; p++)
            if (lo->pairs[(size_t)l * RT_N_PROJ + (size_t)p].a)
                bytes += align256((size_t)lo->rank * (size_t)lo->n_in[p] * sizeof(float)) +
                         align256((size_t)lo->n_out[p] * (size_t)lo->rank * sizeof(float));
    g->lora_work_floats = (size_t)c->p.n_batch * (size_t)lo->rank;
    bytes += align256(g->lora_work_floats * sizeof(float));
    size_t free_b = 0, total_b = 0;
    int rc = g->rt->mem_get_info(&free_b, &total_b);
    if (rc) return rt_cuda_fail(g, err, "cudaMemGetInfo", rc);
    if (bytes > free_b) {
        free_lora(g);
        return specd_fail(err, SPECD_E_NOMEM,
                          "lora: the adapter needs %zu bytes on CUDA device %d, %zu free", bytes,
                          g->device, free_b);
    }
    specd_status st = alloc_device(g, &g->lora_mem, bytes, "LoRA adapter", err);
    if (st != SPECD_OK) {
        free_lora(g);
        return st;
    }
    g->lora_bytes = bytes;
    carve cv = {.base = g->lora_mem};
    for (int32_t l = 0; l < nl && rc == 0; l++)
        for (int p = 0; p < RT_N_PROJ && rc == 0; p++) {
            const rt_lora_pair *hp = &lo->pairs[(size_t)l * RT_N_PROJ + (size_t)p];
            if (!hp->a) continue;
            const size_t ab = (size_t)lo->rank * (size_t)lo->n_in[p] * sizeof(float);
            const size_t bb = (size_t)lo->n_out[p] * (size_t)lo->rank * sizeof(float);
            float *a = take(&cv, ab), *b = take(&cv, bb);
            rc = g->rt->memcpy(a, hp->a, ab, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
            if (!rc) rc = g->rt->memcpy(b, hp->b, bb, SPECD_CUDA_MEMCPY_HOST_TO_DEVICE);
            g->lora_pairs[(size_t)l * RT_N_PROJ + (size_t)p] = (rt_cuda_lora_pair){a, b};
        }
    if (rc) {
        st = rt_cuda_fail(g, err, "the LoRA upload", rc);
        free_lora(g);
        return st;
    }
    g->lora_work = take(&cv, g->lora_work_floats * sizeof(float));
    g->lora_rank = lo->rank;
    g->lora_scale = lo->scale;
    return SPECD_OK;
}

static void cuda_device_memory(const specd_context *c, size_t *weights, size_t *kv,
                               size_t *scratch) {
    const rt_cuda *g = c->cuda;
    if (weights) *weights = g->weights_bytes + g->lora_bytes;
    if (kv) *kv = g->kv_bytes;
    if (scratch) *scratch = g->scratch_bytes;
}

static int32_t cuda_device_launches(const specd_context *c) {
    return c->cuda->last_launches;
}

static void cuda_graph_stats(const specd_context *c, specd_device_graph_stats *out) {
    const rt_cuda *g = c->cuda;
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

const rt_backend rt_backend_cuda = {.name = "CUDA",
                                    .device_logits = 1,
                                    .create = cuda_create,
                                    .destroy = cuda_destroy,
                                    .set_lora = cuda_set_lora,
                                    .extend = rt_cuda_extend,
                                    .kv_compact = rt_cuda_kv_compact,
                                    .device_memory = cuda_device_memory,
                                    .device_launches = cuda_device_launches,
                                    .graph_stats = cuda_graph_stats};
