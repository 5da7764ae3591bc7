/* The tokenizer endpoints, in the two shapes clients use:
 *   POST /tokenize    llama-server's {"content", "add_special", "parse_special", "with_pieces"}
 *                     or vLLM's {"prompt", "add_special_tokens"} -> {"tokens": [...], "count",
 *                     "max_model_len"} (with_pieces: tokens as {"id", "piece"}, a piece that is
 *                     not whole UTF-8 characters given as its bytes, as llama-server does)
 *   POST /detokenize  {"tokens": [...]} -> {"content": "...", "prompt": "..."} (llama-server
 *                     reads content, vLLM's clients prompt)
 *   GET  /tokenizer_info  {"eos_token", "bos_token", "pad_token", "model_max_length", ...}: what
 *                     lm-evaluation-harness's remote tokenizer backend (tokenizer_backend=remote)
 *                     reads, beside /tokenize and /detokenize.
 * Defaults follow the shape: add_special is false in llama-server's (content), true in vLLM's
 * (prompt). Special-token texts are parsed (parse_special, default true), as both servers do. */
#ifndef SPECD_SERVE_TOKENIZE_H
#define SPECD_SERVE_TOKENIZE_H

#include <stddef.h>
#include <stdint.h>

#include "serve/serve_request.h"
#include "specd/tokenizer.h"

/* Each returns a malloc'd JSON body (length in *len), or NULL with why filled. */
char *serve_tokenize(const char *body, size_t body_len, const specd_tokenizer *tok, size_t *len,
                     serve_refusal *why);
char *serve_detokenize(const char *body, size_t body_len, const specd_tokenizer *tok, size_t *len,
                       serve_refusal *why);
char *serve_tokenizer_info(const specd_tokenizer *tok, int32_t n_ctx, size_t *len,
                           serve_refusal *why);

#endif
