#include "model/runtime/runtime_internal.h"

#include "common/alloc.h"
#include "common/status_internal.h"

#include <stdio.h>
#include <string.h>

/* Sizes above these are refused: they bound the stack scratch of the row kernels (rope, attention)
 * and keep every product below far from overflow. */
enum { MAX_HEAD_DIM = 512, MAX_DIM = 1 << 20, MAX_LAYERS = 1024 };

static const char *const arch_names[] = {"llama", "qwen2", "qwen3"};

specd_status rt_matrix_init(rt_matrix *m, const specd_gguf_tensor *t, int64_t n_in, int64_t n_out,
                            specd_error *err) {
    const int name_len = (int)(t->name.len > 96 ? 96 : t->name.len);
    if (t->n_dims != 2 || t->ne[0] != n_in || t->ne[1] != n_out)
        return specd_fail(err, SPECD_E_FORMAT,
                          "tensor %.*s: shape [%lld, %lld, %lld] where [%lld, %lld] was expected",
                          name_len, t->name.ptr, (long long)t->ne[0], (long long)t->ne[1],
                          (long long)t->ne[2], (long long)n_in, (long long)n_out);
    const specd_dtype_traits *tr = specd_dtype_traits_get(t->type);
    const specd_dtype_traits *vt = tr ? specd_dtype_traits_get(tr->vec_dot_type) : NULL;
    if (!tr || !tr->vec_dot || !tr->to_float || !vt ||
        (tr->vec_dot_type != SPECD_DTYPE_F32 && !vt->from_float))
        return specd_fail(err, SPECD_E_UNSUPPORTED, "tensor %.*s: type %u has no CPU matmul kernel",
                          name_len, t->name.ptr, t->type);
    size_t rb = specd_dtype_row_bytes(t->type, n_in);
    size_t total;
    if (rb == 0 || !specd_mul_ok(rb, (size_t)n_out, &total) || total > t->n_bytes)
        return specd_fail(err, SPECD_E_FORMAT, "tensor %.*s: %lld columns do not fit type %s",
                          name_len, t->name.ptr, (long long)n_in, tr->name);
    m->data = t->data;
    m->type = t->type;
    m->n_in = n_in;
    m->n_out = n_out;
    m->traits = tr;
    m->vtraits = vt;
    m->xq_row_bytes = specd_dtype_row_bytes(tr->vec_dot_type, n_in);
    if (m->xq_row_bytes == 0)
        return specd_fail(err, SPECD_E_FORMAT, "tensor %.*s: %lld columns do not fit type %s",
                          name_len, t->name.ptr, (long long)n_in, vt->name);
    return SPECD_OK;
}

static specd_status find(const specd_model *m, const char *name, const specd_gguf_tensor **out,
                         specd_error *err) {
    *out = specd_gguf_tensor_find(m->gguf, name);
    if (!*out) return specd_fail(err, SPECD_E_FORMAT, "model: tensor %s is missing", name);
    return SPECD_OK;
}

static specd_status get_matrix(const specd_model *m, const char *name, int64_t n_in, int64_t n_out,
                               rt_matrix *out, specd_error *err) {
    const specd_gguf_tensor *t;
    SPECD_TRY(find(m, name, &t, err));
    return rt_matrix_init(out, t, n_in, n_out, err);
}

/* A 1-D F32 vector of n elements (norm weights, biases); optional ones may be absent. */
static specd_status get_vector(const specd_model *m, const char *name, int64_t n, int optional,
                               const float **out, specd_error *err) {
    const specd_gguf_tensor *t = specd_gguf_tensor_find(m->gguf, name);
    *out = NULL;
    if (!t) {
        if (optional) return SPECD_OK;
        return specd_fail(err, SPECD_E_FORMAT, "model: tensor %s is missing", name);
    }
    if (t->type != SPECD_DTYPE_F32 || t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 ||
        t->ne[3] != 1 || t->n_bytes < (uint64_t)n * sizeof(float))
        return specd_fail(err, SPECD_E_FORMAT, "tensor %s: expected F32 [%lld]", name,
                          (long long)n);
    if ((uintptr_t)t->data % sizeof(float))
        return specd_fail(err, SPECD_E_FORMAT, "tensor %s: data not 4-byte aligned", name);
    *out = t->data;
    return SPECD_OK;
}

