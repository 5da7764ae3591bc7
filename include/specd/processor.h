/* Row processors: per-row logit transforms that depend on the token history (repetition
 * penalties, grammar masks), applied by the spec session at every row it samples or verifies.
 *
 * Why in the session: speculation is lossless when every row it verifies is scored exactly as
 * plain decoding would score that position. A transform that depends on the tokens before the
 * row (a penalty counting them, a grammar state) must therefore see, at a draft's row, the path
 * that row follows: the committed tokens, then the drafts leading to it. The session hands each
 * row its own path (a tree node's path is its ancestors), in plain decoding and in speculation
 * alike, so both apply the same function to the same (logits, path) and emit the same tokens
 * under the greedy and coupled rules.
 *
 * Contract (every callback runs on the thread that drives the sequence):
 *  - apply is a pure function of (the processor's committed state, path): the same path must
 *    give the same bits whether the row is a plain step's or a draft's. It modifies the row in
 *    place; -inf bans a token (it is then never sampled nor accepted: session/spec_logits.h), NaN
 *    and +inf are errors. The session applies no row past a draft that the row before it bans
 *    (that row can never be reached), so apply may assume each path's drafts were allowed.
 *  - admit (optional) returns how many leading drafts are admissible after path; the rest of the
 *    chain (a tree: the node and its subtree) is cut before the target runs. Cutting only saves
 *    rows: a cut draft would have been rejected anyway if apply bans it.
 *  - forced (optional) proposes up to max tokens that follow path (SGLang's jump-forward: the
 *    continuation a grammar admits alone). They are appended to the policy's (admitted) chain
 *    and verified like any draft, so a wrong one costs a row, never the output. They are
 *    proposed even on steps the adaptive guard makes plain (they are not the policy's drafts).
 *  - commit gets each step's emitted tokens (accepted drafts and the bonus token, cut at a stop
 *    token or max_tokens), in order, once they are part of the sequence.
 *  - A failing apply (its status) fails the step; the host may retry it.
 *
 * Paths where a processor cannot run are refused at specd_spec_seq_open (SPECD_E_UNSUPPORTED):
 * a remote verifier daemon (it scores rows in another process), and self-speculative policies
 * (isd, risd, mrp, wedlm, sdar, simsd: their rows are mask and block rows whose paths are the
 * policy's own). CUDA logits are copied to the host for a sequence with a processor (the device
 * acceptance kernel is not used for it). */
#ifndef SPECD_PROCESSOR_H
#define SPECD_PROCESSOR_H

#include <stdint.h>

#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What precedes a row. tokens[0..n_tokens): the prompt (tokens[0..n_prompt)), the output
 * committed so far (up to n_committed), then the drafts leading to the row (n_tokens -
 * n_committed of them; 0 for a plain step's row). Borrowed for the call. */
typedef struct specd_row_path {
    const int32_t *tokens;
    int64_t n_tokens;
    int64_t n_prompt;
    int64_t n_committed; /* prompt + output committed: n_prompt <= n_committed <= n_tokens */
} specd_row_path;

typedef struct specd_row_processor {
    /* Required (a processor whose apply is NULL is none). */
    specd_status (*apply)(void *user, const specd_row_path *path, float *logits, int32_t n_vocab,
                          specd_error *err);
    /* Optional: how many of drafts[0..n_drafts), which follow path, to keep (0..n_drafts). */
    int32_t (*admit)(void *user, const specd_row_path *path, const int32_t *drafts,
                     int32_t n_drafts);
    /* Optional: writes up to max tokens that must follow path into out; returns how many. */
    int32_t (*forced)(void *user, const specd_row_path *path, int32_t *out, int32_t max);
    /* Optional: tokens[0..n) joined the sequence. */
    void (*commit)(void *user, const int32_t *tokens, int32_t n);
    void *user; /* borrowed: must outlive the sequence */
} specd_row_processor;

/* The three sampling penalties, as a row processor the session builds itself
 * (specd_seq_params.penalties). Neutral values (0, 0, 1) turn each off.
 *  - presence_penalty, frequency_penalty: OpenAI's, over the tokens generated so far (not the
 *    prompt): logit[t] -= count[t] * frequency + (count[t] > 0) * presence. Range [-2, 2].
 *  - repetition_penalty: HF transformers' and llama.cpp's rule, over every token of the prompt
 *    and the output (HF's window; llama.cpp's default window is the last 64 tokens):
 *    logit[t] = logit[t] > 0 ? logit[t] / p : logit[t] * p. Range (0, 10].
 * Applied in llama.cpp's order: repetition first, then frequency and presence. */
typedef struct specd_penalties_params {
    float presence_penalty;
    float frequency_penalty;
    float repetition_penalty;
} specd_penalties_params;

#ifdef __cplusplus
}
#endif
#endif
