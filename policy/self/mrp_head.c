#include "policy/self/mrp_head.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "kernels/cpu/ops.h"
#include "specd/gguf.h"

#include <string.h>

void mrp_head_close(mrp_head *h) {
    if (!h) return;
    specd_model_destroy(h->model);
    specd_free(h->eh_proj);
    specd_free(h->enorm);
    specd_free(h->hnorm);
    specd_free(h->dv.ids);
    specd_free(h->dv.rows);
    specd_free(h);
}

/* The target's matrix `name` as rows of n_embd (token_embd, or output when untied). */
static specd_status target_rows(const specd_gguf *g, const char *name, int32_t n_embd,
                                int32_t n_vocab, mrp_matrix_rows *out, specd_error *err) {
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, name);
    if (!t) return specd_fail(err, SPECD_E_FORMAT, "policy mrp: the target has no %s", name);
    const specd_dtype_traits *tr = specd_dtype_traits_get(t->type);
    size_t rb = specd_dtype_row_bytes(t->type, n_embd);
    if (!tr || !tr->to_float || rb == 0 || t->ne[0] != n_embd || t->ne[1] != n_vocab ||
        (uint64_t)rb * (uint64_t)n_vocab > t->n_bytes)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "policy mrp: the target's %s (type %u) cannot be read as %d rows of %d",
                          name, t->type, n_vocab, n_embd);
    *out = (mrp_matrix_rows){.data = t->data, .row_bytes = rb, .traits = tr};
    return SPECD_OK;
}

/* A copy of tensor `name` of the head file as f32, shaped [ne0, ne1] (ne1 = 1: a vector). */
static specd_status head_f32(const specd_gguf *g, const char *path, const char *name, int64_t ne0,
                             int64_t ne1, int allow_f16, float **out, specd_error *err) {
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, name);
    if (!t)
        return specd_fail(err, SPECD_E_FORMAT, "policy mrp: head %s: tensor %s is missing", path,
                          name);
    int ok_type = t->type == SPECD_DTYPE_F32 || (allow_f16 && t->type == SPECD_DTYPE_F16);
    if (!ok_type || t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return specd_fail(err, SPECD_E_FORMAT,
                          "policy mrp: head %s: tensor %s is type %u [%lld, %lld] where %s [%lld, "
                          "%lld] was expected", path, name, t->type, (long long)t->ne[0],
                          (long long)t->ne[1], allow_f16 ? "F32/F16" : "F32", (long long)ne0,
                          (long long)ne1);
    size_t n = (size_t)ne0 * (size_t)ne1;
    if (specd_dtype_row_bytes(t->type, (int64_t)n) > t->n_bytes)
        return specd_fail(err, SPECD_E_FORMAT, "policy mrp: head %s: tensor %s is truncated",
                          path, name);
    float *f = specd_alloc_array(n, sizeof(float));
    if (!f) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    specd_dtype_traits_get(t->type)->to_float(t->data, f, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        if (!(f[i] - f[i] == 0.0f)) {
            specd_free(f);
            return specd_fail(err, SPECD_E_FORMAT,
                              "policy mrp: head %s: tensor %s has a non-finite value", path, name);
        }
    *out = f;
    return SPECD_OK;
}

/* mrp.eh_proj.weight: a Q8_0 one is used as stored (its values checked finite once), others as
 * an f32 copy. */
static specd_status eh_proj(mrp_head *h, const specd_gguf *g, const char *path,
                            specd_error *err) {
    const int64_t E = h->n_embd;
    const specd_gguf_tensor *t = specd_gguf_tensor_find(g, "mrp.eh_proj.weight");
    if (!t || t->type != SPECD_DTYPE_Q8_0)
        return head_f32(g, path, "mrp.eh_proj.weight", 2 * E, E, 1, &h->eh_proj, err);
    const specd_dtype_traits *tr = specd_dtype_traits_get(SPECD_DTYPE_Q8_0);
    size_t rb = specd_dtype_row_bytes(SPECD_DTYPE_Q8_0, 2 * E);
    if (t->ne[0] != 2 * E || t->ne[1] != E || t->ne[2] != 1 || t->ne[3] != 1 || rb == 0 ||
        (uint64_t)rb * (uint64_t)E > t->n_bytes)
        return specd_fail(err, SPECD_E_FORMAT,
                          "policy mrp: head %s: tensor mrp.eh_proj.weight is Q8_0 [%lld, %lld] "
                          "where [%lld, %lld] was expected", path, (long long)t->ne[0],
                          (long long)t->ne[1], (long long)(2 * E), (long long)E);
    float *row = specd_alloc_array((size_t)(2 * E), sizeof(float));
    if (!row) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    int finite = 1;
    for (int64_t o = 0; o < E && finite; o++) {
        tr->to_float((const uint8_t *)t->data + (size_t)o * rb, row, 2 * E);
        for (int64_t i = 0; i < 2 * E; i++) finite &= row[i] - row[i] == 0.0f;
    }
    specd_free(row);
    if (!finite)
        return specd_fail(err, SPECD_E_FORMAT,
                          "policy mrp: head %s: tensor mrp.eh_proj.weight has a non-finite value",
                          path);
    h->ehq = (mrp_matrix_rows){.data = t->data, .row_bytes = rb, .traits = tr};
    return SPECD_OK;
}

static specd_status head_keys(mrp_head *h, const specd_gguf *g, const char *path,
                              specd_error *err) {
    uint32_t v;
    if (specd_gguf_key_find(g, "mrp.version") < 0 ||
        specd_gguf_get_u32(g, "mrp.version", &v, NULL) != SPECD_OK)
        return specd_fail(err, SPECD_E_FORMAT,
                          "policy mrp: head %s has no mrp.version (not an MRP head file)", path);
    if (v != 1)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "policy mrp: head %s is mrp.version %u; this build reads version 1",
                          path, v);
    if (specd_gguf_key_find(g, "mrp.n_vocab") < 0 ||
        specd_gguf_get_u32(g, "mrp.n_vocab", &v, NULL) != SPECD_OK)
        return specd_fail(err, SPECD_E_FORMAT, "policy mrp: head %s has no mrp.n_vocab", path);
    if ((int64_t)v != h->n_vocab)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "policy mrp: head %s was trained for a vocabulary of %u; the target's "
                          "is %d", path, v, h->n_vocab);
    if (specd_gguf_key_find(g, "mrp.n_draft") >= 0 &&
        specd_gguf_get_u32(g, "mrp.n_draft", &v, NULL) == SPECD_OK && v >= 1 && v <= 64)
        h->n_draft = (int32_t)v;
    return SPECD_OK;
}

