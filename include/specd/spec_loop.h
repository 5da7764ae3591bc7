/* The stationary batch loop: specd's own CPU runtime serving many requests at once (paper 000
 * section 3.3). Used by `specd serve`; a host with its own engine drives specd/spec_batch.h
 * instead.
 *
 * Each call to specd_loop_step runs ONE target forward (one specd_context_extend per distinct
 * LoRA adapter in use, since a context applies one adapter at a time, and per n_batch tokens)
 * over every running request: each request's own step layout (plain, drafter-shaped,
 * self-speculative: mixed policies in one batch), plus prompt chunks of newly admitted requests
 * in the same forward. Then every request is verified from its rows, its rejected and mask rows are
 * trimmed from its KV cache, its tokens are reported, and finished requests are retired so that
 * queued ones take their slots before the next step.
 *
 * Exactness: the runtime is batch-invariant (specd/runtime.h) and sampling is keyed by each
 * request's stream key (specd/spec_batch.h), so a request's tokens are identical whether it runs
 * alone or among max_seqs - 1 others, in any slot, admitted at any step.
 *
 * The guard: each request's adaptive guard is charged its share of the batch's measured forward
 * (session/batch_cost.h), so as the batch grows compute-bound, proposals stop paying and the
 * guard shortens or stops drafting per request.
 *
 * Forwards: the step's sequences go in layout order into as few extends as their adapters and
 * n_batch allow (a run of sequences shares an extend while their gated rows use one adapter and
 * their tokens fit n_batch; rows without a gate run on base weights under any adapter). Prompt
 * chunks of newly admitted requests, first come first served, fill the room the last extend
 * leaves. Steps of policies that verify with hidden states get them from the same extend.
 *
 * Verification is always in-process: a loop has no verifier endpoint (specd_spec_params'
 * verifier_endpoint is not used). The remote drafter policy ("remote") works like any drafter.
 *
 * Threads: a loop is not thread-safe; one thread calls submit, cancel and step (a server hands
 * requests to that thread). Events are delivered on that thread, inside specd_loop_step (after
 * the step's every KV and slot change) or specd_loop_cancel.
 * A callback may call specd_loop_submit and specd_loop_cancel (of any request, its own
 * included), not specd_loop_step (SPECD_E_STATE) nor specd_loop_destroy.
 */
#ifndef SPECD_SPEC_LOOP_H
#define SPECD_SPEC_LOOP_H

#include "specd/api.h"

#include <stdint.h>

#include "specd/runtime.h"
#include "specd/spec.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_loop specd_loop;

typedef struct specd_loop_params {
    int32_t max_seqs;   /* requests running at once (default 16; at most 256) */
    int32_t max_queue;  /* requests waiting for a slot beyond those (default 1024) */
    int32_t n_ctx;      /* KV rows per request: prompt + max_tokens + a step's rows (2048) */
    int32_t n_batch;    /* most tokens in one forward, steps and prompt chunks (default 512;
                           at least max_step_rows) */
    int32_t n_threads;  /* 0 = online cores */
    int32_t max_draft;  /* most proposals per step (default 8) */
    const char *model_path; /* the target's GGUF path, for policies that load it (layerskip);
                               may be NULL; copied */
    int32_t device;       /* the backend of the loop's context and of the contexts its policies
                             make (specd_context_params.device): default SPECD_DEVICE's */
    int32_t device_index; /* CUDA device ordinal */
} specd_loop_params;

SPECD_API specd_loop_params specd_loop_default_params(void);

/* The model is borrowed and must outlive the loop. Caller owns *out (specd_loop_destroy). */
SPECD_API specd_status specd_loop_create(const specd_model *model, const specd_loop_params *params,
                                         specd_loop **out, specd_error *err);
/* Ends every request (no further events) and frees the loop. NULL is a no-op. */
SPECD_API void specd_loop_destroy(specd_loop *loop);

