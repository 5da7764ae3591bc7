/* What the mask-row policies (isd/risd, wedlm) share about their [MASK] rows: which token id the
 * mask is, the adapter's trained mask vector, and how an adapter failure is reported. */
#ifndef SPECD_POLICY_MASK_ROWS_H
#define SPECD_POLICY_MASK_ROWS_H

#include "specd/policy.h"
#include "specd/status.h"

/* The mask id: opt when >= 0, else the model's tokenizer.ggml.mask_token_id, else
 * SPECD_POLICY_DEFAULT_MASK (specd/policy.h); refused when outside the vocabulary. */
specd_status specd_mask_pick_id(const specd_policy_env *env, const char *policy, int32_t opt,
                                int32_t *out, specd_error *err);

/* Reads the mask embedding of the adapter in dir without a model into *out (owned by the caller,
 * NULL with *n = 0 when the adapter has none). Files that cannot be read here are the host's to
 * report when it loads the adapter (the path may name something only it can open): no vector
 * then; a malformed vector is refused. */
specd_status specd_mask_read_vector(const char *dir, float **out, int32_t *n, specd_error *err);

/* A mask-row policy's adapter (wedlm, sdar): dir copied to *path; with env->target the LoRA is
 * loaded into *lora, else only its mask vector is read (the host applies the LoRA from the
 * layout's lora_path). *vec receives a copy of the mask vector (n floats), NULL with *n = 0 when
 * the adapter has none. All three outputs are the caller's to free, also after a failure (which
 * names the policy and dir). */
specd_status specd_mask_load_adapter(const char *policy, const specd_policy_env *env,
                                     const char *dir, char **path, struct specd_lora **lora,
                                     float **vec, int32_t *n, specd_error *err);

/* Prefixes err's message with "policy P: adapter=DIR: ", keeping the loader's reason; returns st.
 */
specd_status specd_mask_adapter_fail(specd_error *err, specd_status st, const char *policy,
                                     const char *adapter);

#endif
