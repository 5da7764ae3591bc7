/* The forward pass written once (recipe.c): the layer sequence of llama.cpp's llm_build_llama /
 * qwen2 / qwen3 graphs as calls into an op table, which each backend fills with its own kernels
 * (forward_cpu.c: the CPU's, in two numerics modes; forward_cuda.c: libspecd_cuda.so's). The
 * recipe names buffers, weights and rows; a backend maps them to its own memory. A new
 * architecture changes the recipe only; a new backend or numerics mode writes a table. */
#ifndef SPECD_MODEL_RUNTIME_RECIPE_H
#define SPECD_MODEL_RUNTIME_RECIPE_H

#include "model/runtime/runtime_internal.h"

/* The step's activations, [n_tok rows][width] each (rt_buf_width). */
typedef enum rt_buf {
    RT_BUF_X,     /* the residual stream (n_embd) */
    RT_BUF_XN,    /* normed rows (n_embd); after the layers, output row j's final hidden state */
    RT_BUF_TMP,   /* a projection's output before its residual add (n_embd) */
    RT_BUF_Q,     /* n_head x head_dim */
    RT_BUF_K,     /* n_head_kv x head_dim */
    RT_BUF_V,     /* n_head_kv x head_dim */
    RT_BUF_ATT,   /* attention's output (n_head x head_dim) */
    RT_BUF_G,     /* FFN gate, then the SwiGLU product (n_ff) */
    RT_BUF_U,     /* FFN up (n_ff) */
    RT_BUF_LOGITS /* output row j's logits (n_vocab) */
} rt_buf;

/* The model's vectors: a layer's (RT_N_LAYER_VEC of them), then the model's output norm. */
typedef enum rt_vec {
    RT_ATTN_NORM,
    RT_FFN_NORM,
    RT_Q_NORM, /* qwen3 */
    RT_K_NORM, /* qwen3 */
    RT_BQ,     /* qwen2 */
    RT_BK,     /* qwen2 */
    RT_BV,     /* qwen2 */
    RT_N_LAYER_VEC,
    RT_OUTPUT_NORM = RT_N_LAYER_VEC
} rt_vec;

/* A matrix is (layer, enum rt_proj), or the output head: */
enum { RT_HEAD = RT_N_PROJ };

/* Rows [r0, r1) of the step that this caller handles. */
typedef struct rt_span {
    int32_t r0, r1;
} rt_span;

/* What a backend runs for one step; opaque to the recipe. */
typedef struct rt_run rt_run;

/* One extend as the recipe and the backends see it (forward.c fills it after validation). */
typedef struct rt_step {
    specd_context *c;
    int32_t n_tok;
    int any_gate;                /* a row has a non-zero LoRA gate (the adapter is then read) */
    int32_t n_out;               /* rows finished by the output norm; 0: none */
    const int32_t *out_rows;     /* n_out step rows, in output order */
    int logits;                  /* the head runs for those rows (host or device logits) */
    float *host_logits, *hidden; /* the caller's, or NULL */
    const float **device_logits; /* receives the device address of the logits; NULL: not asked */
} rt_step;

/* A backend's kernels. Every op but share, mark and sync returns 0, or non-zero when it could
 * not be enqueued (the backend records why; the recipe stops). Row ops act on a span; matmul and
 * attention on the whole step, each backend splitting them its own way. */
typedef struct rt_ops {
    const char *name;
    /* Rows of the n-row op `way` of `ways` independent ones run side by side (Q, K and V's
     * chains): the CPU splits ways x n units across its threads; a device takes them all. */
    rt_span (*share)(rt_run *r, int32_t n, int32_t ways, int32_t way);
    /* The end of a phase (an enum rt_prof_op for the CPU's profile); sync also waits for every
     * caller's rows before the next phase reads them (a device's one stream already orders). */
    void (*mark)(rt_run *r, int prof_op);
    void (*sync)(rt_run *r, int prof_op);
    /* RT_BUF_X from the token table or the rows' input vectors */
    int (*embed)(rt_run *r, rt_span s);
    /* dst = rmsnorm(src) x v, over each of n_heads equal parts of a row (in place allowed) */
    int (*rmsnorm)(rt_run *r, rt_span s, rt_buf src, rt_buf dst, int32_t layer, rt_vec v,
                   int32_t n_heads);
    int (*add_vec)(rt_run *r, rt_span s, rt_buf dst, int32_t layer, rt_vec v); /* dst += v */
    int (*add)(rt_run *r, rt_span s, rt_buf a, rt_buf dst);                    /* dst += a */
    int (*rope)(rt_run *r, rt_span s, rt_buf x, int32_t n_heads);
    /* K or V rows into the layer's cache at their rows' cache positions */
    int (*store_kv)(rt_run *r, rt_span s, int32_t layer, rt_buf kv);
    /* src's rows made ready for matrix (layer, proj)'s matmul (quantized as its kernels read) */
    int (*prepare)(rt_run *r, rt_span s, int32_t layer, int proj, rt_buf src);
    /* dst = W src for n rows, from what prepare made of src */
    int (*matmul)(rt_run *r, int32_t n, int32_t layer, int proj, rt_buf src, rt_buf dst);
    /* dst += gate x scale x B (A src) for the rows with a non-zero LoRA gate */
    int (*lora)(rt_run *r, rt_span s, int32_t layer, int proj, rt_buf src, rt_buf dst);
    int (*attention)(rt_run *r, int32_t layer); /* RT_BUF_ATT from RT_BUF_Q and the cache */
    int (*swiglu)(rt_run *r, rt_span s);        /* RT_BUF_G = silu(RT_BUF_G) x RT_BUF_U */
    /* dst row j = src row out_rows[j], for output rows j */
    int (*gather)(rt_run *r, rt_span s, rt_buf src, rt_buf dst);
    /* the hidden-state tap: RT_BUF_XN's output rows to the caller */
    int (*hidden)(rt_run *r, rt_span s);
} rt_ops;

/* The host copy of vector v of layer l (any layer for RT_OUTPUT_NORM), NULL when the
 * architecture has none, and its length in floats. */
const float *rt_model_vec(const specd_model *m, int32_t l, rt_vec v);
int64_t rt_vec_len(const specd_model_info *in, rt_vec v);

/* A row's width in floats of buffer b. */
int64_t rt_buf_width(const specd_context *c, rt_buf b);

/* Runs the step's forward pass through ops: 0, or the failing op's status. */
int rt_forward_recipe(const rt_ops *ops, rt_run *r, const rt_step *s);

#endif