/* What happened to one request. Everything it points to is borrowed for the callback only. */
typedef struct specd_loop_event {
    int64_t request;         /* the id specd_loop_submit returned */
    const int32_t *tokens;   /* tokens emitted by this step, in order (n_tokens is >= 1 except
                                on the last event, which may carry none) */
    int32_t n_tokens;
    int done;                /* 1 on the request's last event */
    specd_status status;     /* with done: SPECD_OK (max_tokens or a stop token), or why not */
    const char *message;     /* with done and a failure: readable reason; else "" */
    const specd_seq_stats *stats; /* with done: the request's statistics; else NULL */
} specd_loop_event;

typedef void (*specd_loop_event_fn)(const specd_loop_event *event, void *user);

/* Queues a request: prompt (n_prompt >= 1 ids, copied) decoded under params (stream_key: give
 * each request its own; SPECD_STREAM_KEY_SLOT is refused here, since slots are the loop's
 * business). on_event gets every step's tokens and the last event. SPECD_E_STATE when the queue
 * is full; SPECD_E_INVALID_ARG when the prompt plus max_tokens cannot fit n_ctx or the policy
 * cannot be created (the message says why). The policy's options get the shipped artifacts
 * trained over the loop's model that they leave out (specd_policy_default_options; a policy that
 * needs one and has none is refused). Nothing is queued on failure. */
SPECD_API specd_status specd_loop_submit(specd_loop *loop, const int32_t *prompt, int64_t n_prompt,
                                         const specd_seq_params *params,
                                         specd_loop_event_fn on_event, void *user,
                                         int64_t *request, specd_error *err);

/* Ends a queued or running request now: its slot is free for the next step and its last event
 * (done, SPECD_E_STATE, "cancelled") is delivered before this returns. An unknown or finished
 * id is a no-op returning SPECD_E_INVALID_ARG. */
SPECD_API specd_status specd_loop_cancel(specd_loop *loop, int64_t request);

/* What one step did. */
typedef struct specd_loop_step_info {
    int32_t n_running;   /* requests stepped (verified) in this forward */
    int32_t n_prefill;   /* requests that had prompt tokens in it */
    int32_t n_tokens;    /* tokens the forward ran */
    int32_t n_rows;      /* logits rows it scored */
    int32_t n_emitted;   /* tokens emitted by all requests */
    int32_t n_finished;  /* requests retired (finished or failed) */
    uint64_t forward_ns; /* the forward(s) */
    uint64_t step_ns;    /* the whole step */
} specd_loop_step_info;

/* Runs one step (see above). With nothing queued or running it returns SPECD_OK at once with
 * n_running = 0. A request whose own step fails (bad logits, policy error) is retired with its
 * status; the others go on. A failure of the forward itself fails every request in it and is
 * returned. info may be NULL. */
SPECD_API specd_status specd_loop_step(specd_loop *loop, specd_loop_step_info *info,
                                       specd_error *err);

/* Requests running and waiting. */
SPECD_API int32_t specd_loop_n_running(const specd_loop *loop);
SPECD_API int32_t specd_loop_n_queued(const specd_loop *loop);

/* Totals since create, for metrics. */
typedef struct specd_loop_stats {
    int64_t n_steps, n_forwards;        /* steps; extends (more than steps when adapters differ) */
    int64_t n_submitted, n_finished, n_failed, n_cancelled;
    int64_t n_prompt_tokens, n_emitted; /* tokens prefilled; tokens emitted */
    int64_t n_tokens_run, n_rows;       /* the forwards' widths and scored rows */
    int64_t n_drafts, n_draft_tokens, n_accepted; /* as specd_seq_stats, summed over requests */
    uint64_t forward_ns, step_ns;
} specd_loop_stats;

SPECD_API void specd_loop_get_stats(const specd_loop *loop, specd_loop_stats *out);

#ifdef __cplusplus
}
#endif
#endif
