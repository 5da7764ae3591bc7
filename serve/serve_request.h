/* An OpenAI-style request (/v1/completions, /v1/chat/completions) parsed with cJSON and checked
 * field by field, so that each bad field gets a 400 naming it. Fields: model, prompt (a string)
 * or messages (role + content, rendered with the model's chat template), max_tokens,
 * temperature, top_p, top_k, min_p, seed, stop (a string or up to 4), stream,
 * stream_options.include_usage, n (1 only); specd's own: policy, policy_options, draft_max,
 * adaptive (false: no adaptive guard, draft every step).
 * Fields it does not know are ignored, as OpenAI clients send many. */
#ifndef SPECD_SERVE_REQUEST_H
#define SPECD_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "specd/spec.h"
#include "specd/tokenizer.h"

#define SERVE_MAX_STOP 4
#define SERVE_MAX_STOP_LEN 256

typedef struct serve_limits {
    const char *model_id;       /* the one model served: a request naming another is refused */
    int32_t max_tokens_cap;     /* most max_tokens a request may ask for */
    int32_t default_max_tokens; /* when a request gives none */
    int32_t n_ctx;              /* KV rows per request: prompt + max_tokens + a step must fit */
    int32_t step_rows;          /* the most rows one step may add (2 * max_draft + 1) */
    int32_t max_draft;          /* the loop's; draft_max may not exceed it */
    const char *default_policy; /* for requests that name none (copied into each request) */
    const char *default_policy_options;
} serve_limits;

typedef struct serve_request {
    int chat;
    int32_t *prompt; /* token ids (malloc'd) */
    int64_t n_prompt;
    int32_t max_tokens;
    specd_sampling_params sampling;
    int has_seed;
    uint64_t seed;
    char *stop[SERVE_MAX_STOP];
    size_t stop_len[SERVE_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int adaptive; /* the adaptive guard (default on) */
    char *policy;         /* registry name (malloc'd) */
    char *policy_options; /* malloc'd, may be NULL: the request's (or the default's) plus k= */
} serve_request;

/* Why a request was refused: an HTTP status and an OpenAI error body's fields. */
typedef struct serve_refusal {
    int status;
    char type[40];   /* "invalid_request_error", "not_found_error", ... */
    char param[40];  /* the offending field, or "" */
    char message[320];
} serve_refusal;

/* Parses body for the chat or completions endpoint. 0 on success (*out filled: release with
 * serve_request_free), -1 with *why filled. */
int serve_request_parse(const char *body, size_t len, int chat, const serve_limits *lim,
                        const specd_tokenizer *tok, serve_request *out, serve_refusal *why);
void serve_request_free(serve_request *r);

/* Fills why and returns -1 (for callers outside the parser, e.g. the engine's refusals). */
int serve_refuse(serve_refusal *why, int status, const char *type, const char *param,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

#endif
