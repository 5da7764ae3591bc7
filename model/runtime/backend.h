/* The runtime's backends as the context sees them: one table per backend, picked when a context
 * is created (rt_backend_for) and called for everything that touches the backend's memory.
 * context.c and forward.c validate every call first and keep the bookkeeping every backend
 * shares (sequence lengths, token rows, commits); a backend never sees a bad argument and never
 * calls back into them. Backends include this header and runtime_internal.h, never each other. */
#ifndef SPECD_MODEL_RUNTIME_BACKEND_H
#define SPECD_MODEL_RUNTIME_BACKEND_H

#include "model/runtime/recipe.h"

typedef struct rt_backend {
    const char *name;
    int device_logits; /* the step can leave its logits in device memory */
    /* After context.c's checks, with c->model, c->p, c->kv_dim and the shared host arrays set:
     * the backend's memory; sets c->kv_bytes and adds to c->total_bytes. On failure the context
     * is destroyed (destroy then frees what was made). */
    specd_status (*create)(specd_context *c, specd_error *err);
    void (*destroy)(specd_context *c);
    /* After specd_context_set_lora's checks (lora NULL: drop the adapter); c->lora is then set. */
    specd_status (*set_lora)(specd_context *c, const specd_lora *lora, specd_error *err);
    /* The validated step (c->tok filled): the forward pass and the requested rows; the cache's
     * lengths are unchanged (forward.c commits after). */
    specd_status (*extend)(const rt_step *s, specd_error *err);
    /* Keeps cache rows [0, from) then rows[0..n) in order, and sets the sequence's length. */
    specd_status (*kv_compact)(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                               const int32_t *rows, specd_error *err);
    /* Device memory in use (all 0 on the CPU). */
    void (*device_memory)(const specd_context *c, size_t *weights, size_t *kv, size_t *scratch);
    int32_t (*device_launches)(const specd_context *c);
    void (*graph_stats)(const specd_context *c, specd_device_graph_stats *out);
} rt_backend;

/* The backend of a device (SPECD_DEVICE_CPU or SPECD_DEVICE_CUDA; validated). */
const rt_backend *rt_backend_for(int32_t device);

/* The tables (context_cpu.c, context_cuda.c); rt_backend_for picks among them. */
extern const rt_backend rt_backend_cpu, rt_backend_cuda;

/* Host memory for a backend's state (context.c): n x size bytes, added to *total; NULL (and *ok
 * = 0) on overflow or failure, or when *ok is already 0. */
void *rt_grab(size_t n, size_t size, size_t *total, int *ok);

#endif
