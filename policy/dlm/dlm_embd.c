/* Token-embedding rows for iteration smoothing: see dlm_embd.h. */
#include "policy/dlm/dlm_embd.h"

#include "common/status_internal.h"
#include "specd/gguf.h"

specd_status specd_dlm_embd_open(const specd_model *model, int32_t n_vocab, int32_t n_embd,
                                 specd_dlm_embd *out, specd_error *err) {
    const specd_gguf *g = model ? specd_model_gguf(model) : NULL;
    const specd_gguf_tensor *t = g ? specd_gguf_tensor_find(g, "token_embd.weight") : NULL;
    if (!t) return specd_fail(err, SPECD_E_FORMAT, "dlm: the target has no token_embd.weight");
    const specd_dtype_traits *tr = specd_dtype_traits_get(t->type);
    const size_t rb = specd_dtype_row_bytes(t->type, n_embd);
    if (!tr || !tr->to_float || rb == 0 || t->ne[0] != n_embd || t->ne[1] != n_vocab ||
        (uint64_t)rb * (uint64_t)n_vocab > t->n_bytes)
        return specd_fail(err, SPECD_E_UNSUPPORTED,
                          "dlm: token_embd.weight (type %u) cannot be read as %d rows of %d",
                          t->type, n_vocab, n_embd);
    *out = (specd_dlm_embd){
        .data = t->data, .row_bytes = rb, .traits = tr, .n_embd = n_embd, .n_vocab = n_vocab};
    return SPECD_OK;
}

int specd_dlm_embd_row(void *ctx, int32_t token, float *out) {
    const specd_dlm_embd *e = ctx;
    if (!e || token < 0 || token >= e->n_vocab) return -1;
    e->traits->to_float(e->data + (size_t)token * e->row_bytes, out, e->n_embd);
    return 0;
}
