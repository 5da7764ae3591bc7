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
/* Tree proposals (policy ABI 2 propose_tree): with branch > 1 the root's `branch` best tokens
 * (the drafter's own choice first, then the next highest logits) each start a greedy chain; the
 * first chain is as deep as the chain proposal, the others share the rest of max_nodes. With
 * branch 1 it is the chain proposal. */
void specd_drafter_set_branch(specd_drafter *d, int32_t branch);
specd_status specd_drafter_propose_tree(specd_drafter *d, const int32_t *history, int64_t n,
                                        int32_t max_nodes, int32_t max_depth, int32_t *parent,
                                        int32_t *token, int32_t *n_nodes, float *q, int *has_q,
                                        specd_error *err);

#endif
