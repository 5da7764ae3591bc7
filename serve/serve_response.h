/* The bodies specd serve answers with, in OpenAI's shapes: errors, whole completions (text and
 * chat) and server-sent-event chunks of streamed ones. Each carries the request's speculation
 * figures (like vLLM's metrics.speculative_decoding): drafts, proposals, accepted, acceptance
 * rate, tokens per target forward, acceptance by draft position. Strings go through
 * common/json_out.c, which writes any byte that is not valid UTF-8 as U+FFFD. */
#ifndef SPECD_SERVE_RESPONSE_H
#define SPECD_SERVE_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "serve/serve_logprobs.h"
#include "serve/serve_request.h"
#include "specd/spec.h"

typedef struct serve_answer_meta {
    int chat;
    char id[48];       /* "cmpl-N" / "chatcmpl-N" */
    long long created; /* Unix seconds */
    const char *model; /* borrowed */
    const char *policy;
} serve_answer_meta;

/* What a whole answer may add to its text. */
typedef struct serve_answer_extras {
    const char *echo; /* completions with echo: the prompt, written before the text */
    size_t echo_len;
    const serve_answer_logprobs *logprobs; /* NULL, or not asked: "logprobs": null */
    const specd_tokenizer *tok;            /* for the logprobs' token texts */
} serve_answer_extras;

/* Each returns a malloc'd body (length in *len), or NULL when out of memory. */
char *serve_json_error(const serve_refusal *why, size_t *len);
/* x may be NULL (no echo, no logprobs). */
char *serve_json_answer(const serve_answer_meta *m, const char *text, size_t text_len,
                        const char *finish_reason, int64_t n_prompt, int64_t n_completion,
                        const specd_seq_stats *stats, const serve_answer_extras *x, size_t *len);
/* "data: {chunk}\n\n": a delta (the first chunk of a chat answer also names the role); the last
 * one has finish_reason set and, when stats is not NULL, the usage and speculation figures. */
char *serve_sse_chunk(const serve_answer_meta *m, const char *delta, size_t delta_len, int first,
                      const char *finish_reason, int64_t n_prompt, int64_t n_completion,
                      const specd_seq_stats *stats, size_t *len);
/* "data: {"error": ...}\n\n": a failure after the stream began. */
char *serve_sse_error(const char *message, size_t *len);

#define SERVE_SSE_DONE "data: [DONE]\n\n"

#endif
