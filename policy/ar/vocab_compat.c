#include "policy/ar/vocab_compat.h"

#include "common/status_internal.h"

#include <string.h>

static const char *const tokens_key = "tokenizer.ggml.tokens";

static specd_status vocab_size(const specd_gguf *g, const char *which, uint64_t *n,
                               specd_error *err) {
    specd_gguf_type type;
    const void *data;
    if (specd_gguf_get_array(g, tokens_key, &type, n, &data, NULL) != SPECD_OK ||
        type != SPECD_GGUF_STRING)
        return specd_fail(err, SPECD_E_MISMATCH, "draft: the %s model has no %s string array",
                          which, tokens_key);
    return SPECD_OK;
}

static int same_u32(const specd_gguf *a, const specd_gguf *b, const char *key) {
    uint32_t x = 0, y = 0;
    int ha = specd_gguf_get_u32(a, key, &x, NULL) == SPECD_OK;
    int hb = specd_gguf_get_u32(b, key, &y, NULL) == SPECD_OK;
    return ha == hb && x == y;
}

specd_status specd_vocab_compat_check(const specd_gguf *target, const specd_gguf *draft,
                                      specd_error *err) {
    uint64_t nt, nd;
    SPECD_TRY(vocab_size(target, "target", &nt, err));
    SPECD_TRY(vocab_size(draft, "draft", &nd, err));
    if (nt != nd)
        return specd_fail(err, SPECD_E_MISMATCH,
                          "draft: vocabulary size %llu differs from the target's %llu",
                          (unsigned long long)nd, (unsigned long long)nt);
    static const char *const special[] = {"tokenizer.ggml.bos_token_id",
                                          "tokenizer.ggml.eos_token_id"};
    for (int i = 0; i < 2; i++)
        if (!same_u32(target, draft, special[i]))
            return specd_fail(err, SPECD_E_MISMATCH, "draft: %s differs from the target's",
                              special[i]);
    for (uint64_t i = 0; i < nt; i++) {
        specd_gguf_str a, b;
        if (specd_gguf_get_array_str(target, tokens_key, i, &a, err) != SPECD_OK ||
            specd_gguf_get_array_str(draft, tokens_key, i, &b, err) != SPECD_OK)
            return err ? err->status : SPECD_E_FORMAT;
        if (a.len != b.len || memcmp(a.ptr, b.ptr, a.len))
            return specd_fail(err, SPECD_E_MISMATCH,
                              "draft: token %llu is '%.*s' in the draft but '%.*s' in the target",
                              (unsigned long long)i, (int)(b.len > 40 ? 40 : b.len), b.ptr,
                              (int)(a.len > 40 ? 40 : a.len), a.ptr);
    }
    specd_gguf_type ta, tb;
    uint64_t ca, cb;
    const void *da, *db;
    const char *types_key = "tokenizer.ggml.token_type";
    int ha = specd_gguf_get_array(target, types_key, &ta, &ca, &da, NULL) == SPECD_OK;
    int hb = specd_gguf_get_array(draft, types_key, &tb, &cb, &db, NULL) == SPECD_OK;
    size_t elem = ta == SPECD_GGUF_I32 || ta == SPECD_GGUF_U32 ? 4
                  : ta == SPECD_GGUF_I8 || ta == SPECD_GGUF_U8 ? 1 : 0;
    if (ha != hb || (ha && (ta != tb || ca != cb || !elem || memcmp(da, db, ca * elem))))
        return specd_fail(err, SPECD_E_MISMATCH, "draft: token types differ from the target's");
    return SPECD_OK;
}
