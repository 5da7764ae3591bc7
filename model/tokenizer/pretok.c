/* Pre-tokenizers: split a fragment of text (as decoded units) into the pieces BPE works on.
 *
 * These are hand-written equivalents of the regular expressions llama.cpp uses, following its
 * own hand-written matchers (unicode.cpp) decision for decision, including where they differ from
 * a regex engine, because llama.cpp's output is the oracle:
 *   GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Qwen2:  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*
 *           |\s*[\r\n]+|\s+(?!\S)|\s+      (Qwen3.5: [\p{L}\p{M}] in place of \p{L})
 *   SmolLM: \p{N} first (every digit its own piece), then GPT-2 on the text between digits.
 * "End of range" (class NONE) is the end of the piece being split, as in llama.cpp, where each
 * regex of a sequence only sees the pieces the previous one produced. */
#include "common/status_internal.h"
#include "model/tokenizer/tokenizer_internal.h"
#include "model/tokenizer/unicode.h"

#define L SPECD_UCLASS_LETTER
#define N SPECD_UCLASS_NUMBER
#define M SPECD_UCLASS_MARK
#define S SPECD_UCLASS_SPACE
#define NONE SPECD_UCLASS_NONE
#define OUT_OF_RANGE 0xFFFFFFFFu

typedef struct range {
    const uint8_t *bmp;
    const uint32_t *u;
    size_t begin, end;
    size_t prev; /* end of the last piece emitted */
    specd_pretok_emit emit;
    void *ctx;
} range;

static inline uint32_t cp_at(const range *r, size_t pos) {
    return pos < r->end ? r->u[pos] : OUT_OF_RANGE;
}
static inline uint8_t cls_at(const range *r, size_t pos) {
    return pos < r->end ? specd_unicode_class(r->bmp, r->u[pos]) : NONE;
}
static inline specd_status add(range *r, size_t end) {
    specd_status st = SPECD_OK;
    if (end > r->prev) st = r->emit(r->ctx, r->prev, end);
    r->prev = end;
    return st;
}
static inline uint32_t ascii_lower(uint32_t c) { return c >= 'A' && c <= 'Z' ? c + 32 : c; }

/* Length of a contraction ('s 't 're 've 'm 'll 'd) starting at pos, or 0. */
static size_t contraction(const range *r, size_t pos, int any_case) {
    if (r->u[pos] != '\'' || pos + 1 >= r->end) return 0;
    uint32_t c1 = r->u[pos + 1];
    if (any_case) c1 = ascii_lower(c1);
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (pos + 2 >= r->end) return 0;
    uint32_t c2 = r->u[pos + 2];
    if (any_case) c2 = ascii_lower(c2);
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
}

static specd_status split_gpt2(range *r) {
    size_t pos = r->begin;
    r->prev = r->begin;
    while (pos < r->end) {
        uint32_t c = r->u[pos];
        size_t k = contraction(r, pos, 0);
        if (k) {
            pos += k;
            SPECD_TRY(add(r, pos));
            continue;
        }
        uint8_t f2 = c == ' ' ? cls_at(r, pos + 1) : cls_at(r, pos);
        uint8_t want = 0;
        if (f2 & L)
            want = L;
        else if (f2 & N)
            want = N;
        if (want) { /* ' ?\p{L}+' and ' ?\p{N}+' */
            pos += (c == ' ');
            while (cls_at(r, pos) & want) pos++;
            SPECD_TRY(add(r, pos));
            continue;
        }
        if (!(f2 & (S | L | N | NONE))) { /* ' ?[^\s\p{L}\p{N}]+' */
            pos += (c == ' ');
            while (!(cls_at(r, pos) & (S | L | N | NONE))) pos++;
            SPECD_TRY(add(r, pos));
            continue;
        }
        size_t nws = 0;
        while (cls_at(r, pos + nws) & S) nws++;
        if (nws > 1 && pos + nws < r->end) { /* '\s+(?!\S)': leave one for the next word */
            pos += nws - 1;
        } else if (nws > 0) {
            pos += nws;
        } else {
            pos++; /* no match: a piece of its own */
        }
        SPECD_TRY(add(r, pos));
    }
    return SPECD_OK;
}

static specd_status split_qwen(range *r, uint8_t word) {
    size_t pos = r->begin;
    r->prev = r->begin;
    while (pos < r->end) {
        uint32_t c = r->u[pos];
        uint8_t f = cls_at(r, pos);
        size_t k = contraction(r, pos, 1);
        if (k) {
            pos += k;
            SPECD_TRY(add(r, pos));
            continue;
        }
        /* '[^\r\n\p{L}\p{N}]?\p{L}+' */
        if (!(c == '\r' || c == '\n' || (f & N)) && ((f & word) || (cls_at(r, pos + 1) & word))) {
            pos++;
            while (cls_at(r, pos) & word) pos++;
            SPECD_TRY(add(r, pos));
            continue;
        }
        if (f & N) { /* '\p{N}' */
            SPECD_TRY(add(r, ++pos));
            continue;
        }
        /* ' ?[^\s\p{L}\p{N}]+[\r\n]*'. As in llama.cpp the entry test does not exclude the end
         * of range, so a space that ends the range is a piece by this rule (same bytes). */
        uint8_t f2 = c == ' ' ? cls_at(r, pos + 1) : f;
        if (!(f2 & (S | word | N))) {
            pos += (c == ' ');
            while (!(cls_at(r, pos) & (S | word | N | NONE))) pos++;
            for (uint32_t c2 = cp_at(r, pos); c2 == '\r' || c2 == '\n'; c2 = cp_at(r, ++pos)) {
            }
            SPECD_TRY(add(r, pos));
            continue;
        }
        size_t nws = 0, last_rn = 0;
        while (cls_at(r, pos + nws) & S) {
            uint32_t c2 = r->u[pos + nws];
            if (c2 == '\r' || c2 == '\n') last_rn = pos + nws + 1;
            nws++;
        }
        if (last_rn > 0) { /* '\s*[\r\n]+' */
            pos = last_rn;
        } else if (nws > 1 && pos + nws < r->end) { /* '\s+(?!\S)' */
            pos += nws - 1;
        } else if (nws > 0) { /* '\s+' */
            pos += nws;
        } else {
            pos++;
        }
        SPECD_TRY(add(r, pos));
    }
    return SPECD_OK;
}

static specd_status split_smollm(range *all) {
    /* Digits alone; GPT-2 on each run between them (each run is its own range). */
    size_t i = all->begin, run = all->begin;
    while (i < all->end) {
        if (specd_unicode_class(all->bmp, all->u[i]) & N) {
            if (i > run) {
                range r = *all;
                r.begin = run;
                r.end = i;
                SPECD_TRY(split_gpt2(&r));
            }
            SPECD_TRY(all->emit(all->ctx, i, i + 1));
            run = i + 1;
        }
        i++;
    }
    if (all->end > run) {
        range r = *all;
        r.begin = run;
        SPECD_TRY(split_gpt2(&r));
    }
    return SPECD_OK;
}

specd_status specd_pretok_split(specd_pretok kind, const uint8_t *bmp, const uint32_t *units,
                                size_t n, specd_pretok_emit emit, void *ctx) {
    range r = {bmp, units, 0, n, 0, emit, ctx};
    switch (kind) {
    case SPECD_PRETOK_SMOLLM: return split_smollm(&r);
    case SPECD_PRETOK_QWEN2: return split_qwen(&r, L);
    case SPECD_PRETOK_QWEN35: return split_qwen(&r, L | M);
    }
    return SPECD_E_INTERNAL;
}
