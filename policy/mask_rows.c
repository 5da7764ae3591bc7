#include "policy/mask_rows.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "specd/gguf.h"
#include "specd/runtime.h"

#include <string.h>

specd_status specd_mask_pick_id(const specd_policy_env *env, const char *policy, int32_t opt,
                                int32_t *out, specd_error *err) {
    int32_t id = opt;
    if (id < 0) {
        id = SPECD_POLICY_DEFAULT_MASK;
        const specd_gguf *g = env->target ? specd_model_gguf(env->target) : NULL;
        uint32_t v;
        if (g && specd_gguf_key_find(g, "tokenizer.ggml.mask_token_id") >= 0 &&
            specd_gguf_get_u32(g, "tokenizer.ggml.mask_token_id", &v, NULL) == SPECD_OK &&
            v < (uint32_t)env->n_vocab)
            id = (int32_t)v;
    }
    if (id >= env->n_vocab)
        return specd_fail(err, SPECD_E_INVALID_ARG,
                          "policy %s: mask=%d is outside the vocabulary [0, %d)", policy, id,
                          env->n_vocab);
    *out = id;
    return SPECD_OK;
}

specd_status specd_mask_read_vector(const char *dir, float **out, int32_t *n, specd_error *err) {
    *out = NULL;
    specd_status st = specd_lora_read_mask_embedding(dir, NULL, 0, n, err);
    if (st == SPECD_E_IO)
        *n = 0;
    else if (st != SPECD_OK)
        return st;
    if (*n == 0) return SPECD_OK;
    if (!(*out = specd_alloc_array((size_t)*n, sizeof(float))))
        return specd_fail(err, SPECD_E_NOMEM, "out of memory");
    st = specd_lora_read_mask_embedding(dir, *out, *n, n, err);
    if (st != SPECD_OK) {
        specd_free(*out);
        *out = NULL;
    }
    return st;
}

specd_status specd_mask_adapter_fail(specd_error *err, specd_status st, const char *policy,
                                     const char *adapter) {
    if (err) {
        char why[sizeof err->message];
        memcpy(why, err->message, sizeof why);
        why[sizeof why - 1] = '\0';
        specd_fail(err, st, "policy %s: adapter=%s: %s", policy, adapter, why);
    }
    return st;
}

specd_status specd_mask_load_adapter(const char *policy, const specd_policy_env *env,
                                     const char *dir, char **path, specd_lora **lora, float **vec,
                                     int32_t *n, specd_error *err) {
    *vec = NULL;
    *n = 0;
    const size_t len = strlen(dir) + 1;
    if (!(*path = specd_alloc(len)))
        return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", policy);
    memcpy(*path, dir, len);
    specd_status st;
    if (env->target) {
        st = specd_lora_create(env->target, dir, lora, err);
        int32_t m = 0;
        const float *v = st == SPECD_OK ? specd_lora_mask_embedding(*lora, &m) : NULL;
        if (v && m > 0) {
            if (!(*vec = specd_alloc_array((size_t)m, sizeof(float))))
                return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", policy);
            memcpy(*vec, v, (size_t)m * sizeof(float));
            *n = m;
        }
    } else {
        st = specd_mask_read_vector(dir, vec, n, err);
    }
    return st == SPECD_OK ? SPECD_OK : specd_mask_adapter_fail(err, st, policy, dir);
}