/* mrp.draft_vocab: its length into h->n_draft_vocab, and with want > 0 the first want ids and
 * their output-head rows into h->dv. The list is checked whole (ids in range, no repeats), so a
 * bad file is refused whatever vocab asks for. */
static specd_status draft_vocab(mrp_head *h, const specd_gguf *g, const char *path, int32_t want,
                                specd_error *err) {
    if (specd_gguf_key_find(g, "mrp.draft_vocab") < 0) {
        if (want > 0)
            return specd_fail(err, SPECD_E_INVALID_ARG,
                              "policy mrp: vocab=%d, but head %s has no mrp.draft_vocab", want,
                              path);
        return SPECD_OK;
    }
    specd_gguf_type et;
    uint64_t n;
    const void *data;
    SPECD_TRY(specd_gguf_get_array(g, "mrp.draft_vocab", &et, &n, &data, err));
    if ((et != SPECD_GGUF_I32 && et != SPECD_GGUF_U32) || n == 0 || n > (uint64_t)h->n_vocab)
        return specd_fail(err, SPECD_E_FORMAT,
                          "policy mrp: head %s: mrp.draft_vocab is not an INT32 array of 1 .. %d "
                          "token ids", path, h->n_vocab);
    uint8_t *seen = specd_alloc_array((size_t)h->n_vocab, 1);
    if (!seen) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    specd_status st = SPECD_OK;
    for (uint64_t i = 0; i < n && st == SPECD_OK; i++) {
        int32_t id;
        memcpy(&id, (const uint8_t *)data + 4 * i, 4);
        if (id < 0 || id >= h->n_vocab || seen[id])
            st = specd_fail(err, SPECD_E_FORMAT,
                            "policy mrp: head %s: mrp.draft_vocab[%llu] = %d is %s", path,
                            (unsigned long long)i, id, id < 0 || id >= h->n_vocab
                                                           ? "not a token id" : "a repeat");
        else
            seen[id] = 1;
    }
    specd_free(seen);
    if (st != SPECD_OK) return st;
    h->n_draft_vocab = (int32_t)n;
    if (want == MRP_VOCAB_AUTO) want = n < MRP_VOCAB_DEFAULT ? (int32_t)n : MRP_VOCAB_DEFAULT;
    if (want <= 0) return SPECD_OK;
    if ((uint64_t)want > n)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy mrp: vocab=%d, but head %s's mrp.draft_vocab has %llu tokens",
                          want, path, (unsigned long long)n);
    mrp_vocab *dv = &h->dv;
    dv->traits = h->out.traits;
    dv->row_bytes = h->out.row_bytes;
    specd_dtype act = dv->traits->vec_dot_type;
    dv->act = specd_dtype_traits_get(act);
    dv->act_bytes = specd_dtype_row_bytes(act, h->n_embd);
    if (!dv->act || !dv->act->from_float || !dv->traits->vec_dot || dv->act_bytes == 0)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "policy mrp: the target's output head (%s) has no dot kernel for a "
                          "draft vocabulary", dv->traits->name);
    dv->ids = specd_alloc_array((size_t)want, sizeof(int32_t));
    dv->rows = specd_alloc_array((size_t)want, dv->row_bytes);
    if (!dv->ids || !dv->rows) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    memcpy(dv->ids, data, (size_t)want * sizeof(int32_t));
    for (int32_t i = 0; i < want; i++)
        memcpy(dv->rows + (size_t)i * dv->row_bytes,
               h->out.data + (size_t)dv->ids[i] * h->out.row_bytes, dv->row_bytes);
    dv->n = want;
    return SPECD_OK;
}

