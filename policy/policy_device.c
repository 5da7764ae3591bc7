#include "policy/policy_device.h"

specd_context_params specd_policy_context_params(const specd_policy_env *env) {
    specd_context_params p = specd_context_default_params();
    if (env && env->device_set) {
        p.device = env->device;
        p.device_index = env->device_index;
    }
    return p;
}
