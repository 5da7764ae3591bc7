/* specd_tokenizer_create_from_gguf: reads tokenizer.ggml.* into a specd_tok_vocab. */
#include <string.h>

#include "common/alloc.h"
#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"

static int str_eq(specd_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* Reads a string array into parallel pointer/length arrays (views into the gguf mapping). */
static specd_status read_str_array(const specd_gguf *g, const char *key, size_t *n_out,
                                   const char ***texts, uint32_t **lens, specd_error *err) {
    specd_gguf_type et;
    uint64_t count;
    const void *data;
    SPECD_TRY(specd_gguf_get_array(g, key, &et, &count, &data, err));
    if (et != SPECD_GGUF_STRING)
        return specd_fail(err, SPECD_E_FORMAT, "%s: array of type %d, want strings", key, (int)et);
    if (count > INT32_MAX / 2)
        return specd_fail(err, SPECD_E_FORMAT, "%s: %llu entries", key, (unsigned long long)count);
    *texts = specd_alloc_array(count ? count : 1, sizeof **texts);
    *lens = specd_alloc_array(count ? count : 1, sizeof **lens);
    if (!*texts || !*lens) return specd_fail(err, SPECD_E_NOMEM, "%s: %llu entries", key,
                                             (unsigned long long)count);
    for (uint64_t i = 0; i < count; i++) {
        specd_gguf_str s;
        SPECD_TRY(specd_gguf_get_array_str(g, key, i, &s, err));
        if (s.len > UINT32_MAX / 4)
            return specd_fail(err, SPECD_E_FORMAT, "%s[%llu]: %llu bytes", key,
                              (unsigned long long)i, (unsigned long long)s.len);
        (*texts)[i] = s.ptr;
        (*lens)[i] = (uint32_t)s.len;
    }
    *n_out = (size_t)count;
    return SPECD_OK;
}

static specd_status opt_id(const specd_gguf *g, const char *key, int32_t *out, specd_error *err) {
    *out = -1;
    if (specd_gguf_key_find(g, key) < 0) return SPECD_OK;
    uint32_t v;
    SPECD_TRY(specd_gguf_get_u32(g, key, &v, err));
    *out = v > INT32_MAX ? INT32_MAX : (int32_t)v; /* range-checked against the vocab later */
    return SPECD_OK;
}

static specd_status opt_bool(const specd_gguf *g, const char *key, int *out, specd_error *err) {
    *out = 0;
    if (specd_gguf_key_find(g, key) < 0) return SPECD_OK;
    return specd_gguf_get_bool(g, key, out, err);
}

static specd_status fill(const specd_gguf *g, specd_tok_vocab *v, char *pre, size_t pre_cap,
                         int32_t **types, specd_error *err) {
    specd_gguf_str s;
    SPECD_TRY(specd_gguf_get_str(g, "tokenizer.ggml.model", &s, err));
    if (!str_eq(s, "gpt2"))
        return specd_fail(err, SPECD_E_UNSUPPORTED, "tokenizer.ggml.model '%.*s': only gpt2 (BPE)",
                          (int)(s.len > 64 ? 64 : s.len), s.ptr);
    pre[0] = '\0';
    if (specd_gguf_key_find(g, "tokenizer.ggml.pre") >= 0) {
        SPECD_TRY(specd_gguf_get_str(g, "tokenizer.ggml.pre", &s, err));
        size_t n = s.len < pre_cap - 1 ? (size_t)s.len : pre_cap - 1;
        memcpy(pre, s.ptr, n);
        pre[n] = '\0';
    }
    v->pre = pre;
    SPECD_TRY(read_str_array(g, "tokenizer.ggml.tokens", &v->n_tokens,
                             (const char ***)&v->token_text, (uint32_t **)&v->token_len, err));
    SPECD_TRY(read_str_array(g, "tokenizer.ggml.merges", &v->n_merges,
                             (const char ***)&v->merge_text, (uint32_t **)&v->merge_len, err));
    if (specd_gguf_key_find(g, "tokenizer.ggml.token_type") >= 0) {
        specd_gguf_type et;
        uint64_t count;
        const void *data;
        SPECD_TRY(specd_gguf_get_array(g, "tokenizer.ggml.token_type", &et, &count, &data, err));
        if (et != SPECD_GGUF_I32)
            return specd_fail(err, SPECD_E_FORMAT, "tokenizer.ggml.token_type: type %d, want i32",
                              (int)et);
        if (count < v->n_tokens)
            return specd_fail(err, SPECD_E_FORMAT,
                              "tokenizer.ggml.token_type: %llu entries for %zu tokens",
                              (unsigned long long)count, v->n_tokens);
        *types = specd_alloc_array(v->n_tokens, sizeof **types);
        if (!*types) return specd_fail(err, SPECD_E_NOMEM, "token types");
        memcpy(*types, data, v->n_tokens * sizeof **types); /* may be unaligned in the file */
        v->token_type = *types;
    }
    SPECD_TRY(opt_id(g, "tokenizer.ggml.bos_token_id", &v->bos, err));
    SPECD_TRY(opt_id(g, "tokenizer.ggml.eos_token_id", &v->eos, err));
    SPECD_TRY(opt_id(g, "tokenizer.ggml.eot_token_id", &v->eot, err));
    SPECD_TRY(opt_id(g, "tokenizer.ggml.eom_token_id", &v->eom, err));
    SPECD_TRY(opt_bool(g, "tokenizer.ggml.add_bos_token", &v->add_bos, err));
    SPECD_TRY(opt_bool(g, "tokenizer.ggml.add_eos_token", &v->add_eos, err));
    if (specd_gguf_key_find(g, "tokenizer.chat_template") >= 0) {
        SPECD_TRY(specd_gguf_get_str(g, "tokenizer.chat_template", &s, err));
        v->chat_template = s.ptr;
        v->chat_template_len = (size_t)s.len;
    }
    return SPECD_OK;
}

specd_status specd_tokenizer_create_from_gguf_ex(const specd_gguf *gguf, const char *pre_override,
                                                 int add_bos_override, int add_eos_override,
                                                 specd_tokenizer **out, specd_error *err) {
    if (!gguf || !out) return specd_fail(err, SPECD_E_INVALID_ARG, "tokenizer: NULL gguf or out");
    specd_tok_vocab v;
    memset(&v, 0, sizeof v);
    char pre[64];
    int32_t *types = NULL;
    specd_status st = fill(gguf, &v, pre, sizeof pre, &types, err);
    if (pre_override) v.pre = pre_override;
    if (add_bos_override >= 0) v.add_bos = add_bos_override;
    if (add_eos_override >= 0) v.add_eos = add_eos_override;
    if (st == SPECD_OK) st = specd_tokenizer_create_from_vocab(&v, out, err);
    specd_free((void *)v.token_text);
    specd_free((void *)v.token_len);
    specd_free((void *)v.merge_text);
    specd_free((void *)v.merge_len);
    specd_free(types);
    return st;
}

specd_status specd_tokenizer_create_from_gguf(const specd_gguf *gguf, specd_tokenizer **out,
                                              specd_error *err) {
    return specd_tokenizer_create_from_gguf_ex(gguf, NULL, -1, -1, out, err);
}