static specd_status key_i32(const specd_model *m, const char *arch, const char *suffix,
                            int optional, int32_t dflt, int32_t *out, specd_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (optional && specd_gguf_key_find(m->gguf, key) < 0) {
        *out = dflt;
        return SPECD_OK;
    }
    int64_t v;
    SPECD_TRY(specd_gguf_get_i64(m->gguf, key, &v, err));
    if (v < 1 || v > MAX_DIM)
        return specd_fail(err, SPECD_E_FORMAT, "model: %s = %lld out of range 1..%d", key,
                          (long long)v, MAX_DIM);
    *out = (int32_t)v;
    return SPECD_OK;
}

static specd_status key_f32(const specd_model *m, const char *arch, const char *suffix, float dflt,
                            float *out, specd_error *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (specd_gguf_key_find(m->gguf, key) < 0) {
        *out = dflt;
        return SPECD_OK;
    }
    float v;
    SPECD_TRY(specd_gguf_get_f32(m->gguf, key, &v, err));
    if (!(v > 0.0f) || v != v || v > 1e30f)
        return specd_fail(err, SPECD_E_FORMAT, "model: %s = %g is not a positive number", key,
                          (double)v);
    *out = v;
    return SPECD_OK;
}

static specd_status read_hparams(specd_model *m, specd_error *err) {
    specd_gguf_str a;
    SPECD_TRY(specd_gguf_get_str(m->gguf, "general.architecture", &a, err));
    char arch[32] = {0};
    int found = -1;
    for (int i = 0; i < 3; i++)
        if (a.len == strlen(arch_names[i]) && !memcmp(a.ptr, arch_names[i], a.len)) found = i;
    if (found < 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED, "model: architecture '%.*s' is not supported",
                          (int)(a.len > 64 ? 64 : a.len), a.ptr);
    memcpy(arch, arch_names[found], strlen(arch_names[found]));
    specd_model_info *in = &m->info;
    in->arch = (specd_arch)found;
    SPECD_TRY(key_i32(m, arch, "block_count", 0, 0, &in->n_layer, err));
    SPECD_TRY(key_i32(m, arch, "embedding_length", 0, 0, &in->n_embd, err));
    SPECD_TRY(key_i32(m, arch, "feed_forward_length", 0, 0, &in->n_ff, err));
    SPECD_TRY(key_i32(m, arch, "attention.head_count", 0, 0, &in->n_head, err));
    SPECD_TRY(key_i32(m, arch, "attention.head_count_kv", 1, in->n_head, &in->n_head_kv, err));
    SPECD_TRY(key_i32(m, arch, "context_length", 1, 4096, &in->n_ctx_train, err));
    if (in->n_layer > MAX_LAYERS)
        return specd_fail(err, SPECD_E_FORMAT, "model: %d layers is more than %d", in->n_layer,
                          MAX_LAYERS);
    int32_t hd_default = in->n_embd % in->n_head == 0 ? in->n_embd / in->n_head : 0;
    SPECD_TRY(key_i32(m, arch, "attention.key_length", 1, hd_default, &in->head_dim, err));
    int32_t vlen = 0;
    SPECD_TRY(key_i32(m, arch, "attention.value_length", 1, in->head_dim, &vlen, err));
    if (in->head_dim <= 0 || in->head_dim > MAX_HEAD_DIM || in->head_dim % 2 ||
        vlen != in->head_dim)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "model: head size %d (key) / %d (value) not supported", in->head_dim,
                          vlen);
    SPECD_TRY(key_i32(m, arch, "rope.dimension_count", 1, in->head_dim, &in->n_rot, err));
    if (in->n_rot > in->head_dim || in->n_rot % 2)
        return specd_fail(err, SPECD_E_FORMAT, "model: rope.dimension_count %d vs head size %d",
                          in->n_rot, in->head_dim);
    if (in->n_head % in->n_head_kv)
        return specd_fail(err, SPECD_E_FORMAT, "model: %d heads not a multiple of %d KV heads",
                          in->n_head, in->n_head_kv);
    SPECD_TRY(key_f32(m, arch, "attention.layer_norm_rms_epsilon", 1e-5f, &in->rms_eps, err));
    SPECD_TRY(key_f32(m, arch, "rope.freq_base", 10000.0f, &in->rope_freq_base, err));
    /* RoPE scaling changes every angle; refuse rather than silently run it unscaled. */
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    specd_gguf_str st;
    if (specd_gguf_key_find(m->gguf, key) >= 0 &&
        specd_gguf_get_str(m->gguf, key, &st, NULL) == SPECD_OK &&
        !(st.len == 4 && !memcmp(st.ptr, "none", 4)))
        return specd_fail(err, SPECD_E_UNSUPPORTED, "model: %s '%.*s' is not supported", key,
                          (int)(st.len > 32 ? 32 : st.len), st.ptr);
    if (specd_gguf_tensor_find(m->gguf, "rope_freqs.weight"))
        return specd_fail(err, SPECD_E_UNSUPPORTED, "model: rope_freqs.weight is not supported");
    return SPECD_OK;
}

