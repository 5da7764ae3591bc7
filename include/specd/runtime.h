/* Transformer runtime (CPU): runs a GGUF decoder (llama, qwen2, qwen3) for the target and draft
 * models of every policy.
 *
 * Model: weights memory-mapped from the GGUF file (specd_model_create). Architecture, sizes, RMS
 * epsilon and RoPE base come from the file's metadata; the output head is output.weight or, when
 * absent, the tied token embedding.
 *
 * Context: one or more sequences, each with its own KV cache of n_ctx rows (F16, as llama.cpp's
 * default cache type: half the memory of F32 and the same rounding as the oracle we test against),
 * scratch for n_batch new tokens, and a fixed thread pool. All memory is allocated at create time:
 * extend/decode never allocate.
 *
 * Extend: n new tokens for each of several sequences, each token with an explicit position id,
 * attending under a causal rule or an explicit visibility row over [cached rows | new rows], with
 * an optional per-token LoRA gate. New rows are written to the cache at rows kv_len.., so in a
 * visibility row index j < kv_len is cached row j and index kv_len + i is new token i. After the
 * call the new rows marked for commit (all by default) are appended in order; the others are
 * dropped (ISD's mask rows).
 *
 * Batch invariance: a row's logits and hidden state are bitwise identical whether computed alone or
 * inside an extend of any size or mix of sequences, with any thread count. Every output element is
 * one dot product with a fixed reduction order; threads split output rows/columns, never a sum;
 * attention runs per row over its visible keys in ascending cache order. This holds in both
 * numerics modes (specd_context_params.numerics); the mode only picks the reduction order.
 *
 * Errors: every call validates all inputs before touching state or outputs; on failure nothing is
 * written and the KV caches are unchanged.
 */
#ifndef SPECD_RUNTIME_H
#define SPECD_RUNTIME_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/device.h"
#include "specd/gguf.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_model specd_model;
typedef struct specd_context specd_context;
typedef struct specd_lora specd_lora;

typedef enum specd_arch {
    SPECD_ARCH_LLAMA = 0, /* RoPE on adjacent pairs (llama.cpp "normal" mode) */
    SPECD_ARCH_QWEN2 = 1, /* + Q/K/V bias, NeoX RoPE */
    SPECD_ARCH_QWEN3 = 2  /* + per-head RMSNorm on Q and K, NeoX RoPE */
} specd_arch;

typedef struct specd_model_info {
    specd_arch arch;
    int32_t n_layer, n_embd, n_ff, n_head, n_head_kv, head_dim, n_rot, n_vocab, n_ctx_train;
    float rms_eps, rope_freq_base;
    int tied_output;       /* 1 when the output head is token_embd.weight */
    uint64_t weight_bytes; /* bytes of tensor data mapped from the file */
} specd_model_info;

/* Opens and validates the GGUF model at path. Caller owns *out (specd_model_destroy). Unknown
 * architecture or tensor type -> SPECD_E_UNSUPPORTED; missing or misshaped tensor -> SPECD_E_FORMAT
 * naming it. */
SPECD_API specd_status specd_model_create(const char *path, specd_model **out, specd_error *err);
/* Opens a model file that carries no token_embd.weight nor output.weight (a residual drafting
 * head, MRP) over base, whose embedding and output head it borrows: n_vocab, tied_output and the
 * head are base's. The file's n_embd must equal base's (SPECD_E_MISMATCH), as its
 * <arch>.vocab_size when present; a file that has either tensor is SPECD_E_FORMAT. base is
 * borrowed and must outlive *out (specd_model_destroy releases only the file's own part). */
SPECD_API specd_status specd_model_create_with_base(const char *path, const specd_model *base,
                                                    specd_model **out, specd_error *err);
SPECD_API void specd_model_destroy(specd_model *model);

/* Borrowed; valid while the model lives. */
SPECD_API const specd_model_info *specd_model_get_info(const specd_model *model);
/* The underlying file (for the tokenizer); borrowed, valid while the model lives. */
SPECD_API const specd_gguf *specd_model_gguf(const specd_model *model);

/* --- LoRA -------------------------------------------------------------------------------------
 * A PEFT adapter directory: adapter_config.json (r, lora_alpha, target_modules) and
 * adapter_model.safetensors (F32/F16/BF16 lora_A [r, in] and lora_B [out, r] per module). Applied
 * as y = W x + gate * (alpha / r) * B (A x) for the tokens whose gate is non-zero. Supported
 * modules: q_proj k_proj v_proj o_proj gate_proj up_proj down_proj. */
