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

/* One choice of an answer (or of a chunk). */
typedef struct serve_choice_out {
    int index;
    const char *echo; /* completions with echo: the prompt, written before the text */
    size_t echo_len;
    const char *text;
    size_t text_len;
    const char *tool_calls; /* chat: OpenAI's tool_calls array as JSON text (content is null), or
                               NULL */
    const char *finish_reason;             /* NULL: null (a chunk that does not end the choice) */
    const serve_answer_logprobs *logprobs; /* NULL, or not asked: "logprobs": null */
} serve_choice_out;

/* Each returns a malloc'd body (length in *len), or NULL when out of memory. */
char *serve_json_error(const serve_refusal *why, size_t *len);
/* A whole answer: n choices, the usage of them all, stats (the choices' figures summed). tok
 * names the logprobs' tokens. */
char *serve_json_answer(const serve_answer_meta *m, const serve_choice_out *c, int n,
                        int64_t n_prompt, int64_t n_completion, const specd_seq_stats *stats,
                        const specd_tokenizer *tok, size_t *len);
/* "data: {chunk}\n\n" with one choice: a delta (first: the choice's first chunk, which on chat
 * also names the role), its logprobs when asked, its finish_reason on its last chunk. stats (the
 * choice's figures) rides on the choice's last chunk; usage_null writes "usage": null (asked
 * for with stream_options.include_usage: every chunk but the usage one has it). */
char *serve_sse_chunk(const serve_answer_meta *m, const serve_choice_out *c, int first,
                      int usage_null, const specd_seq_stats *stats, const specd_tokenizer *tok,
                      size_t *len);
/* The last chunk under stream_options.include_usage, as OpenAI sends it: "choices": [] and the
 * usage of every choice (and their speculation figures, summed). */
char *serve_sse_usage(const serve_answer_meta *m, int64_t n_prompt, int64_t n_completion,
                      const specd_seq_stats *stats, size_t *len);
/* "data: {"error": ...}\n\n": a failure after the stream began. */
char *serve_sse_error(const char *message, size_t *len);

#define SERVE_SSE_DONE "data: [DONE]\n\n"

#endif
