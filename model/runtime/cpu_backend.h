/* The runtime's CPU backend: the weights as the model maps them, an F16 KV cache and scratch in
 * host memory (the CPU fields of specd_context), and the forward pass's kernels on the context's
 * thread pool. context_cpu.c holds its memory and table, forward_cpu.c its kernels. */
#ifndef SPECD_MODEL_RUNTIME_CPU_BACKEND_H
#define SPECD_MODEL_RUNTIME_CPU_BACKEND_H

#include "model/runtime/backend.h"

/* most query rows of one attention tile (forward_cpu.c) */
enum { ATT_TILE = 16 };

/* The CPU's kernels (forward_cpu.c), one table per numerics mode: llama.cpp's activation
 * quantization and dot products, or the fast kernels of kernels/cpu/matmul_fast.h where a
 * weight type has them. They differ in prepare and matmul only. */
extern const rt_ops rt_cpu_ops_llama, rt_cpu_ops_fast;

/* The validated step on the thread pool (forward_cpu.c). */
specd_status rt_cpu_extend(const rt_step *s, specd_error *err);

static inline uint16_t *rt_kv_k(const specd_context *c, int32_t seq, int32_t layer) {
    size_t per_layer = 2 * (size_t)c->p.n_ctx * c->kv_dim;
    return c->kv + ((size_t)seq * (size_t)c->model->info.n_layer + (size_t)layer) * per_layer;
}
static inline uint16_t *rt_kv_vt(const specd_context *c, int32_t seq, int32_t layer) {
    return rt_kv_k(c, seq, layer) + (size_t)c->p.n_ctx * c->kv_dim;
}

#endif
