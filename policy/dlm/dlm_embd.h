/* Rows of a target's input token embedding (token_embd.weight) dequantized one at a time, for
 * iteration smoothing's expected embedding (dlm_smooth.h: Delta e = p W_emb). Internal; the rows
 * are borrowed from the model's mapped file, valid while the model lives. */
#ifndef SPECD_POLICY_DLM_EMBD_H
#define SPECD_POLICY_DLM_EMBD_H

#include "kernels/cpu/dtype.h"
#include "specd/runtime.h"

typedef struct specd_dlm_embd {
    const uint8_t *data;
    size_t row_bytes;
    const specd_dtype_traits *traits;
    int32_t n_embd, n_vocab;
} specd_dlm_embd;

/* Finds token_embd.weight of model as n_vocab rows of n_embd: SPECD_E_FORMAT when it is missing,
 * SPECD_E_UNSUPPORTED when its type or shape cannot be read so. */
specd_status specd_dlm_embd_open(const specd_model *model, int32_t n_vocab, int32_t n_embd,
                                 specd_dlm_embd *out, specd_error *err);

/* specd_dlm_emb_row_fn over a specd_dlm_embd (ctx): 0, or -1 for a token outside it. */
int specd_dlm_embd_row(void *ctx, int32_t token, float *out);

#endif
