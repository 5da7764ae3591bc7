/* Speculative decoding on specd's own CPU runtime: the runtime plays the host engine of
 * specd/spec.h. Used by `specd generate --policy`, `specd ab` and examples; a host that owns its
 * own target model drives specd/spec.h directly instead (examples/host_engine.c). */
#ifndef SPECD_SPEC_RUNTIME_H
#define SPECD_SPEC_RUNTIME_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/runtime.h"
#include "specd/spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_run_stats {
    int64_t n_prompt;     /* prompt tokens */
    int64_t n_emitted;    /* tokens generated */
    int64_t n_steps;      /* target forwards after the prefill */
    uint64_t prefill_ns;  /* prompt forward */
    uint64_t decode_ns;   /* every step: policy, target forward, verification, KV commit */
    uint64_t forward_ns;  /* of which the target's forwards */
    /* the rest of decode_ns, per phase of the step (ISD's stationary loop, paper 000 sec. 3.3) */
    uint64_t prepare_ns;  /* layout: the policy's proposals / step construction, LoRA switch */
    uint64_t verify_ns;   /* acceptance (and the policy's verify) */
    uint64_t trim_ns;     /* KV commit of the kept rows */
} specd_run_stats;

/* Called with each step's emitted tokens, in order. */
typedef void (*specd_tokens_fn)(const int32_t *tokens, int32_t n, void *user);

/* Runs open sequence seq of spec to completion on ctx's KV slot kv_seq (cleared first): prefills
 * the prompt minus its last token, then alternates layout, forward, verify and KV commit until
 * the sequence is done. ctx's n_batch must be at least max_draft + 1. on_tokens may be NULL.
 * On failure the sequence keeps the tokens emitted so far. ctx's adapter is cleared on return (a
 * policy's adapter dies with its sequence). */
SPECD_API specd_status specd_spec_run(specd_spec *spec, int32_t seq, specd_context *ctx, int32_t kv_seq,
                            specd_tokens_fn on_tokens, void *user, specd_run_stats *stats,
                            specd_error *err);

/* The forward input of one step laid out for KV sequence kv_seq: the batch entry a host running
 * specd's runtime passes to specd_context_extend. Every array of the result is the layout's own
 * (tokens, pos, visible, lora_gate, input_embd and input_embd_rows), borrowed, not copied: the
 * result is valid exactly as long as the layout is (until the next layout or verify of that
 * sequence). commit is NULL: every row enters the cache, and the caller keeps the verified ones
 * with specd_context_kv_keep. The layout's adapter is not part of a batch entry: the caller sets
 * it on the context (specd_context_set_lora with layout->lora) before the extend. */
SPECD_API specd_seq_batch specd_step_seq_batch(const specd_step_layout *layout, int32_t kv_seq);

#ifdef __cplusplus
}
#endif
#endif
