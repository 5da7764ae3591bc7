/* The fill rule a DLM policy (wedlm, sdar) applies to its masked slots each step: eq. 11 (WeDLM)
 * or one of dInfer's commit rules (policy/dlm/dlm_commit.h), parsed from the policy's options. Internal
 * to libspecd. */
#ifndef SPECD_POLICY_DLM_RULES_H
#define SPECD_POLICY_DLM_RULES_H

#include "policy/dlm/dlm_commit.h"
#include "policy/dlm/dlm_credit.h"
#include "policy/options.h"
#include "specd/status.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SPECD_DLM_ENTROPY,   /* eq. 11: H + lambda * distance < tau */
    SPECD_DLM_THRESHOLD, /* p >= tau */
    SPECD_DLM_HIER,      /* hierarchical: tau_high = tau, tau_low */
    SPECD_DLM_CREDIT     /* threshold on credit's fused p~ (the caller fuses, dlm_credit.h) */
} specd_dlm_rule_kind;

typedef struct specd_dlm_rule {
    specd_dlm_rule_kind kind;
    float tau, tau_low, lambda;
} specd_dlm_rule;

/* The rule kind (select=, an index in SPECD_DLM_SELECT_CHOICES) and the tau=, tau_low=, lambda=
 * values (NAN when absent) into *out, with each rule's paper defaults (eq. 11: tau 0.3, lambda
 * 0.1; dInfer App. D: 0.8, and 0.92 / 0.62 for hierarchical). A tau above 1 for a rule other than
 * entropy is SPECD_E_INVALID_ARG naming policy and key. */
specd_status specd_dlm_rule_parse(const char *policy, specd_dlm_rule_kind kind, float tau,
                                  float tau_low, float lambda, specd_dlm_rule *out,
                                  specd_error *err);

/* select='s choices, in specd_dlm_rule_kind's order */
#define SPECD_DLM_SELECT_CHOICES "entropy|threshold|hierarchical|credit"

/* The rule's option rows, for a policy whose options struct T has float tau, tau_low, lambda
 * (set to NAN before parsing). */
#define SPECD_DLM_RULE_ROWS(T)                                                                     \
    {.key = "tau", .kind = SPECD_OPTION_FLOAT, .offset = offsetof(T, tau),                         \
     .dflt = "entropy 0.3; threshold and credit 0.8; hierarchical 0.92", .min = 0, .max = 100,    \
     .flags = SPECD_OPTION_DEFAULT_DERIVED,                                                        \
     .help = "the rule's threshold (at most 1 except for entropy)"},                              \
    {.key = "tau_low", .kind = SPECD_OPTION_FLOAT, .offset = offsetof(T, tau_low), .dflt = "0.62", \
     .min = 0, .max = 1, .flags = SPECD_OPTION_DEFAULT_DERIVED,                                    \
     .help = "hierarchical's lower threshold"},                                                   \
    {.key = "lambda", .kind = SPECD_OPTION_FLOAT, .offset = offsetof(T, lambda), .dflt = "0.1",   \
     .min = 0, .max = 100, .flags = SPECD_OPTION_DEFAULT_DERIVED,                                  \
     .help = "eq. 11's distance penalty"}

/* fill[i] = 1 for the masked (elig) slots the rule picks; *n_fill counts them. Every rule picks at
 * least one so that a decoder with no exact row never stalls; with force 0 a pick that passed no
 * threshold, only that guarantee, is taken back (the caller has another way forward). Fails as
 * the rules do (no eligible slot, non-finite confidence). */
specd_status specd_dlm_rule_apply(const specd_dlm_rule *r, const specd_dlm_pos *pos,
                                  const uint8_t *elig, int32_t n, int force, uint8_t *fill,
                                  int32_t *n_fill, specd_error *err);

/* specd_dlm_rule_apply, then each fill taken: token[i] = pos[i].token, and the credit of its
 * logical position first + i forgotten (credit: the table the rule's positions were scored
 * with). */
specd_status specd_dlm_rule_fill(const specd_dlm_rule *r, const specd_dlm_pos *pos,
                                 const uint8_t *elig, int32_t n, int force,
                                 specd_dlm_credit *credit, int64_t first, int32_t *token,
                                 int32_t *n_fill, specd_error *err);

/* Confidence summary (specd_dlm_pos) of each slot masked in token[0..n) (token[i] < 0) from rows,
 * n rows of n_vocab logits where row i predicts slot i; elig[i] = 1 for those. A row with a NaN/Inf
 * logit leaves its slot ineligible, with a warning naming policy and the slot's logical position
 * first + i: the slot stays masked and decoding goes on. Fails only on bad arguments. */
specd_status specd_dlm_masked_confidences(const char *policy, int64_t first, const float *rows,
                                          int32_t n_vocab, const int32_t *token, int32_t n,
                                          specd_dlm_pos *pos, uint8_t *elig, specd_error *err);

/* Static decoding's one reveal (paper 002's static regime, the backbone MRP drafts for): the most
 * confident eligible slot, highest p, ties to the leftmost; -1 when none is eligible. A policy
 * option of its own (sdar's select=static), not a specd_dlm_rule kind: wedlm's rule set is
 * unchanged. */
int32_t specd_dlm_static_pick(const specd_dlm_pos *pos, const uint8_t *elig, int32_t n);

#endif
