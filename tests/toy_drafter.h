/* A toy target and two toy host drafters for the remote-verifier tests (test_spec_remote,
 * test_ipc_cuda_e2e): the "target" is a deterministic function of (position, token), so the
 * host loop needs no model. Define TOY_V (the vocabulary) before including.
 *   toy_ops:   a deterministic drafter, the target's argmax chain with every third proposal
 *              wrong (steps accept and reject); no q.
 *   toy_q_ops: a sampling drafter: draft i is drawn (a fixed hash of the position as the
 *              uniform) from q_i = softmax(target row / 1.5), which it reports, so REJECTION
 *              reads q; every third q row is made flat (the target disagrees more often).
 * toy_q_corrupt_at >= 0: the first proposal from a history at least that long gets a NaN in its
 * q row 1 (a row that is not a distribution), once: the engines refuse the step. */
#ifndef SPECD_TESTS_TOY_DRAFTER_H
#define SPECD_TESTS_TOY_DRAFTER_H

#include <math.h>
#include <stdint.h>

#include "specd/policy.h"

#ifndef TOY_V
#error "define TOY_V before including toy_drafter.h"
#endif

/* The toy target's logits for the token after `token` at position `pos`. */
static void target_row(int32_t pos, int32_t token, float *row) {
    uint32_t h = (uint32_t)pos * 2654435761u ^ (uint32_t)token * 40503u;
    for (int32_t x = 0; x < (int32_t)TOY_V; x++) {
        uint32_t y = (h ^ (uint32_t)x * 2246822519u) * 3266489917u;
        row[x] = (float)(y >> 22) * 0.01f; /* [0, 10.24) */
    }
    row[h % (uint32_t)TOY_V] += 8.0f; /* a likely token, so sampled steps accept some drafts */
}

static int32_t argmax(const float *row) {
    int32_t best = 0;
    for (int32_t x = 1; x < (int32_t)TOY_V; x++)
        if (row[x] > row[best]) best = x;
    return best;
}

static float scratch_row[TOY_V];
static specd_status toy_create(const specd_policy_env *env, const char *o, void **st,
                               specd_error *err) {
    (void)env, (void)o, (void)err;
    *st = NULL;
    return SPECD_OK;
}
static void toy_destroy(void *st) {
    (void)st;
}
static specd_status toy_propose(void *st, const int32_t *history, int64_t n, int32_t max_draft,
                                int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                specd_error *err) {
    (void)st, (void)q, (void)err;
    int32_t tok = history[n - 1];
    for (int32_t i = 0; i < max_draft; i++) {
        target_row((int32_t)(n - 1 + i), tok, scratch_row);
        tok = argmax(scratch_row);
        if ((n + i) % 3 == 0) tok = (tok + 1) % (int32_t)TOY_V;
        draft[i] = tok;
    }
    *n_draft = max_draft;
    *has_q = 0;
    return SPECD_OK;
}
static const specd_policy_ops toy_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                         .name = "toy",
                                         .create = toy_create,
                                         .destroy = toy_destroy,
                                         .propose = toy_propose};

static int64_t toy_q_corrupt_at = -1;

/* q_i and a draw from it: the inverse CDF at a hash of (pos) in [0, 1). */
static int32_t toy_q_row(int32_t pos, int32_t tok, float *q) {
    target_row(pos, tok, scratch_row);
    double z = 0.0;
    for (int32_t x = 0; x < (int32_t)TOY_V; x++)
        z += q[x] = pos % 3 == 0 ? 1.0f : expf(scratch_row[x] / 1.5f);
    for (int32_t x = 0; x < (int32_t)TOY_V; x++) q[x] = (float)(q[x] / z);
    double u = (double)(((uint32_t)pos * 2654435761u) >> 8) / (double)(1u << 24), c = 0.0;
    int32_t pick = -1;
    for (int32_t x = 0; x < (int32_t)TOY_V; x++) {
        if (q[x] > 0.0f) pick = x; /* the last token with q > 0 when rounding runs past */
        if ((c += q[x]) > u && q[x] > 0.0f) return x;
    }
    return pick;
}

static specd_status toy_q_propose(void *st, const int32_t *history, int64_t n, int32_t max_draft,
                                  int32_t *draft, int32_t *n_draft, float *q, int *has_q,
                                  specd_error *err) {
    (void)st, (void)err;
    int32_t tok = history[n - 1];
    for (int32_t i = 0; i < max_draft; i++) {
        float *qi = q + (size_t)i * TOY_V;
        tok = draft[i] = toy_q_row((int32_t)(n - 1 + i), tok, qi);
    }
    if (toy_q_corrupt_at >= 0 && n >= toy_q_corrupt_at && max_draft > 1) {
        q[TOY_V + (size_t)draft[1]] = NAN; /* once: the step's q row 1 */
        toy_q_corrupt_at = -1;
    }
    *n_draft = max_draft;
    *has_q = 1;
    return SPECD_OK;
}
static const specd_policy_ops toy_q_ops = {.abi_version = SPECD_POLICY_ABI_VERSION,
                                           .name = "toy-q",
                                           .flags = SPECD_POLICY_NEEDS_Q,
                                           .create = toy_create,
                                           .destroy = toy_destroy,
                                           .propose = toy_q_propose};

#endif
