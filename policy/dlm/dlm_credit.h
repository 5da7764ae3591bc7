/* Credit decoding (dInfer paper 001, App. B.2, eqs. 1-2). Internal to libspecd.
 *
 * eq. (1)  C_t^{i,v} = beta * C_{t-1}^{i,v} + p_theta^i(v | x_t)^gamma   if v = v* (current argmax)
 *          C_t^{i,v} = beta * C_{t-1}^{i,v}                                otherwise
 * eq. (2)  f~^i_v = f^i_v + alpha * log(1 + C_t^{i,v}),  p~ = softmax(f~)
 * and the commit decision is then made on p~ by the threshold rule ("CreditDecoding ... simply
 * replaces the original distribution p_theta with the enhanced p~").
 *
 * Credits are kept per LOGICAL position and only while the position is in the decoding window
 * (the paper's "within the current decoding block"). Per position only tokens that have been the
 * argmax carry credit (every other token's credit is 0 * beta^t = 0), so a position holds at most
 * SPECD_DLM_CREDIT_TOKENS entries; when a new argmax arrives with the table full, the entry with
 * the smallest credit is dropped (its eq. 2 boost alpha*log(1+C) <= alpha*C is the smallest). */
#ifndef SPECD_POLICY_DLM_CREDIT_H
#define SPECD_POLICY_DLM_CREDIT_H

#include "policy/dlm/dlm_commit.h"

#define SPECD_DLM_CREDIT_SLOTS 64
#define SPECD_DLM_CREDIT_TOKENS 16

typedef struct specd_dlm_credit_params {
    float alpha; /* eq. 2 weight, > 0 */
    float beta;  /* eq. 1 discount, in (0, 1) */
    float gamma; /* eq. 1 exponent, in (0, 1) */
} specd_dlm_credit_params;

/* The paper gives no values for alpha, beta, gamma; these are ours: alpha 1, beta 0.7,
 * gamma 0.5. */
specd_dlm_credit_params specd_dlm_credit_default_params(void);

typedef struct specd_dlm_credit_slot {
    int64_t lpos; /* logical position; -1 when the slot is free */
    int32_t n;
    int32_t token[SPECD_DLM_CREDIT_TOKENS];
    double credit[SPECD_DLM_CREDIT_TOKENS];
} specd_dlm_credit_slot;

/* Plain value state (no allocation): init, then update/forget. */
typedef struct specd_dlm_credit {
    specd_dlm_credit_params params;
    specd_dlm_credit_slot slot[SPECD_DLM_CREDIT_SLOTS];
} specd_dlm_credit;

/* Checks the parameters' domains (SPECD_E_INVALID_ARG) and clears all credit. */
specd_status specd_dlm_credit_init(specd_dlm_credit *c, specd_dlm_credit_params params,
                                   specd_error *err);

/* One iteration at logical position lpos with its logits row: applies eq. 1 (discount every token
 * held for lpos, add p(v*)^gamma to the argmax v* of the RAW distribution), then eq. 2, and writes
 * the summary of p~ (top-1, its probability, its entropy) to *fused. Call once per position per
 * iteration. Fails on NaN/Inf logits (SPECD_E_NUMERIC) or when SPECD_DLM_CREDIT_SLOTS positions
 * are already tracked (SPECD_E_STATE); state and *fused untouched on failure. */
specd_status specd_dlm_credit_update(specd_dlm_credit *c, int64_t lpos, const float *logits,
                                     int32_t n_vocab, specd_dlm_pos *fused, specd_error *err);

/* The credit currently held for (lpos, token); 0 when none. */
double specd_dlm_credit_get(const specd_dlm_credit *c, int64_t lpos, int32_t token);

/* Drops lpos's credit (committed, or out of the window). */
void specd_dlm_credit_forget(specd_dlm_credit *c, int64_t lpos);

#endif
