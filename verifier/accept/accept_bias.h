/* The logit bias an acceptance engine applies, read back for a twin that must apply the same one
 * (session/spec_device.c builds the CUDA kernel's dense bias from it). Not a public header. */
#ifndef SPECD_VERIFIER_ACCEPT_BIAS_H
#define SPECD_VERIFIER_ACCEPT_BIAS_H

#include <stddef.h>

#include "specd/accept.h"

/* The engine's own copy of its bias list: *n entries sorted by token, no token twice (create
 * refuses duplicates), each value finite or -inf; valid until acc is destroyed. *bias is NULL
 * when *n is 0. */
void specd_accept_bias(const specd_accept *acc, const specd_logit_bias **bias, size_t *n);

#endif
