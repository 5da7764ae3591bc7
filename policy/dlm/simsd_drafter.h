/* SimSD's drafter (policy/dlm/simsd.c): a block-diffusion model that decodes one block slot per step
 * in its own order (the most confident masked slot first, SDAR's low-confidence remasking) and
 * keeps the distribution q each draft was drawn from. It runs in its own context, with its own
 * KV cache of the decided tokens (no KV is shared with the target): the target model cut after
 * n_layers blocks (0 = all: the block model drafting for itself, the paper's self-draft) plus a
 * LoRA gated on the block rows, as the sdar policy runs them (memory base-causal, block rows
 * bidirectional, unshifted: block row i predicts slot i). */
#ifndef SPECD_POLICY_SIMSD_DRAFTER_H
#define SPECD_POLICY_SIMSD_DRAFTER_H

#include "policy/dlm/simsd_layout.h"
#include "specd/policy.h"

typedef struct specd_simsd_drafter specd_simsd_drafter;

typedef struct specd_simsd_draft {
    int32_t gamma;     /* slots drafted */
    int32_t token[SPECD_SIMSD_MAX_B]; /* per block slot: its draft (drafted slots), else as the block was */
    int32_t tau[SPECD_SIMSD_MAX_B];  /* per block slot: the draft step (1..gamma) that decided it, 0 if none */
    int32_t order[SPECD_SIMSD_MAX_B]; /* per draft step r (0-based): the slot it decided */
    float *q;          /* gamma rows of n_vocab: step r's q (the sequence's sampling transform);
                        * owned by the drafter, valid until its next draft */
    float *logits;     /* gamma rows of n_vocab: step r's raw logits at the slot it decided (the
                        * sequential denoising state's distribution there) */
} specd_simsd_draft;

/* model: the model to run; lora: the adapter its block rows use (its mask vector, if it has
 * one, replaces the mask token's embedding), or NULL for base weights. Both borrowed: they must
 * outlive the drafter (a spec shares them between its sequences). n_threads: the drafter
 * context's workers (0 = online cores). */
specd_status specd_simsd_drafter_create(const specd_policy_env *env, const struct specd_model *model,
                                        int32_t n_layers, const struct specd_lora *lora, int32_t b,
                                        int32_t mask_id, int32_t n_threads,
                                        specd_simsd_drafter **out, specd_error *err);
void specd_simsd_drafter_destroy(specd_simsd_drafter *d);

/* The longest decided history (m below) the drafter's context holds. */
int64_t specd_simsd_drafter_capacity(const specd_simsd_drafter *d);

/* Drafts gamma of the masked slots (block[i] < 0) of the block after decided[0..m) (slot i at
 * logical position m + i; block[i] >= 0: decided earlier, seen as that token): gamma forwards of
 * the b block rows, each deciding one slot. The draws are keyed on the slot's position (the draft
 * stream, independent of the verifier's). Fewer than gamma masked slots is an error. */
specd_status specd_simsd_drafter_draft(specd_simsd_drafter *d, const int32_t *decided, int64_t m,
                                       const int32_t *block, int32_t gamma,
                                       specd_simsd_draft *out, specd_error *err);

#endif
