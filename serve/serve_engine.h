/* The thread that owns the stationary batch loop (specd/spec_loop.h) and the hand-over between it
 * and the HTTP threads. A handler submits a job (its tokens and sequence parameters); the engine
 * thread passes it to the loop between steps, steps every running request in one forward, and
 * appends each request's new tokens to its job, waking the handler. A handler whose client left
 * cancels its job; the loop frees the slot before its next step. One mutex guards the queue and
 * every job; each job has its own condition variable. */
#ifndef SPECD_SERVE_ENGINE_H
#define SPECD_SERVE_ENGINE_H

#include <stdint.h>

#include "serve/serve_request.h"
#include "specd/spec.h"
#include "specd/spec_loop.h"

typedef struct serve_engine serve_engine;
typedef struct serve_job serve_job;

/* Counters for /metrics (totals since start, and the gauges now). */
typedef struct serve_engine_stats {
    int32_t running, waiting;       /* in the loop's slots; queued (loop and hand-over) */
    int64_t finished_ok, finished_abort, finished_error; /* ended normally, cancelled, failed */
    int64_t prompt_tokens, generation_tokens;
    specd_seq_stats spec;           /* summed over finished requests */
    specd_loop_stats loop;
    int32_t max_draft;
} serve_engine_stats;

/* The model is borrowed (it must outlive the engine). Starts the thread. Caller owns *out. */
specd_status serve_engine_create(const specd_model *model, const specd_loop_params *params,
                                 serve_engine **out, specd_error *err);
/* Ends every request (their handlers wake with done set) and stops the thread; later submits are
 * refused with SPECD_E_STATE. Idempotent. */
void serve_engine_stop(serve_engine *eng);
/* Stops (as above) and frees the loop.
 * Handlers may still hold jobs: each is freed by its last serve_job_release. NULL is a no-op. */
void serve_engine_destroy(serve_engine *eng);

/* What a job's row processor needs freed once its sequence has closed. */
typedef void (*serve_job_cleanup)(void *user);

/* Hands a request to the engine thread. prompt and params (with the strings, stop tokens and
 * logit bias it points to) are copied; params->processor's user pointer is borrowed until the
 * job is freed, which is after its sequence closed: cleanup (may be NULL) is then called with
 * cleanup_user, also when the submit fails (the job takes ownership of cleanup_user). Caller
 * owns the job (serve_job_release). SPECD_E_STATE once stopping. max_tokens 0 is a job that is
 * done at once, with no tokens. */
specd_status serve_engine_submit(serve_engine *eng, const int32_t *prompt, int64_t n_prompt,
                                 const specd_seq_params *params, serve_job_cleanup cleanup,
                                 void *cleanup_user, serve_job **out, specd_error *err);
/* Snapshot of the counters. */
void serve_engine_get_stats(serve_engine *eng, serve_engine_stats *out);

/* What a handler reads from its job. */
typedef struct serve_job_view {
    int32_t *tokens;  /* new tokens since the last call (caller frees with free(); may be NULL) */
    int64_t n_tokens;
    int done;         /* the request has ended: no more tokens */
    specd_status status;
    char message[256];
    specd_seq_stats stats; /* valid with done and status OK */
} serve_job_view;

/* Waits up to timeout_ms for new tokens or the end, then takes them. 0, or -1 when out of
 * memory. A timeout returns with n_tokens 0 and done 0. */
int serve_job_wait(serve_job *job, int timeout_ms, serve_job_view *out);
/* Ends the request early (its client left, or a stop string ended it). Idempotent. */
void serve_job_cancel(serve_job *job);
/* Drops the handler's reference (cancelling the request first when it is still going). */
void serve_job_release(serve_job *job);
/* Copies the first (up to cap) tokens the job has produced so far; returns how many. */
int64_t serve_job_tokens(serve_job *job, int32_t *out, int64_t cap);

/* One position's log-probabilities under the target model. */
typedef struct serve_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_token[SERVE_MAX_TOP_LOGPROBS]; /* most probable first (lowest id on ties) */
    float top_logprob[SERVE_MAX_TOP_LOGPROBS];
} serve_logprob;

/* Scores tokens[from, n) given the tokens before each (1 <= from <= n): out[i - from] gets token
 * i's log-probability and the top_n most probable tokens at its position: the log-softmax of the
 * target's raw logits (temperature 1; no bias, top-k/p or min-p), as vLLM reports by default.
 * One forward over tokens[0, n - 1) in a context of the engine's own (a second pass, not the
 * decoding rows: the runtime is batch-invariant, so a row's logits are the same bits either way,
 * and the figures are the same whichever policy decoded the tokens). Runs on the caller's thread,
 * one call at a time; n <= the loop's n_ctx. */
specd_status serve_engine_score(serve_engine *eng, const int32_t *tokens, int64_t n, int64_t from,
                                int top_n, serve_logprob *out, specd_error *err);

#endif
