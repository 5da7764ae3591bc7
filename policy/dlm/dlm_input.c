#include "policy/dlm/dlm_input.h"

#include "common/alloc.h"
#include "common/status_internal.h"
#include "policy/mask_rows.h"

#include <string.h>

specd_status specd_dlm_adapter_info(const char *policy, const char *dir, specd_lora_info *info,
                                    specd_error *err) {
    specd_status st = specd_lora_read_info(dir, info, err);
    if (st != SPECD_OK && st != SPECD_E_IO) return specd_mask_adapter_fail(err, st, policy, dir);
    return SPECD_OK;
}

specd_status specd_dlm_input_load(specd_dlm_input *in, const char *policy,
                                  const specd_policy_env *env, const char *dir, specd_error *err) {
    int32_t n = 0;
    SPECD_TRY(specd_mask_load_adapter(policy, env, dir, &in->adapter, &in->lora, &in->mask_vec, &n,
                                      err));
    if (in->mask_vec) in->n_embd = n;
    return SPECD_OK;
}

specd_status specd_dlm_input_rows(specd_dlm_input *in, const char *policy, int32_t rows,
                                  specd_error *err) {
    if (!in->mask_vec) return SPECD_OK;
    if (!(in->embd = specd_alloc_array((size_t)rows * (size_t)in->n_embd, sizeof(float))) ||
        !(in->embd_rows = specd_alloc_array((size_t)rows, sizeof(uint8_t))))
        return specd_fail(err, SPECD_E_NOMEM, "policy %s: out of memory", policy);
    return SPECD_OK;
}

void specd_dlm_input_free(specd_dlm_input *in) {
    specd_lora_destroy(in->lora);
    specd_free(in->adapter);
    specd_free(in->mask_vec);
    specd_free(in->embd);
    specd_free(in->embd_rows);
    memset(in, 0, sizeof *in);
}
