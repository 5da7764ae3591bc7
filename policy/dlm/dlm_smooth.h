/* Iteration smoothing (dInfer paper 001, App. A.1): the float-vector input row
 * (specd_step_layout.input_embd) of a position that stays masked, built from the previous
 * iteration's distribution there:
 *
 *   p_t[i] = softmax(z_t[i]),  Delta e_t[i] = p_t[i] W_emb,
 *   e_{t+1}[i] = e_mask + alpha_t Delta e_t[i]
 *
 * W_emb is the INPUT embedding matrix (the paper: "computed using the input embedding matrix").
 * Internal to libspecd; pure functions. */
#ifndef SPECD_POLICY_DLM_SMOOTH_H
#define SPECD_POLICY_DLM_SMOOTH_H

#include "specd/status.h"

#include <stdint.h>

/* Writes W_emb row `token` (n_embd floats) to out; returns 0 on success. Lets the caller keep the
 * table quantized (dequantize one row per call). */
typedef int (*specd_dlm_emb_row_fn)(void *ctx, int32_t token, float *out);

/* alpha_t = min(alpha_init + alpha_growth * t, alpha_max). The paper typesets the growth term as
 * alpha_growth^t, which at t = 0 would start above alpha_init (1 + 0.1 with its example) against
 * its own prose ("increases from a small initial value (e.g., 0.1) over decoding steps toward a
 * preset maximum"); the linear schedule is the reading that matches the prose. t counts the
 * iterations since the position entered the window, from 0. */
float specd_dlm_smooth_alpha(float alpha_init, float alpha_growth, float alpha_max, int32_t t);

#define SPECD_DLM_SMOOTH_MAX_ROWS 256

/* out[0..n_embd) = e_mask + alpha * sum_v softmax(logits)_v * W_emb[v]. Tokens whose probability is
 * below 1e-9 of the top one are skipped (their share of the sum is below 1e-9 * n_vocab of the
 * largest term), and when more than SPECD_DLM_SMOOTH_MAX_ROWS pass, the bound rises by factors
 * of 10 until at most that many do (a flat row's sum then covers only its likelier tokens, not
 * renormalized: an uncertain position gets a smaller step away from e_mask); *n_used, if not
 * NULL, counts the rows read. Fails (out untouched) on NaN/Inf
 * logits or alpha (SPECD_E_NUMERIC), bad sizes (SPECD_E_INVALID_ARG), or a row callback error
 * (SPECD_E_IO). scratch holds 2 * n_embd floats (a row and the running sum). */
specd_status specd_dlm_smooth_row(const float *logits, int32_t n_vocab, specd_dlm_emb_row_fn row,
                                  void *row_ctx, const float *e_mask, int32_t n_embd, float alpha,
                                  float *scratch, float *out, int32_t *n_used, specd_error *err);

#endif