SPECD_API specd_status specd_lora_create(const specd_model *model, const char *dir, specd_lora **out,
                               specd_error *err);
SPECD_API void specd_lora_destroy(specd_lora *lora);
SPECD_API int32_t specd_lora_rank(const specd_lora *lora);

/* --- LoRA: the trained mask embedding (specd's ISD extension) ----------------------------------
 * An adapter trained with tools/train/train_isd.py --train-mask-embedding carries the input vector
 * of ISD's mask rows: adapter_config.json "specd_mask_embedding": true plus a tensor
 * mask_embedding [n_embd] (F32/F16/BF16). specd_lora_create checks it (length n_embd, finite) and
 * refuses the adapter otherwise. The ISD policies feed it in place of the mask token's embedding
 * (specd_step_layout.input_embd on the mask rows only). */

/* The vector, or NULL when the adapter has none (or lora is NULL). Borrowed: valid while the
 * adapter lives. *n_embd (may be NULL) receives its length, 0 with none. */
SPECD_API const float *specd_lora_mask_embedding(const specd_lora *lora, int32_t *n_embd);

/* Reads only the mask embedding of the adapter in dir, without a model (for a policy whose host
 * runs the target and loads the adapter itself: that load checks the length against its model).
 * *n_embd receives its length, 0 when the adapter has none; out (cap floats, or NULL with cap 0
 * to ask the length) receives the vector. A malformed one (flag without tensor or the reverse,
 * not one dim, a non-finite entry) -> SPECD_E_FORMAT / SPECD_E_MISMATCH; n_embd > cap with an out
 * -> SPECD_E_INVALID_ARG. The length is not checked here (no model): the caller compares it with
 * its target's n_embd. */
SPECD_API specd_status specd_lora_read_mask_embedding(const char *dir, float *out, int32_t cap,
                                                      int32_t *n_embd, specd_error *err);

/* How tools/train/export_adapter.py says an adapter was trained (adapter_config.json's specd_*
 * keys), so a policy can run it the way it was trained without the user repeating it:
 * objective "wedlm" / "sdar" (specd_objective; "" when absent, as in R-ISD adapters), shift 0 or 1
 * (specd_shift: 0 when a mask row predicts its own position; -1 when absent), block (specd_block;
 * 0 when absent). Reads the config only; a malformed value -> SPECD_E_FORMAT. */
typedef struct specd_lora_info {
    char objective[16];
    int32_t shift;
    int32_t block;
} specd_lora_info;
SPECD_API specd_status specd_lora_read_info(const char *dir, specd_lora_info *out,
                                            specd_error *err);

/* --- context ------------------------------------------------------------------------------- */
typedef struct specd_context_params {
    int32_t n_seq;     /* sequences, each with its own KV cache (default 1) */
    int32_t n_ctx;     /* KV rows per sequence, including an extend's uncommitted rows (2048) */
    int32_t n_batch;   /* most new tokens in one extend over all sequences (512) */
    int32_t n_threads; /* 0 = online cores */
    int32_t n_layers;  /* run only the first n_layers blocks, then the output norm and head
                          (a layer-skip drafter); 0 = all */
    int32_t device;       /* specd_device: where the weights, the KV cache and the forward live */
    int32_t device_index; /* CUDA device ordinal (0) */
    int32_t numerics;     /* specd_numerics: the CPU's reduction order (0 = fast) */
} specd_context_params;

/* The arithmetic of a CPU context's matmuls, chosen at create. Both modes are batch-invariant (a
 * row's bits do not depend on the extend's size, the row's place in it, or the thread count):
 *   SPECD_NUMERICS_FAST   (default) the quantized dot products reduce each block's products
 *                         exactly in integers and apply eight blocks' scales in one vector
 *                         operation (the same activation quantization as llama.cpp), so several activation rows share the weight unpacking;
 *                         the same bits on every vector path (scalar, AVX2, AVX-512) of any x86
 *                         machine; close to llama.cpp's logits, not bitwise equal to them
 *   SPECD_NUMERICS_LLAMA  llama.cpp's accumulation order (one scale product and one fused
 *                         multiply-add per 32-wide block and pair): bitwise the logits of
 *                         llama.cpp's x86 build, the oracle of the golden tests
 * A CUDA context keeps its kernels' own order whatever the field says. */
