/* Prompt lookup: the continuation of the latest earlier copy of the history's last n tokens,
 * longest n first. What `ngram` proposes, and what `recycle` tries first with lookup=N. */
#ifndef SPECD_POLICY_AR_LOOKUP_H
#define SPECD_POLICY_AR_LOOKUP_H

#include <stdint.h>

/* Writes up to k tokens that followed the latest earlier occurrence of h's last n tokens, for the
 * largest n in [n_min, n_max] that has one, to out; returns how many (0: no match). */
int32_t specd_lookup_continuation(const int32_t *h, int64_t n_history, int32_t n_max,
                                  int32_t n_min, int32_t k, int32_t *out);

#endif