/* The token embedding and output head: the file's own, or (base != NULL) the base model's. */
static specd_status load_embeddings(specd_model *m, const specd_model *base, specd_error *err) {
    specd_model_info *in = &m->info;
    if (base) {
        /* the head of a residual drafter runs on the target's frozen embedding and output head;
         * a file that brings its own would be ambiguous about which one it was trained with */
        static const char *const own[] = {"token_embd.weight", "output.weight"};
        for (int i = 0; i < 2; i++)
            if (specd_gguf_tensor_find(m->gguf, own[i]))
                return specd_fail(err, SPECD_E_FORMAT,
                                  "model: %s is present; a model opened over a base borrows the "
                                  "base's embedding and output head", own[i]);
        if (base->info.n_embd != in->n_embd)
            return specd_fail(err, SPECD_E_MISMATCH,
                              "model: embedding width %d differs from the base model's %d",
                              in->n_embd, base->info.n_embd);
        int64_t v;
        char key[64];
        snprintf(key, sizeof key, "%s.vocab_size", arch_names[in->arch]);
        if (specd_gguf_key_find(m->gguf, key) >= 0 &&
            specd_gguf_get_i64(m->gguf, key, &v, NULL) == SPECD_OK && v != base->info.n_vocab)
            return specd_fail(err, SPECD_E_MISMATCH,
                              "model: %s = %lld differs from the base model's vocabulary %d", key,
                              (long long)v, base->info.n_vocab);
        in->n_vocab = base->info.n_vocab;
        in->tied_output = base->info.tied_output;
        m->tok_embd = base->tok_embd;
        m->output = base->output;
        return SPECD_OK;
    }
    const specd_gguf_tensor *te;
    SPECD_TRY(find(m, "token_embd.weight", &te, err));
    if (te->n_dims != 2 || te->ne[0] != in->n_embd || te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return specd_fail(err, SPECD_E_FORMAT, "tensor token_embd.weight: shape [%lld, %lld]",
                          (long long)te->ne[0], (long long)te->ne[1]);
    in->n_vocab = (int32_t)te->ne[1];
    SPECD_TRY(rt_matrix_init(&m->tok_embd, te, in->n_embd, in->n_vocab, err));
    if (specd_gguf_tensor_find(m->gguf, "output.weight")) {
        SPECD_TRY(get_matrix(m, "output.weight", in->n_embd, in->n_vocab, &m->output, err));
        in->tied_output = 0;
    } else {
        m->output = m->tok_embd;
        in->tied_output = 1;
    }
    return SPECD_OK;
}

static specd_status load_tensors(specd_model *m, const specd_model *base, specd_error *err) {
    specd_model_info *in = &m->info;
    SPECD_TRY(load_embeddings(m, base, err));
    SPECD_TRY(get_vector(m, "output_norm.weight", in->n_embd, 0, &m->output_norm, err));
    m->layers = specd_alloc_array((size_t)in->n_layer, sizeof *m->layers);
    if (!m->layers) return specd_fail(err, SPECD_E_NOMEM, "model: out of memory");
    const int64_t nq = (int64_t)in->n_head * in->head_dim,
                  nkv = (int64_t)in->n_head_kv * in->head_dim;
    const int64_t E = in->n_embd, F = in->n_ff;
    static const char *const names[RT_N_PROJ] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                                 "ffn_gate", "ffn_up", "ffn_down"};
    const int64_t ins[RT_N_PROJ] = {E, E, E, nq, E, E, F};
    const int64_t outs[RT_N_PROJ] = {nq, nkv, nkv, E, F, F, E};
    const int qwen2 = in->arch == SPECD_ARCH_QWEN2, qwen3 = in->arch == SPECD_ARCH_QWEN3;
    for (int32_t l = 0; l < in->n_layer; l++) {
        rt_layer *L = &m->layers[l];
        char nm[96];
        for (int p = 0; p < RT_N_PROJ; p++) {
            snprintf(nm, sizeof nm, "blk.%d.%s.weight", l, names[p]);
            SPECD_TRY(get_matrix(m, nm, ins[p], outs[p], &L->w[p], err));
        }
        snprintf(nm, sizeof nm, "blk.%d.attn_norm.weight", l);
        SPECD_TRY(get_vector(m, nm, E, 0, &L->attn_norm, err));
        snprintf(nm, sizeof nm, "blk.%d.ffn_norm.weight", l);
        SPECD_TRY(get_vector(m, nm, E, 0, &L->ffn_norm, err));
        snprintf(nm, sizeof nm, "blk.%d.attn_q.bias", l);
        SPECD_TRY(get_vector(m, nm, nq, !qwen2, &L->bq, err));
        snprintf(nm, sizeof nm, "blk.%d.attn_k.bias", l);
        SPECD_TRY(get_vector(m, nm, nkv, !qwen2, &L->bk, err));
        snprintf(nm, sizeof nm, "blk.%d.attn_v.bias", l);
        SPECD_TRY(get_vector(m, nm, nkv, !qwen2, &L->bv, err));
        snprintf(nm, sizeof nm, "blk.%d.attn_q_norm.weight", l);
        SPECD_TRY(get_vector(m, nm, in->head_dim, !qwen3, &L->q_norm, err));
        snprintf(nm, sizeof nm, "blk.%d.attn_k_norm.weight", l);
        SPECD_TRY(get_vector(m, nm, in->head_dim, !qwen3, &L->k_norm, err));
    }
    uint64_t bytes = 0;
    for (int64_t i = 0; i < specd_gguf_tensor_count(m->gguf); i++)
        bytes += specd_gguf_tensor_at(m->gguf, i)->n_bytes;
    in->weight_bytes = bytes;
    return SPECD_OK;
}

