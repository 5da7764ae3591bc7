/* The CPU side of the tests that hold the device acceptance kernel (kernels/cuda/verify.cu) to
 * the CPU engine: the engine's decision for one device sequence, in the kernel's output form,
 * and the comparison of the two. Header-only (static inline): tests/gpu/emu/run compiles each test
 * as one file. */
#ifndef SPECD_TESTS_GPU_VERIFY_COMPARE_H
#define SPECD_TESTS_GPU_VERIFY_COMPARE_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_harness.h"
#include "specd/accept.h"
#include "specd/sampling.h"

/* Depth of tree node i given its parents (children of the root: 0). */
static inline int32_t verify_depth_of(const int32_t *parent, int32_t i) {
    int32_t n = 0;
    while (parent[i] >= 0) {
        i = parent[i];
        n++;
    }
    return n;
}

/* A sequence's rule and transforms (the rest of d as the caller sets it). */
static inline void verify_set_rule(specd_cuda_verify_seq *d, int rule, float temperature,
                                   int32_t top_k, float top_p, float min_p) {
    d->rule = rule;
    d->temperature = temperature;
    d->top_k = top_k;
    d->top_p = top_p;
    d->min_p = min_p;
}

/* A sequence's sampling as the CPU sampler takes it: d's transforms (GREEDY: temperature 0) and
 * the host bias list (n_bias entries of bias). */
static inline specd_sampling_params verify_sampling_of(const specd_cuda_verify_seq *d,
                                                       const specd_logit_bias *bias, int n_bias) {
    specd_sampling_params sp = specd_sampling_default_params();
    sp.temperature = d->rule == SPECD_ACCEPT_GREEDY ? 0.0f : d->temperature;
    sp.top_k = d->top_k;
    sp.top_p = d->top_p;
    sp.min_p = d->min_p;
    sp.bias = n_bias ? bias : NULL;
    sp.n_bias = (size_t)n_bias;
    return sp;
}

/* The CPU engine's decision for the tree or chain (k >= 1) in d: its rule, temperature and
 * relaxed tau from d, the rest of its sampling from sp (with the host bias list), its rows in
 * dense nv floats apart (n_rows of them), its q rows (k x nv) or NULL, its key's seed seed.
 * A failure of the engine is status -1: the device must report one too. */
static inline specd_cuda_verify_out verify_cpu_decide(const specd_cuda_verify_seq *d,
                                                      specd_sampling_params sp, const float *dense,
                                                      int32_t n_rows, int32_t nv, const float *q,
                                                      uint64_t seed) {
    specd_accept_params p = specd_accept_default_params();
    p.rule = (specd_accept_rule)d->rule;
    p.sampling = sp;
    p.sampling.temperature = d->temperature;
    p.relaxed_tau = d->relaxed_tau;
    p.max_k = SPECD_CUDA_VERIFY_MAX_K;
    p.max_vocab = nv;
    specd_accept *a = NULL;
    specd_error err;
    if (specd_accept_create(&p, &a, &err) != SPECD_OK) {
        printf("FAIL: accept_create: %s\n", err.message);
        exit(1);
    }
    specd_cuda_verify_out o;
    memset(&o, 0, sizeof o);
    int32_t tokens[SPECD_CUDA_VERIFY_MAX_SLOTS], path[SPECD_CUDA_VERIFY_MAX_K];
    specd_status st;
    int32_t n_acc = 0, n_emit = 0;
    if (d->tree) { /* the engine's tree takes its rows in slot order */
        float *rows = host_alloc((size_t)(d->k + 1) * (size_t)nv * sizeof(float));
        for (int s = 0; s <= d->k; s++)
            memcpy(rows + (size_t)s * nv, dense + (size_t)d->row[s] * nv,
                   (size_t)nv * sizeof(float));
        specd_tree_input in = {.n_nodes = d->k,
                               .parent = d->parent,
                               .token = d->draft,
                               .draft_probs = q,
                               .q_vocab = nv,
                               .target_logits = rows,
                               .n_vocab = nv,
                               .key = {seed, d->sequence, d->pos[0]}};
        specd_tree_result res = {.path = path, .tokens = tokens};
        st = specd_accept_tree(a, &in, &res, &err);
        n_acc = res.n_accepted;
        n_emit = res.n_emitted;
        free(rows);
    } else {
        specd_chain_input in = {.k = d->k,
                                .draft = d->draft,
                                .draft_probs = q,
                                .q_vocab = nv,
                                .target_logits = dense,
                                .n_vocab = nv,
                                .key = {seed, d->sequence, 0}};
        specd_chain_keys keys = {
            .n_rows = n_rows, .key_row = d->row, .bonus_row = d->row[d->k], .positions = d->pos};
        specd_chain_result res = {.tokens = tokens};
        st = specd_accept_chain_keyed(a, &in, &keys, &res, &err);
        n_acc = res.n_accepted;
        n_emit = res.n_emitted;
        for (int i = 0; i < n_acc; i++)
            path[i] = i;
    }
    specd_accept_destroy(a);
    if (st != SPECD_OK) {
        o.status = -1;
        return o;
    }
    o.n_accepted = n_acc;
    o.n_emitted = n_emit;
    memcpy(o.tokens, tokens, (size_t)n_emit * sizeof(int32_t));
    memcpy(o.path, path, (size_t)n_acc * sizeof(int32_t));
    return o;
}

/* The device's result says what the CPU engine decided (a CPU failure: any device failure). */
static inline int verify_same_out(const specd_cuda_verify_out *dev,
                                  const specd_cuda_verify_out *cpu) {
    if (cpu->status != 0) return dev->status != SPECD_CUDA_VERIFY_OK;
    if (dev->status != SPECD_CUDA_VERIFY_OK || dev->n_accepted != cpu->n_accepted ||
        dev->n_emitted != cpu->n_emitted)
        return 0;
    return memcmp(dev->tokens, cpu->tokens, (size_t)cpu->n_emitted * sizeof(int32_t)) == 0 &&
           memcmp(dev->path, cpu->path, (size_t)cpu->n_accepted * sizeof(int32_t)) == 0;
}

#endif
