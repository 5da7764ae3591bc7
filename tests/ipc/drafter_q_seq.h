/* The sequence the drafter-q tests (test_drafter_q, test_drafter_q_cuda) generate: a chat
 * prompt of the default model, sampled under REJECTION at T 0.8 with a fixed seed and a fixed
 * draft length, so that runs with different drafters or q paths can be compared. */
#ifndef SPECD_TESTS_IPC_DRAFTER_Q_SEQ_H
#define SPECD_TESTS_IPC_DRAFTER_Q_SEQ_H

#include <stdint.h>

#include "specd/spec.h"

enum { DRAFTER_Q_N_PROMPT = 10 };
static const int32_t DRAFTER_Q_PROMPT[DRAFTER_Q_N_PROMPT] = {1,   9690, 198, 2683, 314,
                                                             260, 1431, 28,  2,    198};

/* The sequence's parameters: n_gen tokens drafted by policy (with its options, or NULL). */
static inline specd_seq_params drafter_q_seq_params(const char *policy, const char *options,
                                                    int32_t n_gen) {
    specd_seq_params p = specd_seq_default_params();
    p.policy = policy;
    p.policy_options = options;
    p.rule = SPECD_ACCEPT_REJECTION;
    p.sampling.temperature = 0.8f;
    p.seed = 1234;
    p.max_tokens = n_gen;
    p.adaptive = 0;
    return p;
}

#endif
