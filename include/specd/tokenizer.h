/* Byte-level BPE tokenizer built from a GGUF model's tokenizer.ggml.* metadata, token-identical
 * to llama.cpp's (checked by tests/tokenizer against golden ids produced by llama.cpp itself).
 *
 * Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with tokenizer.ggml.pre
 *   "smollm"                               SmolLM2: each digit alone, then the GPT-2 split
 *   "qwen2", "deepseek-r1-qwen", "megrez"  Qwen2 / Qwen2.5 / Qwen3: the Qwen2 split
 *   "qwen35"                               Qwen3.5: the Qwen2 split with marks kept in words
 * Anything else is refused with SPECD_E_UNSUPPORTED.
 *
 * Metadata read: tokens, token_type (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused,
 * 6 byte; absent = all normal), merges, bos/eos/eot/eom token ids, add_bos_token/add_eos_token,
 * chat_template. Tokens whose text is "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>",
 * "<|eom_id|>", "<end_of_turn>", "<|end_of_text|>" or "<EOT>" end generation (as in llama.cpp)
 * and are treated as control tokens.
 *
 * Encoding, as llama.cpp does it:
 *  1. special tokens: user-defined tokens, and control/unknown tokens when
 *     SPECD_TOKENIZE_PARSE_SPECIAL is set, are cut out of the text first, longest text first
 *     (ties: lower id first);
 *  2. the text between them is split into pre-tokens by the model's pre-tokenizer (hand-written,
 *     Unicode 15.1 classes);
 *  3. each pre-token's bytes are merged by BPE rank (lowest rank, then leftmost pair first).
 *
 * Invalid UTF-8. By default it is treated as llama.cpp treats it: each byte that does not start a
 * well-formed sequence becomes U+FFFD (bytes EF BF BD) and a byte that has no token in the vocab
 * is dropped. llama.cpp's lax decoder is reproduced (overlong forms decode to their code point).
 * With SPECD_TOKENIZE_EXACT_BYTES, every input byte is kept as it is (bad bytes are grouped like
 * U+FFFD for the pre-tokenizer) and a byte without a token is an error, so that
 * decode(encode(bytes)) == bytes for every byte string (with SPECD_DETOKENIZE_RENDER_SPECIAL when
 * special tokens were parsed). SmolLM2's vocab has no token for bytes 04 06 13 14 16 1D C0 C1
 * F1 F2 F5..FF, so those inputs are refused in that mode; Qwen vocabularies have all 256.
 *
 * Decoding: a normal token gives its bytes; a user-defined token its text; a control or unknown
 * token its text only with SPECD_DETOKENIZE_RENDER_SPECIAL, else nothing (llama.cpp's
 * token_to_piece with special=false/true).
 *
 * Thread safety: a specd_tokenizer is immutable after create; every call may run concurrently on
 * the same tokenizer. Each encode/decode call allocates its scratch once per call (amortised
 * growth, about 4 bytes per input byte plus the ids), never per token.
 */
#ifndef SPECD_TOKENIZER_H
#define SPECD_TOKENIZER_H

#include "specd/api.h"

#include <stddef.h>
#include <stdint.h>

#include "specd/gguf.h"
#include "specd/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct specd_tokenizer specd_tokenizer;

/* Token kinds: the GGUF tokenizer.ggml.token_type values. */
typedef enum specd_token_kind {
    SPECD_TOKEN_NORMAL = 1,
    SPECD_TOKEN_UNKNOWN = 2,
    SPECD_TOKEN_CONTROL = 3,
    SPECD_TOKEN_USER_DEFINED = 4,
    SPECD_TOKEN_UNUSED = 5,
    SPECD_TOKEN_BYTE = 6
} specd_token_kind;

/* Flags of specd_tokenizer_encode. */
enum {
    /* Add BOS / EOS where the model asks for them (tokenizer.ggml.add_bos_token /
     * add_eos_token), like llama_tokenize(add_special = true). SmolLM2 and Qwen ask for neither. */
    SPECD_TOKENIZE_ADD_SPECIAL = 1u << 0,
    /* Control and unknown token texts in the input ("<|im_start|>") become their ids. */
    SPECD_TOKENIZE_PARSE_SPECIAL = 1u << 1,
    /* Keep every input byte (see above); a byte the vocab cannot represent is SPECD_E_UNSUPPORTED. */
    SPECD_TOKENIZE_EXACT_BYTES = 1u << 2
};

/* Flags of specd_tokenizer_decode and specd_tokenizer_token_to_piece. */
enum {
    /* Control and unknown tokens render as their text instead of nothing. */
    SPECD_DETOKENIZE_RENDER_SPECIAL = 1u << 0,
    /* Drop a leading BOS / trailing EOS when the model adds them (llama_detokenize's
     * remove_special). */
    SPECD_DETOKENIZE_REMOVE_SPECIAL = 1u << 1
};

/* Builds a tokenizer from the tokenizer.ggml.* metadata of gguf. Everything needed is copied: the
 * tokenizer does not borrow from gguf, which may be destroyed afterwards. On success *out is a new
 * tokenizer (caller owns; release with specd_tokenizer_destroy). Malformed metadata (missing
 * keys, wrong types, ids out of range, merges that are not "left right") is SPECD_E_FORMAT; an
 * unknown tokenizer model or pre-tokenizer is SPECD_E_UNSUPPORTED. */
