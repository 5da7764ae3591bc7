/* The mask rows' input of the block and window policies (sdar, wedlm, simsd): the adapter (its
 * path and, when specd runs the target, its LoRA), the adapter's trained mask vector, and the
 * step input rows that carry that vector into the mask rows. */
#ifndef SPECD_POLICY_DLM_INPUT_H
#define SPECD_POLICY_DLM_INPUT_H

#include "specd/policy.h"
#include "specd/runtime.h"
#include "specd/status.h"

#include <stdint.h>

typedef struct specd_dlm_input {
    char *adapter;      /* the adapter's directory (the layout's lora_path), or NULL */
    specd_lora *lora;   /* the loaded LoRA, or NULL (none, or the host applies it) */
    float *mask_vec;    /* n_embd: the mask rows' input vector, or NULL (mask token embedding) */
    int32_t n_embd;
    float *embd;        /* rows x n_embd step input rows, or NULL when mask_vec is */
    uint8_t *embd_rows; /* rows flags: the rows that take embd (the masks) */
} specd_dlm_input;

/* The training record of the adapter in dir (specd_lora_read_info) into *info. One that cannot
 * be read here reads as no record (SPECD_OK): the path may be one only the host opens (it loads
 * the LoRA), and when specd runs the target the load reports it. Other failures name the policy
 * and dir. */
specd_status specd_dlm_adapter_info(const char *policy, const char *dir, specd_lora_info *info,
                                    specd_error *err);

/* The adapter in dir and its mask vector into *in (specd_mask_load_adapter); n_embd is the
 * vector's length when it has one. */
specd_status specd_dlm_input_load(specd_dlm_input *in, const char *policy,
                                  const specd_policy_env *env, const char *dir, specd_error *err);

/* With a mask vector: the step input rows (rows x n_embd floats, rows flags) it is copied into.
 * Without one nothing (the mask rows read the mask token's embedding). */
specd_status specd_dlm_input_rows(specd_dlm_input *in, const char *policy, int32_t rows,
                                  specd_error *err);

/* Frees what *in holds (a zeroed one holds nothing). */
void specd_dlm_input_free(specd_dlm_input *in);

#endif
