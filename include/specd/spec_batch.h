/* Host API v2: batched speculative steps for a host engine that runs one forward over many
 * sequences (vLLM, SGLang, llama.cpp, TensorRT-LLM).
 *
 * One step of a batch:
 *     specd_spec_batch_layout(spec, seqs, n, &batch)   the next step of every listed sequence,
 *                                                      packed: seq i's tokens are batch tokens
 *                                                      [token_offset, +layout.n_tokens), its
 *                                                      scored rows are logits rows
 *                                                      [row_offset, +layout.n_rows)
 *     ... the host runs one forward over all of them and gathers the scored rows into one logits
 *     block, on the host or on a CUDA device, in f32, f16 or bf16, with any row stride (a
 *     vocabulary padded beyond n_vocab is fine: the padding is never read) ...
 *     specd_spec_batch_verify(spec, &logits, &result) every sequence of the batch is verified
 *                                                      from its rows; result says per sequence
 *                                                      what was emitted and which KV rows to keep
 * The sequences of a batch may run different policies (specd/policy.h), rules and samplers. Each
 * sequence's tokens depend only on its own prompt, parameters and stream key, never on the batch
 * it ran in, its slot (sequence id) or its neighbours: the sampling key is the caller's 64-bit
 * stream key (specd_seq_params.stream_key), not the slot.
 *
 * Logits values: -inf means "banned" (vocabulary padding, grammar masks): such a token is never
 * sampled and a draft of it is never accepted; so is a token at or below -FLT_MAX (PyTorch's mask
 * value), at any temperature. NaN and +inf are errors (SPECD_E_NUMERIC naming the sequence and
 * row). A row in which every token is banned is SPECD_E_NUMERIC too.
 *
 * Ownership: every array a call returns is owned by the spec and valid until the next
 * specd_spec_batch_layout / specd_spec_batch_verify on it, or the next per-sequence call on one
 * of the batch's sequences, or its close. The logits block is borrowed for the call only.
 *
 * States: a sequence is open (specd_spec_seq_open), then alternates laid out (after a layout) and
 * ready (after its verify), until done (max_tokens or a stop token), then closed. Laying out a
 * sequence that is already laid out lays it out again (the step in flight is dropped; the host
 * must drop that step's KV rows, which it has not yet committed). The per-sequence calls of
 * specd/spec.h (v1) work on the same states: v1's layout/verify of one sequence is a batch of one.
 *
 * Threads: calls on one specd_spec must not run concurrently; use one spec per thread.
 */
#ifndef SPECD_SPEC_BATCH_H
#define SPECD_SPEC_BATCH_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/device.h"
#include "specd/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element type of a logits block. */
typedef enum specd_dtype {
    SPECD_DTYPE_F32 = 0,
    SPECD_DTYPE_F16 = 1, /* IEEE binary16 */
    SPECD_DTYPE_BF16 = 2 /* bfloat16 */
} specd_dtype;

/* Where a logits block lives: specd_device (specd/device.h); SPECD_DEVICE_CUDA blocks are
 * verified from device memory. */

/* A block of logits rows. Borrowed for the call it is passed to. */
typedef struct specd_logits {
    const void *data;   /* row 0, element 0 */
    int64_t row_stride; /* elements (not bytes) from one row to the next; >= n_vocab */
    int32_t n_rows;     /* rows in the block; at least the rows the call reads */
    specd_dtype dtype;
    specd_device device;
} specd_logits;

/* One sequence's step inside a batch. */
typedef struct specd_batch_seq {
    int32_t seq;                /* the sequence id (the host's slot) */
    specd_step_layout layout;   /* what the target runs for it (specd/policy.h) */
    int32_t token_offset;       /* its first token in the packed batch */
    int32_t row_offset;         /* its first row in the logits block */
} specd_batch_seq;

typedef struct specd_batch {
    int32_t n_seqs;
    const specd_batch_seq *seqs; /* in the order the sequences were listed */
    int32_t n_tokens;            /* sum of the layouts' n_tokens */
    int32_t n_rows;              /* sum of the layouts' n_rows: the logits block's least rows */
    /* 1 when some step gates rows onto a LoRA adapter (a layout's lora_gate, lora and
     * lora_path): the host must apply that adapter to exactly the gated rows, or its logits are
     * not the ones the policy verifies against. A host that cannot must not run the batch (close
     * those sequences or open them with a policy that needs no adapter). */
    int needs_lora;
    /* 1 when some step's policy verifies with hidden states, or catches up from a plain step's
     * (SPECD_POLICY_HIDDEN_CATCH_UP): the host passes the final hidden states (after the output
     * norm) of the same rows, in the same order, to specd_spec_batch_verify_hidden. */
    int needs_hidden;
    /* 1 when some step feeds float vectors in place of token embeddings (a layout's
     * input_embd): the host must feed them, or not run the batch. */
    int needs_embd;
} specd_batch;

/* Lays out the next step of seqs[0..n_seqs) (distinct, open, not done; 1 <= n_seqs <=
 * max_seqs). On failure (err names the sequence) no sequence of the list is left laid out and
 * *out is untouched. */
SPECD_API specd_status specd_spec_batch_layout(specd_spec *spec, const int32_t *seqs, int32_t n_seqs,
                                     specd_batch *out, specd_error *err);

typedef struct specd_batch_result {
    int32_t n_seqs;                      /* the batch's sequences, in its order */
    const int32_t *seq;
    const specd_step_outcome *outcome;   /* valid where status is SPECD_OK */
    const specd_status *status;          /* per sequence */
    int32_t n_failed;                    /* sequences whose status is not SPECD_OK */
} specd_batch_result;

/* Verifies every sequence of the batch laid out last from logits (the batch's n_rows rows, each
 * sequence's at its row_offset). Sequences are verified independently: one whose rows are bad
 * (NaN, +inf, every token banned) gets its status, changes nothing and stays laid out, so the host
 * may call again with corrected rows (only sequences still laid out are verified then; the others
 * report SPECD_E_STATE). Returns SPECD_OK when every sequence was verified, else the first
 * failure's status with err naming the sequence and row; *out is filled either way (unless the
 * arguments themselves are bad: no batch, NULL or undersized logits). */
SPECD_API specd_status specd_spec_batch_verify(specd_spec *spec, const specd_logits *logits,
                                     specd_batch_result *out, specd_error *err);

/* specd_spec_batch_verify with the scored rows' final hidden states beside their logits (a
 * block of n_rows x n_embd, any dtype, stride >= n_embd, host or CUDA; every value finite), for
 * batches whose needs_hidden is set. hidden may be NULL when it is not; a sequence that needs it
 * and gets none reports SPECD_E_INVALID_ARG. */
SPECD_API specd_status specd_spec_batch_verify_hidden(specd_spec *spec, const specd_logits *logits,
                                                      const specd_logits *hidden,
                                                      specd_batch_result *out, specd_error *err);

/* Verifies one laid-out sequence from a logits block whose row 0 is the sequence's first scored
 * row (block rows beyond the step's n_rows are not read). What specd_spec_seq_verify does for
 * host f32 rows, for any dtype, stride and device. */
SPECD_API specd_status specd_spec_seq_verify_logits(specd_spec *spec, int32_t seq,
                                          const specd_logits *logits, specd_step_outcome *out,
                                          specd_error *err);

/* specd_stream_sample_key (a sequence's sampling key) is declared in specd/sampling.h. */

#ifdef __cplusplus
}
#endif
#endif
