/* The stationary batch loop's state (specd/spec_loop.h), shared by its files: spec_loop.c
 * (requests: submit, the queue, admission, retirement, events) and spec_loop_step.c (one step:
 * layout, the forward, verification, KV trim). Not a public header. */
#ifndef SPECD_SESSION_SPEC_LOOP_INTERNAL_H
#define SPECD_SESSION_SPEC_LOOP_INTERNAL_H

#include "specd/spec_batch.h"
#include "specd/spec_loop.h"

#include <stddef.h>

/* A queued request's own copy of what it was submitted with (the caller's buffers are only
 * borrowed during submit); the pointers in params point into the copies. */
typedef struct loop_request {
    int64_t id;
    int32_t *prompt;
    int64_t n_prompt;
    specd_seq_params params;
    char *policy, *options;
    int32_t *stop;
    specd_logit_bias *bias;
    specd_loop_event_fn on_event;
    void *user;
} loop_request;

typedef enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_RUNNING } slot_state;

/* A slot: spec sequence id and KV sequence of the context, both = its index. */
typedef struct loop_slot {
    slot_state state;
    int64_t id; /* the request in it */
    specd_loop_event_fn on_event;
    void *user;
    int64_t n_prompt;
    int64_t n_cached;      /* prompt tokens in the KV cache (the goal is n_prompt - 1) */
    uint64_t admitted;     /* admission order: prompt chunks are served first come */
    const void *last_lora; /* the adapter its last step gated rows onto (ordering hint) */
} loop_slot;

/* An event waiting to be delivered at the end of a step (after every KV and slot update, so a
 * callback may submit or cancel). Tokens live in loop->ev_tokens, messages in ev_msg. */
typedef struct loop_pending {
    int32_t slot;
    int64_t id;
    specd_loop_event_fn on_event;
    void *user;
    int32_t tok0, n_tokens;
    int done;
    specd_status status;
    specd_seq_stats stats;
} loop_pending;

/* One extend of a step: a run of consecutive sequences of the laid-out batch that share an
 * adapter (or need none), and prompt chunks riding along. */
typedef struct loop_extend {
    int32_t seq0, n_seqs; /* batch sequences [seq0, seq0 + n_seqs) */
    int32_t n_prefill;    /* prompt chunks appended after them (sb entries) */
    int32_t n_tokens, row0, n_rows;
    const struct specd_lora *lora;
} loop_extend;

struct specd_loop {
    specd_loop_params params;
    char *model_path;
    const specd_model *model;
    int32_t n_vocab, n_embd, max_step_rows;
    /* the model's target fingerprint: requests get the shipped artifacts trained over it
     * (policy/artifacts.h); none for a model without a tokenizer */
    int has_target_fp;
    uint64_t target_fp;
    specd_spec *spec;   /* max_seqs + 1 sequences: the last validates queued requests' params */
    specd_context *ctx; /* max_seqs KV sequences */

    loop_slot *slots;    /* max_seqs */
    loop_request *queue; /* ring of max_queue */
    int32_t q_head, q_count;
    int64_t next_id;
    uint64_t next_admit;
    int in_step; /* inside specd_loop_step (a callback may not step again) */

    /* step scratch, sized at create */
    int32_t *run;       /* running slots listed for layout (max_seqs) */
    uint64_t *run_gen;  /* their step generations before a layout (max_seqs) */
    int32_t *kv_before; /* per batch sequence */
    int32_t *rows;      /* per batch row: its token index within its extend */
    float *logits;      /* rows_cap x n_vocab */
    float *hidden;      /* rows_cap x n_embd */
    /* this step's logits left on a CUDA context's device (one extend, no hidden rows), valid
     * until the context's next call; NULL: they are in logits */
    const float *device_logits;
    int32_t rows_cap;
    specd_seq_batch *sb; /* max_seqs entries: steps then prompt chunks, per extend in order */
    int32_t *sb_slot;    /* which slot each sb entry belongs to */
    loop_extend *ext;    /* at most max_seqs + 1 extends */
    int32_t *pf_slot, *pf_chunk; /* this step's prompt chunks */
    loop_pending *pending;       /* at most one event per slot per step */
    int32_t n_pending;
    int32_t *ev_tokens; /* max_seqs * max_step_rows */
    int32_t n_ev_tokens;
    char (*ev_msg)[SPECD_ERROR_MESSAGE_MAX]; /* per pending event */

    specd_loop_stats stats;
};

/* Opens the request in free slot s (KV cleared); the copies stay the caller's. */
specd_status specd_loop_admit(specd_loop *loop, int32_t s, const loop_request *r, specd_error *err);
/* Ends the request in slot s with status (SPECD_OK: finished) and message; its last event
 * carries tokens (this step's, may be none) and is queued for the end of the step, or with
 * deliver_now delivered at once; the slot is free on return. */
void specd_loop_retire(specd_loop *loop, int32_t s, specd_status status, const char *message,
                       const int32_t *tokens, int32_t n_tokens, int deliver_now);
/* Queues a tokens event of slot s for delivery at the end of the step. */
void specd_loop_push_tokens(specd_loop *loop, int32_t s, const int32_t *tokens, int32_t n);
/* Moves queued requests into free slots; one that cannot be opened gets its last event. */
void specd_loop_admit_queued(specd_loop *loop);
/* Delivers the step's events (tokens of requests still live, every last event). */
void specd_loop_deliver(specd_loop *loop);

#endif
