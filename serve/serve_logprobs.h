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
    /* completions' text_offset of each entry: the characters of the answer's text (counted from
     * the prompt's start) wholly before the entry's first byte. A token that begins inside a
     * character (byte-level pieces split them) has the offset of that character, as a client
     * that decodes the tokens before it sees: the offsets never run ahead of the text. */
    int64_t *offset;
} serve_answer_logprobs;

/* Fills lp for completion[from, n_completion) of one choice of req (prompt p): the tokens a
 * chunk or an answer reports. With req->echo (from 0), the prompt's tokens come first. Nothing to
 * do (lp->asked 0) unless req asked for logprobs. 0, or -1 with why filled. */
int serve_logprobs_compute(serve_engine *eng, const specd_tokenizer *tok, const serve_request *req,
                           const serve_prompt *p, const int32_t *completion, int64_t n_completion,
                           int64_t from, serve_answer_logprobs *lp, serve_refusal *why);
void serve_logprobs_free(serve_answer_logprobs *lp);

/* The choice's "logprobs" value: chat's {"content": [...]}, or completions' {"tokens",
 * "token_logprobs", "top_logprobs", "text_offset"}; null when not asked. A token whose bytes are
 * not whole UTF-8 characters (a piece of one) is named as OpenAI names it, "bytes:\\xe2\\x80",
 * never as U+FFFD; chat also gives every token's "bytes". */
void serve_logprobs_write(FILE *f, const serve_answer_logprobs *lp, int chat,
                          const specd_tokenizer *tok);

#endif
