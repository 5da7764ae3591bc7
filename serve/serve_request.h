/* An OpenAI-style request (/v1/completions, /v1/chat/completions) parsed with cJSON and checked
 * field by field, so that each bad field gets a 400 naming it. Fields: model, prompt (a string,
 * whose special-token texts are parsed: the raw form; token ids; or a batch of either) or
 * messages (role + content, in the model's chat
 * template, content always as text), max_tokens (0 with echo scores the prompt only),
 * temperature (below SERVE_GREEDY_BELOW: greedy), top_p, top_k, min_p, seed, stop (a string or up
 * to 4), stream, stream_options.include_usage, logit_bias, logprobs (+ top_logprobs on chat),
 * echo (completions), n (choices per prompt), presence_penalty, frequency_penalty,
 * repetition_penalty (specd_seq_params.penalties), the structured-output fields
 * (serve_structured.h: response_format, grammar, json_schema, tools, tool_choice); best_of (1 or
 * n) and suffix only at their neutral values; specd's own: policy, policy_options, draft_max,
 * adaptive (false: no adaptive guard, draft every step). Chat messages may be tool results (role
 * tool) and assistant turns with tool_calls (rendered as text: serve_request.c). Any other field is refused with its name, except the few OpenAI
 * fields that change nothing here (serve_request.c: ignored_fields), so that no field a client
 * relies on is silently dropped. */
#ifndef SPECD_SERVE_REQUEST_H
#define SPECD_SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "specd/spec.h"
#include "specd/tokenizer.h"

#define SERVE_MAX_STOP 4
#define SERVE_MAX_STOP_LEN 256
#define SERVE_MAX_TOP_LOGPROBS 20 /* chat's top_logprobs; completions' logprobs stop at 5 */
#define SERVE_MAX_LOGIT_BIAS 300  /* OpenAI's limit on logit_bias entries */
/* A positive temperature below this is greedy: logits / T would overflow float near 0, and a
 * distribution that sharp is the argmax anyway. */
#define SERVE_GREEDY_BELOW 1e-5
/* Choices one request may ask for: prompts (a batched /v1/completions prompt) times n. Each
 * choice is a sequence of its own in the batch loop, so this bounds what one request may queue. */
#define SERVE_MAX_CHOICES 128

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

/* One prompt: its token ids and, for completions, its text as sent (for echo). */
typedef struct serve_prompt {
    int32_t *ids; /* malloc'd */
    int64_t n;
    char *text;   /* completions: malloc'd (a token-id prompt: its decoding); chat: NULL */
    size_t text_len;
} serve_prompt;

struct serve_structured;

typedef struct serve_request {
    int chat;
    serve_prompt *prompts; /* malloc'd, n_prompts >= 1 (chat: 1; completions: a batch) */
    int n_prompts;
    int n;           /* choices per prompt (choice index = prompt index * n + i) */
    int32_t max_tokens;
    specd_sampling_params sampling; /* bias points at `bias` */
    specd_logit_bias *bias;         /* logit_bias (malloc'd), n_bias entries */
    size_t n_bias;
    int logprobs;     /* log-probabilities asked for (chat: logprobs true; completions: logprobs) */
    int top_logprobs; /* alternatives per position (chat: top_logprobs; completions: logprobs) */
    int echo;         /* completions: the prompt is part of the answer (text and logprobs) */
    int has_seed;
    uint64_t seed;
    char *stop[SERVE_MAX_STOP];
    size_t stop_len[SERVE_MAX_STOP];
    int n_stop;
    int stream, include_usage;
    int adaptive; /* the adaptive guard (default on) */
    char *policy;         /* registry name (malloc'd) */
    char *policy_options; /* malloc'd, may be NULL: the request's (or the default's) plus k= */
    specd_penalties_params penalties;
    struct serve_structured *structured; /* malloc'd (never NULL after a parse) */
    char constraint_param[24]; /* the field that holds the output constraint, "" when none */
} serve_request;

/* Why a request was refused: an HTTP status and an OpenAI error body's fields. */
typedef struct serve_refusal {
    int status;
    char type[40];   /* "invalid_request_error", "not_found_error", ... */
    char param[40];  /* the offending field, or "" */
    char message[320];
    char code[32];   /* OpenAI's code string ("model_not_found"), or "": the status number */
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
