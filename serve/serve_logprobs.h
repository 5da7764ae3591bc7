/* The log-probabilities an answer reports (chat logprobs / top_logprobs, completions logprobs and
 * echo): which tokens, scored by serve_engine_score, and their JSON in OpenAI's two shapes. */
#ifndef SPECD_SERVE_LOGPROBS_H
#define SPECD_SERVE_LOGPROBS_H

#include <stdint.h>
#include <stdio.h>

#include "serve/serve_engine.h"
#include "serve/serve_request.h"
#include "specd/tokenizer.h"

typedef struct serve_answer_logprobs {
    int asked;           /* 0: the answer says "logprobs": null */
    int top_n;
    serve_logprob *pos;  /* n entries: the echoed prompt's tokens (if any), then the completion's */
    int64_t n;
    int64_t n_unscored;  /* leading entries without a log-probability (echo: the first token) */
    int64_t text_offset0; /* characters before the first entry's text (no echo: the prompt's) */
} serve_answer_logprobs;

/* Fills lp for req's answer, whose first n_completion tokens (of job) are its completion. Nothing
 * to do (lp->asked 0) unless req asked for logprobs. 0, or -1 with why filled. */
int serve_logprobs_compute(serve_engine *eng, const serve_request *req, serve_job *job,
                           int64_t n_completion, serve_answer_logprobs *lp, serve_refusal *why);
void serve_logprobs_free(serve_answer_logprobs *lp);

/* The choice's "logprobs" value: chat's {"content": [...]}, or completions' {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}; null when not asked. */
void serve_logprobs_write(FILE *f, const serve_answer_logprobs *lp, int chat,
                          const specd_tokenizer *tok);

#endif