void mrp_vocab_logits(const mrp_vocab *dv, const float *hp, int32_t n_embd, float *c,
                      void *scratch) {
    dv->act->from_float(hp, scratch, n_embd);
    for (int32_t i = 0; i < dv->n; i++)
        dv->traits->vec_dot(n_embd, &c[i], dv->rows + (size_t)i * dv->row_bytes, scratch);
}

specd_status mrp_head_open(const specd_model *target, const char *path, int32_t vocab,
                           mrp_head **out, specd_error *err) {
    const specd_model_info *ti = specd_model_get_info(target);
    mrp_head *h = specd_alloc_array(1, sizeof *h);
    if (!h) return specd_fail(err, SPECD_E_NOMEM, "policy mrp: out of memory");
    h->n_embd = ti->n_embd;
    h->n_vocab = ti->n_vocab;
    h->eps = ti->rms_eps;
    h->f32 = specd_dtype_traits_get(SPECD_DTYPE_F32);
    specd_status st = specd_model_create_with_base(path, target, &h->model, err);
    if (st != SPECD_OK && err) {
        char why[sizeof err->message];
        memcpy(why, err->message, sizeof why);
        why[sizeof why - 1] = '\0';
        specd_fail(err, st, "policy mrp: head %s: %s", path, why);
    }
    const specd_gguf *g = st == SPECD_OK ? specd_model_gguf(h->model) : NULL;
    const specd_gguf *tg = specd_model_gguf(target);
    const int64_t E = h->n_embd;
    if (st == SPECD_OK) {
        const specd_model_info *hi = specd_model_get_info(h->model);
        h->n_layer = hi->n_layer;
        if (hi->arch != ti->arch || hi->n_head != ti->n_head || hi->n_head_kv != ti->n_head_kv ||
            hi->head_dim != ti->head_dim)
            st = specd_fail(err, SPECD_E_MISMATCH,
                            "policy mrp: head %s: attention shape (%d heads, %d kv heads, head "
                            "size %d) is not the target's (%d, %d, %d)", path, hi->n_head,
                            hi->n_head_kv, hi->head_dim, ti->n_head, ti->n_head_kv, ti->head_dim);
    }
    if (st == SPECD_OK) st = head_keys(h, g, path, err);
    if (st == SPECD_OK) st = head_f32(g, path, "mrp.enorm.weight", E, 1, 0, &h->enorm, err);
    if (st == SPECD_OK) st = head_f32(g, path, "mrp.hnorm.weight", E, 1, 0, &h->hnorm, err);
    if (st == SPECD_OK) st = eh_proj(h, g, path, err);
    if (st == SPECD_OK)
        st = target_rows(tg, "token_embd.weight", h->n_embd, h->n_vocab, &h->embd, err);
    if (st == SPECD_OK) {
        if (specd_gguf_tensor_find(tg, "output.weight"))
            st = target_rows(tg, "output.weight", h->n_embd, h->n_vocab, &h->out, err);
        else
            h->out = h->embd;
    }
    if (st == SPECD_OK) st = draft_vocab(h, g, path, vocab, err);
    if (st != SPECD_OK) {
        mrp_head_close(h);
        return st;
    }
    *out = h;
    return SPECD_OK;
}

void mrp_head_row(const mrp_matrix_rows *m, int32_t token, int32_t n_embd, float *out) {
    m->traits->to_float(m->data + (size_t)token * m->row_bytes, out, n_embd);
}

void mrp_head_input(const mrp_head *h, int32_t y, const float *g, float *u, float *scratch) {
    const int32_t E = h->n_embd;
    float *e = scratch, *hn = scratch + E; /* [enorm(E[y]) ; hnorm(g)], contiguous */
    mrp_head_row(&h->embd, y, E, u); /* u as temporary */
    specd_rmsnorm_f32(u, h->enorm, e, E, h->eps);
    specd_rmsnorm_f32(g, h->hnorm, hn, E, h->eps);
    if (h->ehq.data) {
        void *q = scratch + 2 * (size_t)E; /* 2E/32 Q8_0 blocks fit in E floats */
        h->ehq.traits->from_float(scratch, q, 2 * (int64_t)E);
        for (int32_t o = 0; o < E; o++)
            h->ehq.traits->vec_dot(2 * (int64_t)E, &u[o],
                                   h->ehq.data + (size_t)o * h->ehq.row_bytes, q);
        return;
    }
    for (int32_t o = 0; o < E; o++)
        u[o] = mrp_dot(h, h->eh_proj + (size_t)o * 2 * (size_t)E, scratch, 2 * (int64_t)E);
}
