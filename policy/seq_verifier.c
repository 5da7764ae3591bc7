#include "policy/seq_verifier.h"

#include "common/status_internal.h"

specd_status specd_seq_verifier_create(const specd_policy_env *env, int32_t max_k,
                                       specd_accept **accept, specd_sampler **target,
                                       specd_error *err) {
    *accept = NULL;
    *target = NULL;
    specd_accept_params ap = specd_accept_default_params();
    ap.rule = env->rule;
    ap.sampling = env->sampling;
    ap.max_k = max_k;
    ap.max_vocab = env->n_vocab;
    ap.relaxed_tau = env->tau;
    specd_sampling_params plain = env->sampling;
    if (env->rule == SPECD_ACCEPT_GREEDY) plain.temperature = 0.0f;
    SPECD_TRY(specd_accept_create(&ap, accept, err));
    return specd_sampler_create(&plain, env->n_vocab, target, err);
}
