/* Shared between the runtime's files: the loaded model, LoRA adapters and the context. */
#ifndef SPECD_MODEL_RUNTIME_INTERNAL_H
#define SPECD_MODEL_RUNTIME_INTERNAL_H

#include "specd/runtime.h"

#include "common/threadpool.h"
#include "kernels/cpu/dtype.h"

/* A weight matrix y = W x: n_out rows of n_in columns of type `type` (ggml ne[0] = n_in). */
typedef struct rt_matrix {
    const void *data;
    uint32_t type;
    int64_t n_in, n_out;
    const specd_dtype_traits *traits;  /* the weight type's kernels */
    const specd_dtype_traits *vtraits; /* its vec_dot_type's (quantizes activations) */
    size_t xq_row_bytes;               /* an activation row of n_in in vec_dot_type */
} rt_matrix;

enum rt_proj { RT_Q, RT_K, RT_V, RT_O, RT_GATE, RT_UP, RT_DOWN, RT_N_PROJ };

typedef struct rt_layer {
    const float *attn_norm, *ffn_norm;
    const float *q_norm, *k_norm; /* qwen3, else NULL */
    const float *bq, *bk, *bv;    /* qwen2, else NULL */
    rt_matrix w[RT_N_PROJ];
} rt_layer;

struct specd_model {
    specd_gguf *gguf;
    specd_model_info info;
    rt_matrix tok_embd; /* rows are token embeddings (n_in = n_embd, n_out = n_vocab) */
    rt_matrix output;   /* the head: output.weight or tok_embd */
    const float *output_norm;
    rt_layer *layers;
};

/* One LoRA pair for one projection of one layer, as f32: a [r][n_in], b [n_out][r]. */
typedef struct rt_lora_pair {
    float *a, *b;
} rt_lora_pair;

struct specd_lora {
    int32_t rank;
    float scale; /* alpha / r */
    int32_t n_layer;
    int64_t n_in[RT_N_PROJ], n_out[RT_N_PROJ];
    rt_lora_pair *pairs; /* n_layer x RT_N_PROJ; a == NULL when the module is not adapted */
    float *mask_embd; /* n_embd: the trained mask-row input (specd_lora_mask_embedding), or NULL */
    int32_t n_mask_embd;
};

specd_status rt_matrix_init(rt_matrix *m, const specd_gguf_tensor *t, int64_t n_in, int64_t n_out,
                            specd_error *err);

/* SPECD_PROFILE=1 (read at context creation): the forward adds each thread's time per op to
 * per-extend-size buckets, and specd_context_destroy prints them to stderr, so that where an
 * extend of k rows spends its time (and how much goes to barriers and thread wake-ups) can be
 * read without an external profiler. Off, each mark is one branch on a NULL pointer.
 * SPECD_PROFILE=cpu counts each thread's CPU time instead of wall time (a system call per mark,
 * but a loaded machine's preemptions stay out of the figures; wake-ups then read 0). */
enum rt_prof_op {
    PR_EMBED,   /* token embeddings + RoPE angles */
    PR_NORM,    /* rms norms and residual adds */
    PR_QUANT,   /* activation rows to the weights' vec_dot type */
    PR_MM_QKV,  /* Q, K, V projections */
    PR_ROPE_KV, /* LoRA/bias/QK norm, RoPE, K/V rows into the cache */
    PR_ATTN,    /* attention over the cache */
    PR_MM_O,    /* attention output projection */
    PR_MM_GU,   /* FFN gate and up projections */
    PR_SWIGLU,
    PR_MM_DOWN, /* FFN down projection */
    PR_HEAD,    /* output head matmul */
    PR_BARRIER, /* waiting at barriers (load imbalance + the barrier itself) */
    PR_WAKE,    /* from the dispatch to this thread's start (thread 0: 0) */
    PR_N
};
enum { PR_BUCKETS = 18 }; /* extends of 1..16 tokens, 17..64, more */

