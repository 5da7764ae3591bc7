/* Grammar-constrained decoding: a grammar compiled against a tokenizer's vocabulary, and a
 * per-sequence matcher that says which tokens may come next (a token mask), advances on the
 * tokens a sequence emits, and proposes the tokens the grammar forces (jump-forward drafts).
 *
 * Grammars come as GBNF text (llama.cpp's syntax, as llama-server takes it) or as a JSON Schema
 * (the subset docs/serving.md lists), which is compiled to GBNF first (specd_grammar_to_gbnf shows
 * the result). The grammar works on Unicode code points; tokens are matched by their bytes
 * (specd_tokenizer_token_to_piece), and a token whose bytes end inside a UTF-8 character is
 * allowed when some completion of that character can match (the matcher keeps the partial
 * character in its state).
 *
 * End of generation: a token for which specd_tokenizer_is_eog holds is allowed exactly when the
 * grammar can end here (specd_grammar_matcher_done); when the grammar is complete and cannot
 * continue, EOG tokens are the only ones allowed. Accepting an EOG token ends the matcher: after
 * it nothing is allowed. Tokens of kind control, unknown, unused and user-defined are never
 * allowed inside the grammar (only the EOG ones, at its end).
 *
 * Limits (each refusal names the limit): grammar text and generated schema GBNF at most
 * SPECD_GRAMMAR_MAX_TEXT bytes, at most SPECD_GRAMMAR_MAX_ELEMENTS compiled elements, repetition
 * counts {m,n} at most SPECD_GRAMMAR_MAX_REPEAT; left recursion is refused at compile time (it
 * would make the matcher loop). At match time a state may hold at most SPECD_GRAMMAR_MAX_STACKS
 * parse stacks, each at most SPECD_GRAMMAR_MAX_DEPTH frames deep: a token that would go past
 * either is not allowed (accept returns SPECD_E_UNSUPPORTED naming the limit).
 *
 * Thread safety: a specd_grammar is immutable after create except for its mask cache, which a
 * mutex guards; one grammar may serve any number of matchers on any threads. A matcher is one
 * sequence's state: one thread at a time.
 *
 * Memory: the token trie (a few MB for a 50k vocabulary) and up to 32 MiB of cached masks per
 * grammar (past that the cache starts again empty); a matcher's scratch grows with the states it
 * visits and is dropped past a bound. */
#ifndef SPECD_GRAMMAR_H
#define SPECD_GRAMMAR_H

#include "specd/api.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specd/status.h"
#include "specd/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPECD_GRAMMAR_MAX_TEXT (1u << 20)
#define SPECD_GRAMMAR_MAX_ELEMENTS (1u << 20)
#define SPECD_GRAMMAR_MAX_REPEAT 4096
#define SPECD_GRAMMAR_MAX_STACKS 4096
#define SPECD_GRAMMAR_MAX_DEPTH 1024

/* Compiled grammar and its per-vocabulary tables (token trie, mask cache). */
typedef struct specd_grammar specd_grammar;
/* One sequence's position in a grammar. */
typedef struct specd_grammar_matcher specd_grammar_matcher;

/* Compiles GBNF text gbnf[0..len) (not NUL-terminated) for tok's vocabulary; the start rule is
 * `root`. Syntax: `name ::= alternatives` rules (names of letters, digits, '-' and '_'), `|`
 * alternatives, sequences, ( groups ), postfix * + ? {m} {m,} {m,n}, "literals" and [classes]
 * with escapes \n \r \t \\ \" \' \[ \] \- \/ \xHH \uHHHH \UHHHHHHHH, ranges a-z, negation [^...],
 * `.` for any character, # comments to the end of the line. A rule may continue on later lines;
 * it ends where the next `name ::=` starts. Errors are SPECD_E_FORMAT with "line L col C: ..."
 * (undefined rule, missing root, bad escape, left recursion, ...). tok is borrowed: it must
 * outlive the grammar (matchers read token bytes through it). On success *out is a new grammar
 * (caller owns; specd_grammar_destroy). Compiling builds the token trie (a few milliseconds for a
 * 50k vocabulary): a server keeps one grammar per distinct schema and shares it, which is also
 * what shares the mask cache. */
SPECD_API specd_status specd_grammar_create_gbnf(const char *gbnf, size_t len,
                                                 const specd_tokenizer *tok, specd_grammar **out,
                                                 specd_error *err);