static specd_status model_open(const char *path, const specd_model *base, specd_model **out,
                               specd_error *err) {
    if (!path || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "model: path or out is NULL");
    specd_model *m = specd_alloc_array(1, sizeof *m);
    if (!m) return specd_fail(err, SPECD_E_NOMEM, "model: out of memory");
    specd_status st = specd_gguf_create(path, &m->gguf, err);
    if (st == SPECD_OK) st = read_hparams(m, err);
    if (st == SPECD_OK) st = load_tensors(m, base, err);
    if (st != SPECD_OK) {
        specd_model_destroy(m);
        return st;
    }
    *out = m;
    return SPECD_OK;
}

specd_status specd_model_create(const char *path, specd_model **out, specd_error *err) {
    return model_open(path, NULL, out, err);
}

specd_status specd_model_create_with_base(const char *path, const specd_model *base,
                                          specd_model **out, specd_error *err) {
    if (!base) return specd_fail(err, SPECD_E_INVALID_ARG, "model: base is NULL");
    return model_open(path, base, out, err);
}

void specd_model_destroy(specd_model *model) {
    if (!model) return;
    specd_free(model->layers);
    specd_gguf_destroy(model->gguf);
    specd_free(model);
}

const specd_model_info *specd_model_get_info(const specd_model *model) {
    return &model->info;
}

const specd_gguf *specd_model_gguf(const specd_model *model) {
    return model->gguf;
}
