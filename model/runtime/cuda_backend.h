/* The runtime's CUDA backend: a context whose weights, KV cache and forward pass live on a CUDA
 * device (specd_context_params.device = SPECD_DEVICE_CUDA). libspecd reaches the device only
 * through kernels/cuda/cudart.h (the runtime, opened with dlopen) and the kernel table of
 * kernels/cuda/cuda_kernels.h. Its table (rt_backend_cuda, context_cuda.c) is what context.c
 * and forward.c call after their checks; this side never sees a bad argument. */
#ifndef SPECD_MODEL_RUNTIME_CUDA_BACKEND_H
#define SPECD_MODEL_RUNTIME_CUDA_BACKEND_H

#include "model/runtime/backend.h"
#include "model/runtime/cuda_graph.h"

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudart.h"

/* How a matrix's activations are prepared: floats as they are, or quantized rows (Q8_1-style
 * blocks for Q4_0/Q4_1/Q8_0 weights, Q8_K super-blocks for Q4_K/Q6_K), as the CPU's vec_dot_type.
 */
enum rt_cuda_vec { RT_VEC_F, RT_VEC_Q8, RT_VEC_Q8K };

typedef struct rt_cuda_matrix {
    const void *data; /* device, the GGUF blocks as stored */
    uint32_t type;
    int32_t n_in, n_out;
    int vec; /* enum rt_cuda_vec */
} rt_cuda_matrix;

typedef struct rt_cuda_layer {
    const float *vec[RT_N_LAYER_VEC]; /* device, by enum rt_vec; NULL: none */
    rt_cuda_matrix w[RT_N_PROJ];
} rt_cuda_layer;

typedef struct rt_cuda_lora_pair {
    const float *a, *b; /* device; a NULL: the module is not adapted */
} rt_cuda_lora_pair;

typedef struct rt_cuda {
    const specd_cuda_kernels *k;
    const specd_cudart *rt;
    int device;
    int32_t n_layers; /* layers run (the n_layers cut), the only ones uploaded and cached */
    void *stream;

    struct rt_cuda_weights *shared; /* the model's weights on this device (context_cuda.c) */
    void *weights;                  /* its one allocation, holding every tensor below */
    size_t weights_bytes;
    rt_cuda_layer *layers; /* host array, every layer of the model */
    rt_cuda_matrix tok_embd, output;
    const float *output_norm;

    uint16_t *kv; /* K planes [layer][seq][n_ctx][kv_dim], then V planes in the same layout, F16 */
    size_t kv_bytes;
    size_t kv_plane; /* n_seq * n_ctx * kv_dim elements between layers */

    void *scratch; /* one allocation: activations, attention partials, the step's inputs */
    size_t scratch_bytes;
    float *x, *xn, *tmp, *q, *k_rows, *v_rows, *att, *g, *u, *logits, *att_work;
    size_t att_work_floats;
    void *xq; /* quantized activation rows */

    /* The step's inputs: laid out the same in the pinned staging buffer and on the device, so
     * one copy of each region uploads them. Offsets in bytes. */
    void *in_dev, *in_host;
    size_t in_bytes, ints_bytes; /* ints_bytes: the index region, copied whole */
    size_t off_ids, off_pos, off_gate, off_kv_dst, off_out, off_src, off_dst, off_mask, off_embd;
    int32_t mask_words;

    void *lora_mem; /* the adapter set with specd_context_set_lora, and its scratch */
    size_t lora_bytes;
    rt_cuda_lora_pair *lora_pairs; /* host array, n_layers x RT_N_PROJ */
    float *lora_work;
    size_t lora_work_floats;
    int32_t lora_rank;
    float lora_scale;
    int32_t last_launches; /* kernels the last successful extend enqueued */

    /* Step graphs (model/runtime/cuda_graph.h): one executable graph per step key, replayed
     * instead of launching the step's kernels one by one. */
    int graphs_on; /* SPECD_CUDA_GRAPHS not 0, the runtime has graphs, no capture failed */
    rt_graph_cache graphs;
    int32_t *graph_key; /* key buffer, rt_graph_key_capacity(n_batch) ints */
    int32_t graph_key_cap;
    int64_t graph_captures, graph_replays, graph_fallbacks;
    int32_t last_host_launches; /* launch calls the last step's kernels took: 1 as a graph */
    int last_graphed;           /* the last step ran as a graph */
} rt_cuda;

/* The validated step (forward_cuda.c): runs it on the device and copies the requested rows
 * back; the caller then commits (kv_len and commit flags). On a device failure kv_len is
 * unchanged. s->device_logits (may be NULL) receives the device address of the n_out logits
 * rows (the context's scratch: valid until its next call). */
specd_status rt_cuda_extend(const rt_step *s, specd_error *err);
/* The cache's row moves on the device (forward_cuda.c; validated arguments). */
specd_status rt_cuda_kv_compact(specd_context *c, int32_t seq, int32_t from, int32_t n_rows,
                                const int32_t *rows, specd_error *err);

/* A failed device call as a status: a refused launch (SPECD_E_INTERNAL, the launcher's reason)
 * or a CUDA error (SPECD_E_IO, the runtime's text). */
specd_status rt_cuda_fail(const rt_cuda *g, specd_error *err, const char *what, int rc);

#endif