SPECD_API specd_status specd_tokenizer_create_from_gguf(const specd_gguf *gguf, specd_tokenizer **out,
                                              specd_error *err);

/* Releases the tokenizer; NULL is a no-op. */
SPECD_API void specd_tokenizer_destroy(specd_tokenizer *tok);

SPECD_API int32_t specd_tokenizer_vocab_size(const specd_tokenizer *tok);
/* Special ids, or -1 when the model has none. */
SPECD_API int32_t specd_tokenizer_bos(const specd_tokenizer *tok);
SPECD_API int32_t specd_tokenizer_eos(const specd_tokenizer *tok);
/* 1 when id ends generation (EOS, EOT, EOM and the end-of-turn tokens listed above), else 0. */
SPECD_API int specd_tokenizer_is_eog(const specd_tokenizer *tok, int32_t id);
/* Kind of id, or 0 when id is out of range. */
SPECD_API int specd_tokenizer_token_kind(const specd_tokenizer *tok, int32_t id);
/* Token id whose text is exactly text[0..len) (raw bytes: "\n", " the", "<|im_start|>"), or -1. */
SPECD_API int32_t specd_tokenizer_find(const specd_tokenizer *tok, const char *text, size_t len);

/* Encodes text[0..len) (any bytes; text may be NULL when len is 0) with SPECD_TOKENIZE_* flags.
 * *n_out receives the number of ids the text needs. When that is more than cap the call returns
 * SPECD_E_INVALID_ARG with ids untouched (call again with a larger buffer; ids may be NULL when
 * cap is 0). Other failures leave ids and *n_out untouched. */
SPECD_API specd_status specd_tokenizer_encode(const specd_tokenizer *tok, const char *text, size_t len,
                                    uint32_t flags, int32_t *ids, size_t cap, size_t *n_out,
                                    specd_error *err);

/* The bytes id decodes to, with SPECD_DETOKENIZE_RENDER_SPECIAL as the only meaningful flag.
 * *piece is borrowed from tok (valid until destroy, not NUL-terminated), *len may be 0. An id out
 * of range is SPECD_E_INVALID_ARG. */
SPECD_API specd_status specd_tokenizer_token_to_piece(const specd_tokenizer *tok, int32_t id,
                                            uint32_t flags, const char **piece, size_t *len,
                                            specd_error *err);

/* Decodes ids[0..n) into buf with SPECD_DETOKENIZE_* flags; same capacity contract as encode
 * (*n_out = bytes needed, no NUL is written). An id out of range is SPECD_E_INVALID_ARG naming
 * its position, with buf and *n_out untouched. */
SPECD_API specd_status specd_tokenizer_decode(const specd_tokenizer *tok, const int32_t *ids, size_t n,
                                    uint32_t flags, char *buf, size_t cap, size_t *n_out,
                                    specd_error *err);

/* --- chat template ------------------------------------------------------------------------- */

typedef struct specd_chat_message {
    const char *role;    /* NUL-terminated: "system", "user", "assistant", ... (borrowed) */
    const char *content; /* NUL-terminated (borrowed) */
} specd_chat_message;

/* Renders messages with the model's ChatML template:
 *   [<|im_start|>system\n{default}<|im_end|>\n]  when the template has a default system prompt
 *                                                and messages[0] is not a system message
 *   <|im_start|>{role}\n{content}<|im_end|>\n    per message
 *   <|im_start|>assistant\n                      when add_generation_prompt
 * The default system prompt is the literal the template inserts (SmolLM2: "You are a helpful AI
 * assistant named SmolLM, trained by Hugging Face"). Output goes to buf with the capacity contract
 * of encode; it is text, to be encoded with SPECD_TOKENIZE_PARSE_SPECIAL. A model whose
 * tokenizer.chat_template is missing or not ChatML is SPECD_E_UNSUPPORTED; a NULL role or
 * content is SPECD_E_INVALID_ARG. */
SPECD_API specd_status specd_tokenizer_apply_chat_template(const specd_tokenizer *tok,
                                                 const specd_chat_message *messages, size_t n,
                                                 int add_generation_prompt, char *buf, size_t cap,
                                                 size_t *n_out, specd_error *err);

/* The tokens of the same conversation, for a server: what apply_chat_template then encode with
 * SPECD_TOKENIZE_PARSE_SPECIAL give, except that only the template's own markers become special
 * tokens. A message's content is always text ("<|im_start|>" in it is encoded as the characters
 * it is), so a client cannot close its turn or open another through content. flags:
 * SPECD_TOKENIZE_ADD_SPECIAL and SPECD_TOKENIZE_EXACT_BYTES. Same capacity contract and errors
 * as encode and apply_chat_template. */
SPECD_API specd_status specd_tokenizer_encode_chat(const specd_tokenizer *tok,
                                                   const specd_chat_message *messages, size_t n,
                                                   int add_generation_prompt, uint32_t flags,
                                                   int32_t *ids, size_t cap, size_t *n_out,
                                                   specd_error *err);

#ifdef __cplusplus
}
#endif
#endif