typedef enum specd_numerics {
    SPECD_NUMERICS_FAST = 0,
    SPECD_NUMERICS_LLAMA = 1,
} specd_numerics;

/* "fast" or "llama" -> *out; anything else -> SPECD_E_INVALID_ARG naming the accepted values. */
SPECD_API specd_status specd_numerics_parse(const char *name, int32_t *out, specd_error *err);
SPECD_API const char *specd_numerics_name(int32_t numerics); /* "fast", "llama" or "?" */

/* The backend of a context, chosen at create. SPECD_DEVICE_CUDA runs the same forward with the
 * kernels of libspecd_cuda.so on a GPU: every call of this header behaves as on the CPU, and a
 * row's logits are bitwise the same alone or in any batch on that device (CPU and GPU need not
 * agree bit for bit). specd_device is in specd/device.h.
 *
 * "cpu" or "cuda" (also "cuda:N", which sets *index to N; index may be NULL) -> *out; anything
 * else -> SPECD_E_INVALID_ARG naming the accepted values. */
SPECD_API specd_status specd_device_parse(const char *name, int32_t *out, int32_t *index,
                                          specd_error *err);
SPECD_API const char *specd_device_name(int32_t device); /* "cpu", "cuda" or "?" */

/* n_seq 1, n_ctx 2048, n_batch 512, all cores, all layers; device from the environment variable
 * SPECD_DEVICE (as specd_device_parse reads it; unset or empty = cpu), so a test suite or a
 * program that never names a device can be run on either. An unparsable SPECD_DEVICE sets
 * device to -1, which specd_context_create refuses with the variable's value in the message.
 * numerics likewise from SPECD_NUMERICS (fast or llama; unset or empty = fast; unparsable = -1,
 * refused at create), so that every context of a process (a policy's draft model too) follows
 * one choice. */
SPECD_API specd_context_params specd_context_default_params(void);

/* The model is borrowed and must outlive the context. Caller owns *out. */
SPECD_API specd_status specd_context_create(const specd_model *model, const specd_context_params *params,
                                  specd_context **out, specd_error *err);
SPECD_API void specd_context_destroy(specd_context *ctx);

/* Sets (or with NULL clears) the adapter used by tokens with a non-zero gate. Borrowed: it must
 * outlive its use. The adapter must belong to a model of the same shape. */
SPECD_API specd_status specd_context_set_lora(specd_context *ctx, const specd_lora *lora, specd_error *err);

SPECD_API int32_t specd_context_n_threads(const specd_context *ctx);
/* The context's specd_numerics (as created). */
SPECD_API int32_t specd_context_numerics(const specd_context *ctx);
/* The model the context runs (borrowed) and the most new tokens one extend may carry. */
SPECD_API const specd_model *specd_context_model(const specd_context *ctx);
SPECD_API int32_t specd_context_n_batch(const specd_context *ctx);

/* New tokens of one sequence in an extend. */
typedef struct specd_seq_batch {
    int32_t seq;            /* 0..n_seq-1; at most once per extend */
    int32_t n_tokens;       /* >= 1 */
    const int32_t *tokens;  /* n_tokens ids < n_vocab */
    const int32_t *pos;     /* n_tokens position ids >= 0, or NULL for kv_len + i */
    const uint8_t *visible; /* NULL = causal (all cached rows, new rows 0..i); else n_tokens rows of
                               kv_len + n_tokens bytes, non-zero = token i sees that row; every row
                               must see at least one */
    const float *lora_gate; /* n_tokens finite gates, or NULL for 0 (no adapter) */
    const uint8_t *commit;  /* n_tokens flags, non-zero = keep in the cache; NULL = keep all */
    /* Float-vector inputs: n_tokens rows of n_embd finite floats, or NULL. A row whose
     * embd_rows flag is non-zero (every row when embd_rows is NULL) enters the model as that
     * vector instead of its token's embedding (its token id is then only validated). */
    const float *embd;
    const uint8_t *embd_rows;
} specd_seq_batch;

/* Which rows to return. Rows are numbered over the concatenated new tokens of all sequences in the
 * order given. */
