/* Internals of the BPE tokenizer shared by its source files. */
#ifndef SPECD_MODEL_TOKENIZER_INTERNAL_H
#define SPECD_MODEL_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "specd/tokenizer.h"

typedef enum specd_pretok {
    SPECD_PRETOK_SMOLLM = 0, /* \p{N} alone, then the GPT-2 split */
    SPECD_PRETOK_QWEN2,      /* Qwen2 split, words are \p{L}+ */
    SPECD_PRETOK_QWEN35      /* Qwen2 split, words are [\p{L}\p{M}]+ */
} specd_pretok;

/* Everything a tokenizer is built from, as views (borrowed for the duration of the create call).
 * create_from_gguf fills it from tokenizer.ggml.*; tests fill it by hand. */
typedef struct specd_tok_vocab {
    size_t n_tokens;
    const char *const *token_text; /* n_tokens texts as stored in GGUF (GPT-2 byte-encoded) */
    const uint32_t *token_len;
    const int32_t *token_type;     /* n_tokens kinds, or NULL for all normal */
    size_t n_merges;
    const char *const *merge_text; /* "left right", byte-encoded; index = rank */
    const uint32_t *merge_len;
    const char *pre;               /* tokenizer.ggml.pre, NUL-terminated */
    int32_t bos, eos, eot, eom;    /* -1 when absent */
    int add_bos, add_eos;
    const char *chat_template;     /* may be NULL */
    size_t chat_template_len;
} specd_tok_vocab;

specd_status specd_tokenizer_create_from_vocab(const specd_tok_vocab *v, specd_tokenizer **out,
                                               specd_error *err);

/* create_from_gguf with some metadata replaced (NULL / -1: as in the file): lets the tests run
 * one vocabulary through every pre-tokenizer, as the golden script does with llama.cpp. */
specd_status specd_tokenizer_create_from_gguf_ex(const specd_gguf *gguf, const char *pre_override,
                                                 int add_bos_override, int add_eos_override,
                                                 specd_tokenizer **out, specd_error *err);

/* Open-addressing slot of the merge table: (left id, right id) -> rank and merged id. */
typedef struct specd_tok_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX when empty */
    int32_t rank;
    int32_t result;
} specd_tok_merge;

/* Slot of the text -> id table (keys are token bytes, i.e. decoded text). */
typedef struct specd_tok_text_slot {
    uint32_t hash;
    int32_t id; /* -1 when empty */
} specd_tok_text_slot;

struct specd_tokenizer {
    int32_t n_vocab;
    specd_pretok pretok;
    uint8_t *kind;       /* n_vocab specd_token_kind values (EOG texts promoted to control) */
    uint8_t *eog;        /* n_vocab flags */
    uint32_t *piece_off; /* n_vocab + 1 offsets into pieces */
    char *pieces;        /* what each token decodes to (raw text for non-normal tokens) */
    uint32_t *key_off;   /* n_vocab + 1 offsets into keys */
    uint8_t *key_ok;     /* n_vocab: 1 when the text is byte-decodable (a BPE output) */
    uint8_t *keys;       /* byte-decoded text of every token */
    specd_tok_text_slot *text_slots;
    size_t text_mask;
    specd_tok_merge *merges;
    size_t merge_mask;
    int32_t byte_token[256]; /* token of each single byte, -1 when the vocab has none */
    int32_t *special;        /* ids cut out before BPE: longest text first, then lower id */
    size_t n_special;
    int32_t bos, eos, eot, eom;
    int add_bos, add_eos;
    uint8_t *bmp_class; /* 65536 Unicode classes */
    int chatml;
    char *default_system; /* NUL-terminated, or NULL */
};

/* Rank and result of merging left and right, or rank -1 when they do not merge. */
static inline specd_tok_merge specd_tok_merge_find(const specd_tokenizer *t, int32_t left,
                                                   int32_t right) {
    specd_tok_merge none = {UINT64_MAX, -1, -1};
    if (left < 0 || right < 0) return none;
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & t->merge_mask;
    for (;;) {
        const specd_tok_merge *s = &t->merges[i];
        if (s->key == key) return *s;
        if (s->key == UINT64_MAX) return none;
        i = (i + 1) & t->merge_mask;
    }
}

uint32_t specd_tok_hash_bytes(const uint8_t *p, size_t n);
/* Token whose byte-decoded text is p[0..n) and is a BPE output, or -1. */
int32_t specd_tok_lookup_key(const specd_tokenizer *t, const uint8_t *p, size_t n);

/* --- BPE ------------------------------------------------------------------------------------ */
/* Growable per-call buffers for the BPE of one pre-token. */
typedef struct specd_bpe_scratch {
    int32_t *id;
    int32_t *prev, *next;
    int32_t *rank;  /* linear path: rank of the pair starting here */
    int32_t *merged;
    void *heap;
    size_t cap, heap_cap;
} specd_bpe_scratch;

void specd_bpe_scratch_free(specd_bpe_scratch *s);

/* Merges the n bytes of one pre-token and appends the resulting ids to out (which has room for
 * n more ids). Bytes without a token append nothing when exact == 0; with exact != 0 they make
 * the call return SPECD_E_UNSUPPORTED. Pre-tokens longer than heap_threshold bytes use a priority
 * queue, shorter ones a linear scan (same result; the threshold is a parameter so tests can
 * compare both). Returns the number of ids appended in *n_added. */
specd_status specd_bpe_word(const specd_tokenizer *t, specd_bpe_scratch *s, const uint8_t *bytes,
                            size_t n, int exact, size_t heap_threshold, int32_t *out,
                            size_t *n_added, specd_error *err);

#define SPECD_BPE_HEAP_THRESHOLD 48

/* --- pre-tokenizers -------------------------------------------------------------------------- */
/* Called with each pre-token [begin, end) (unit indices); a non-OK status stops the split. */
typedef specd_status (*specd_pretok_emit)(void *ctx, size_t begin, size_t end);

specd_status specd_pretok_split(specd_pretok kind, const uint8_t *bmp, const uint32_t *units,
                                size_t n, specd_pretok_emit emit, void *ctx);

/* Grows *p (elements of size elem, capacity *cap) to hold at least need elements, keeping the
 * contents. Returns 0 on allocation failure (the old buffer is kept). */
int specd_tok_grow(void **p, size_t *cap, size_t need, size_t elem);

#endif