/* Compiles a JSON Schema schema[0..len): the output is one JSON value that matches it. schema
 * NULL (len 0) or "{}" means any JSON object (OpenAI's response_format json_object). Unsupported
 * keywords are SPECD_E_UNSUPPORTED naming the keyword, or ignored where docs/serving.md says so.
 * tok as for specd_grammar_create_gbnf. */
SPECD_API specd_status specd_grammar_create_json_schema(const char *schema, size_t len,
                                                        const specd_tokenizer *tok,
                                                        specd_grammar **out, specd_error *err);

/* The GBNF text a JSON Schema compiles to (for debugging and the docs), NUL-terminated into
 * buf with the capacity contract of specd_tokenizer_encode: *n_out = bytes needed without the
 * NUL; when that is >= cap, SPECD_E_INVALID_ARG with buf untouched. */
SPECD_API specd_status specd_grammar_to_gbnf(const char *schema, size_t len, char *buf, size_t cap,
                                             size_t *n_out, specd_error *err);

/* Releases the grammar; NULL is a no-op. Every matcher made from it must be destroyed first. */
SPECD_API void specd_grammar_destroy(specd_grammar *g);

/* Vocabulary size the grammar was compiled for (the n_vocab its masks have). */
SPECD_API int32_t specd_grammar_n_vocab(const specd_grammar *g);

/* Mask cache statistics: lookups that found a mask, and masks computed. */
SPECD_API void specd_grammar_cache_stats(const specd_grammar *g, uint64_t *hits, uint64_t *misses);

/* A matcher at the start of g (borrowed: g must outlive it). Caller owns *out. */
SPECD_API specd_status specd_grammar_matcher_create(const specd_grammar *g,
                                                    specd_grammar_matcher **out, specd_error *err);
SPECD_API void specd_grammar_matcher_destroy(specd_grammar_matcher *m);

/* Makes dst the same state as src (same grammar required, else SPECD_E_MISMATCH): a copy of the
 * parse stacks, no allocation once dst has grown to src's size. */
SPECD_API specd_status specd_grammar_matcher_copy(specd_grammar_matcher *dst,
                                                  const specd_grammar_matcher *src);

/* Whether token may come next. Out-of-range ids are not allowed. */
SPECD_API bool specd_grammar_matcher_allows(const specd_grammar_matcher *m, int32_t token);

/* Advances past token. A token the grammar does not allow is SPECD_E_STATE (an id out of range
 * SPECD_E_INVALID_ARG) with the state unchanged. */
SPECD_API specd_status specd_grammar_matcher_accept(specd_grammar_matcher *m, int32_t token);

/* bits[0 .. (n_vocab + 31) / 32): bit (t % 32) of word t / 32 set when token t is allowed.
 * n_vocab may exceed the grammar's (a model's padded logit rows): ids past the tokenizer's are
 * never allowed; a smaller n_vocab is SPECD_E_MISMATCH. Masks are cached in the grammar by the
 * matcher's state, so requests sharing a grammar share them. */
SPECD_API specd_status specd_grammar_matcher_fill_mask(specd_grammar_matcher *m, uint32_t *bits,
                                                       int32_t n_vocab);

/* Sets the logits of the tokens not allowed to -INFINITY (same mask and n_vocab rule as
 * fill_mask). */
SPECD_API specd_status specd_grammar_matcher_apply(specd_grammar_matcher *m, float *logits,
                                                   int32_t n_vocab);

/* Jump-forward: up to max tokens that the grammar forces next, into tokens; returns how many
 * (0 when the next bytes are not forced). The forced bytes (up to 256 bytes of the characters
 * every parse agrees on, such as a key, '":' or closing brackets) are tokenized as the tokenizer
 * encodes them. Each token is allowed in sequence from m's state; m itself is not advanced. The
 * tokens are drafts: verification decides, so any choice of them is lossless. */
SPECD_API int32_t specd_grammar_matcher_forced(specd_grammar_matcher *m, int32_t *tokens,
                                               int32_t max);

/* The text so far is a complete sentence of the grammar: it may end here (EOG allowed). */
SPECD_API bool specd_grammar_matcher_done(const specd_grammar_matcher *m);

/* The grammar is complete and nothing may follow but an EOG token. */
SPECD_API bool specd_grammar_matcher_must_end(const specd_grammar_matcher *m);

#ifdef __cplusplus
}
#endif
#endif
