/* A drafter that runs a model (a separate GGUF, or the target cut after L layers) to propose
 * tokens; shared by the draft and layerskip policies. */
#ifndef SPECD_POLICY_DRAFT_MODEL_H
#define SPECD_POLICY_DRAFT_MODEL_H

#include "specd/policy.h"

typedef struct specd_drafter specd_drafter;

/* Either borrowed (a model to run, e.g. the target) or path (a GGUF to load and check against
 * env->target's vocabulary). n_layers = 0 runs every layer. */
specd_status specd_drafter_create(const specd_policy_env *env, const struct specd_model *borrowed,
                                  const char *path, int32_t n_layers, int32_t k, int sample,
                                  specd_drafter **out, specd_error *err);
void specd_drafter_destroy(specd_drafter *d);
specd_status specd_drafter_propose(specd_drafter *d, const int32_t *history, int64_t n,
                                   int32_t max_draft, int32_t *draft, int32_t *n_draft, float *q,
                                   int *has_q, specd_error *err);

#endif