typedef struct rt_prof_thread {
    uint64_t ns[PR_BUCKETS][PR_N];
    uint64_t last; /* time of the last mark */
    uint64_t *cur; /* ns[bucket] of the extend in flight */
    int cpu_time;  /* copied from rt_prof */
    char pad[64];
} rt_prof_thread;

typedef struct rt_prof {
    int n_threads;
    int cpu_time; /* SPECD_PROFILE=cpu */
    uint64_t calls[PR_BUCKETS], tokens[PR_BUCKETS], wall_ns[PR_BUCKETS];
    uint64_t t_dispatch; /* when the extend in flight dispatched its threads */
    rt_prof_thread *th;  /* n_threads */
} rt_prof;

static inline int rt_prof_bucket(int32_t n_tok) {
    return n_tok <= 16 ? n_tok - 1 : n_tok <= 64 ? 16 : 17;
}

/* Per-token bookkeeping of the extend in flight. */
typedef struct rt_token {
    int32_t token;
    int32_t seq;   /* sequence (cache) index */
    int32_t i;     /* index among its sequence's new tokens */
    int32_t n_new; /* its sequence's new-token count */
    int32_t l0;    /* its sequence's kv_len before the extend */
    int32_t pos;
    float gate;             /* LoRA gate, 0 = none */
    const uint8_t *visible; /* its visibility row (l0 + n_new bytes) or NULL = causal */
    int32_t n_pos;          /* cache positions attention covers: through its last visible one */
    const float *embd;      /* its input vector (n_embd) in place of the token's embedding */
} rt_token;

struct specd_context {
    const specd_model *model;
    specd_context_params p;
    const struct rt_backend *backend; /* picked at creation (backend.h) */
    int n_threads;
    const specd_lora *lora;
    size_t kv_dim;   /* n_head_kv * head_dim */
    int32_t *kv_len; /* per sequence */
    size_t kv_bytes, total_bytes;
    rt_token *tok;     /* n_batch: the extend in flight */
    uint8_t *mark;     /* max(n_batch, n_seq) flags for validation */
    int32_t *out_rows; /* n_batch */
    rt_prof *prof;     /* SPECD_PROFILE, else NULL */

    /* The CPU backend's (cpu_backend.h) */
    specd_threadpool *pool;
    const struct rt_ops *ops; /* its kernels in the context's numerics mode (forward_cpu.c) */
    int simd; /* the specd_cpu_path in use (kernels/cpu/cpu_dispatch.h), read once */
    int fast; /* SPECD_NUMERICS_FAST: the matmuls' fast order (kernels/cpu/matmul_fast.c) */
    int32_t lora_rank_cap; /* per-thread LoRA scratch capacity */
    float *lora_scratch;   /* n_threads x lora_rank_cap */
    uint16_t *kv;          /* [seq][layer]: K [n_ctx][kv_dim] then V^T [kv_dim][n_ctx], F16 (V is
                              transposed as in llama.cpp's cache, so attention's V dots run along
                              positions in its order) */
    /* scratch for n_batch tokens */
    float *x, *xn, *q, *k, *v, *att, *tmp, *g, *u;
    float *rope_cos, *rope_sin; /* per token: n_rot / 2 angles, the same in every layer */
    void *xq;                   /* quantized activation rows */
    size_t xq_stride;           /* bytes per row of xq (the largest vec_dot row) */
    float *scores;              /* n_threads x n_ctx */
    float *probs;               /* n_threads x probs_stride */
    size_t probs_stride;        /* n_ctx rounded up to 32 */
    float *att_work;            /* n_threads x att_work_stride: attention tile scratch */
    size_t att_work_stride;     /* specd_attention_rows_work(ATT_TILE, n_ctx, head_dim) */

    /* The CUDA backend's (cuda_backend.h) */
    struct rt_cuda *cuda;
};

/* SPECD_PROFILE (profile.c): allocate (NULL when unset or out of memory) / print to stderr and
 * free / count one extend of n_tok tokens that took wall_ns. */
rt_prof *rt_prof_create(int n_threads);
void rt_prof_destroy(rt_prof *p);
void rt_prof_step(rt_prof *p, int32_t n_tok, uint64_t wall_ns);

#endif
