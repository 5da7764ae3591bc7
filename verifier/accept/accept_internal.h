/* Test-only fault injection for the acceptance engine. The statistical suite must show it can
 * fail: it swaps one line of the REJECTION rule for a subtly wrong one and expects rejection. */
#ifndef SPECD_VERIFIER_ACCEPT_INTERNAL_H
#define SPECD_VERIFIER_ACCEPT_INTERNAL_H

#include "specd/accept.h"

typedef enum specd_accept_mutant {
    SPECD_MUTANT_NONE = 0,
    SPECD_MUTANT_RATIO_Q_OVER_P = 1,   /* accept with min(1, q/p) */
    SPECD_MUTANT_RESIDUAL_IS_P = 2,    /* on rejection resample from p, not max(0, p - q) */
    SPECD_MUTANT_NO_RENORMALISE = 3    /* tree: subtract the next q from an unnormalised residual */
} specd_accept_mutant;

void specd_accept_debug_mutate(specd_accept *acc, specd_accept_mutant mutant);

#endif