typedef struct specd_extend_out {
    int32_t n_rows;
    const int32_t
        *rows;     /* n_rows distinct indices; NULL = every row (n_rows must equal the total) */
    float *logits; /* n_rows x n_vocab, or NULL */
    float *hidden; /* n_rows x n_embd final hidden states (after the output norm), or NULL */
    /* Logits left on the device (SPECD_DEVICE_CUDA only; SPECD_E_INVALID_ARG on the CPU): when
     * non-NULL, receives the device address of the n_rows x n_vocab logits (row j is rows[j]'s,
     * n_vocab floats after row j - 1), which are then not copied to the host unless logits is
     * also given (the two hold the same bits). NULL is written when n_rows is 0 or the extend
     * fails. The rows live in the context's device scratch: owned by the context, valid until
     * the next call on that context (any extend, decode, KV, adapter or destroy call), readable
     * on the context's device (specd_context_params.device_index) once the extend has returned
     * (it synchronised), and never to be freed or written by the caller. */
    const float **device_logits;
} specd_extend_out;

/* Runs the forward for the new tokens. out may be NULL (fill the caches only). */
SPECD_API specd_status specd_context_extend(specd_context *ctx, const specd_seq_batch *seqs, int32_t n_seqs,
                                  const specd_extend_out *out, specd_error *err);

/* One token at position kv_len for seq; logits (n_vocab) may be NULL. */
SPECD_API specd_status specd_context_decode(specd_context *ctx, int32_t seq, int32_t token, float *logits,
                                  specd_error *err);

/* --- KV cache ------------------------------------------------------------------------------ */
/* Committed rows of seq, or -1 when seq is out of range. */
SPECD_API int32_t specd_context_kv_len(const specd_context *ctx, int32_t seq);
/* Keeps the first n rows (n <= kv_len): rollback after a rejection. */
SPECD_API specd_status specd_context_kv_truncate(specd_context *ctx, int32_t seq, int32_t n,
                                       specd_error *err);
/* Keeps rows [0, from) plus the listed rows (strictly ascending, each in [from, kv_len)), moved
 * down in order; drops the rest: commit of chosen rows after verification. */
SPECD_API specd_status specd_context_kv_keep(specd_context *ctx, int32_t seq, int32_t from, int32_t n_rows,
                                   const int32_t *rows, specd_error *err);
/* Bytes allocated for KV caches (all sequences) and for everything the context owns. */
SPECD_API size_t specd_context_kv_bytes(const specd_context *ctx);
SPECD_API size_t specd_context_memory_bytes(const specd_context *ctx);

/* The context's backend (specd_device) and, for SPECD_DEVICE_CUDA, the device memory it holds:
 * weights (shared by the contexts of one model on one device, counted in each), KV caches and
 * scratch, in bytes (any pointer may be NULL). On the CPU the three are 0. */
SPECD_API int32_t specd_context_device(const specd_context *ctx);
SPECD_API void specd_context_device_memory(const specd_context *ctx, size_t *weights,
                                           size_t *kv, size_t *scratch);
/* Kernels the last successful extend or decode of a CUDA context enqueued (its launch count,
 * what CUDA graphs would cut); 0 on the CPU or before the first step. */
SPECD_API int32_t specd_context_device_launches(const specd_context *ctx);

/* A CUDA context runs each step's kernels as one CUDA graph per step shape (docs/gpu.md),
 * captured the first time the shape runs and replayed after, with the same bits as launching
 * them one by one. SPECD_CUDA_GRAPHS=0 (also off, false, no) in the environment at context
 * create turns them off; a capture failure turns them off for that context, with a one-time
 * warning through specd_log_set. All zero on the CPU. */
typedef struct specd_device_graph_stats {
    int32_t enabled;            /* graphs in use by this context */
    int32_t cached, capacity;   /* executable graphs held, and the most it keeps */
    int64_t captures;           /* shapes captured (a new shape, or one evicted) */
    int64_t replays;            /* steps that ran as a graph */
    int64_t evictions;          /* graphs dropped to make room, least recently used first */
    int64_t fallbacks;          /* captures that failed (graphs then off) */
    int32_t last_graphed;       /* the last successful step ran as a graph */
    int32_t last_host_launches; /* launch calls its kernels took: 1 as a graph, else its kernels */
} specd_device_graph_stats;
SPECD_API void specd_context_device_graph_stats(const specd_context *ctx,
                                                specd_device_graph_stats *out);

#ifdef __cplusplus
}
#endif
#endif
