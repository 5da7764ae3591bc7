/* Whether a drafter's vocabulary can stand in for the target's: a draft token id must mean the
 * same text to both models, or verification compares unrelated tokens. */
#ifndef SPECD_POLICY_VOCAB_COMPAT_H
#define SPECD_POLICY_VOCAB_COMPAT_H

#include "specd/gguf.h"
#include "specd/status.h"

/* SPECD_OK when both files have the same vocabulary size, BOS/EOS ids, token texts and token
 * types; otherwise SPECD_E_MISMATCH naming the first difference. */
specd_status specd_vocab_compat_check(const specd_gguf *target, const specd_gguf *draft,
                                      specd_error *err);

#endif
