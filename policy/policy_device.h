/* The context parameters a policy starts from for a context of its own (a draft model's, a
 * head's, a drafter's): specd_context_default_params() on the device the host chose for it
 * (specd_policy_env.device), so every context of a run lives where the run does. */
#ifndef SPECD_POLICY_DEVICE_H
#define SPECD_POLICY_DEVICE_H

#include "specd/policy.h"
#include "specd/runtime.h"

specd_context_params specd_policy_context_params(const specd_policy_env *env);

#endif
